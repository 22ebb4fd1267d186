//! The Streamable HTTP endpoint: the axum `Router` that serves a
//! [`TaskServer`], and what it changes in a request before rmcp reads it.
//! Serving it on a socket is in `serve`.

mod fast_get;
mod host_check;

use std::{sync::Arc, time::Duration};

use axum::{
    body::{Body, to_bytes},
    extract::Request,
    http::{HeaderValue, Method, StatusCode, header::CONTENT_TYPE},
    middleware::{self, Next},
    response::{IntoResponse as _, Response},
};
use rmcp::{
    ServerHandler,
    transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService},
};
use serde_json::Value;

#[cfg(not(feature = "mcp-2025-11-25"))]
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use futures::StreamExt as _;

#[cfg(feature = "admin")]
pub(crate) use host_check::HostCheck;

use self::{fast_get::FastGet, host_check::HostCheck as Hosts};
use super::{
    envelope::{Front, Inspection},
    listen::{self, Listeners},
    options::JsonLimits,
    peer::{Client, ClientAddress, Clients},
    server::TaskServer,
};
#[cfg(feature = "mcp-2025-11-25")]
use crate::mcp_2025::{HttpSessions, WithOlder};

/// The axum `Router` serving `server` at its
/// [`HttpOptions::path`](super::HttpOptions::path), for embedding in a larger
/// application (what [`serve`](super::serve) serves, less the bounds on
/// connections, which belong to the server that serves it).
pub fn router<H: ServerHandler + Clone>(server: TaskServer<H>) -> axum::Router {
    let options = server.http_options().clone();
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_allowed_hosts(options.allowed_hosts.clone())
        .with_allowed_origins(options.allowed_origins.clone())
        .with_max_request_body_bytes(options.max_body_bytes)
        .enforce_origin_validation();
    #[cfg(feature = "mcp-2025-11-25")]
    let (handler, older) = {
        let handler = WithOlder::new(server.clone());
        let store = server.engine().front_door().clone();
        let older = Arc::new(HttpSessions::new(handler.edge().clone(), store, &options));
        (handler, older)
    };
    #[cfg(feature = "mcp-2025-11-25")]
    let (config, sessions) = (older.configure(config), older.manager());
    #[cfg(not(feature = "mcp-2025-11-25"))]
    let (handler, sessions) = (server.clone(), Arc::new(LocalSessionManager::default()));
    let front = Front::new(
        handler.supported_protocol_versions().into_owned(),
        server.server_info_json().clone(),
        JsonLimits::new(options.max_json_values, options.max_json_depth),
        server.engine().clone(),
    );
    let fast = FastGet {
        path: options.path.clone(),
        fill_names: !options.strict_headers,
        hosts: Hosts::new(&options.allowed_hosts, &options.allowed_origins),
        limits: JsonLimits::new(options.max_json_values, options.max_json_depth),
        engine: server.engine().clone(),
        server_info: server.server_info_json().clone(),
        settings: server.settings().clone(),
    };
    let clients = Clients {
        principal: server.principal_fn(),
        loopback_apart: options.loopback_addresses_apart,
    };
    #[cfg(feature = "jwt")]
    let auth = server.auth().cloned();
    let listeners = server.listeners().clone();
    // Shared, not cloned per request: the transport's own `call` clones it
    // whole (its host and origin lists with it), and the router clones a
    // service more than once a request.
    // One handler a session (each with its own log level); one a request
    // outside sessions.
    #[cfg(feature = "mcp-2025-11-25")]
    let factory = move || Ok(handler.for_session());
    #[cfg(not(feature = "mcp-2025-11-25"))]
    let factory = move || Ok(handler.clone());
    let service = Arc::new(StreamableHttpService::new(factory, sessions, config));
    let edge = BodyEdge {
        limit: options.max_body_bytes,
        fill_names: !options.strict_headers,
        body_timeout: options.body_read_timeout,
        listeners,
        front: Arc::new(front),
        fast: Arc::new(fast),
        clients,
        #[cfg(feature = "mcp-2025-11-25")]
        older,
    };
    let app = axum::Router::new()
        .route(
            &options.path,
            axum::routing::any(move |req: Request| {
                let service = service.clone();
                async move { service.handle(req).await }
            }),
        )
        .layer(middleware::from_fn(move |req, next| {
            edge.clone().run(req, next)
        }));
    // Tokens are checked before anything else reads the request, and a
    // second `Host` before the token.
    let one_host = middleware::from_fn(host_check::one_host);
    #[cfg(feature = "jwt")]
    if let Some(auth) = auth {
        return crate::auth::protect(app, auth, &options.path).layer(one_host);
    }
    app.layer(one_host)
}

/// The time any body gets, whatever its length (see `BodyEdge::body_time`).
const BODY_GRACE: Duration = Duration::from_secs(5);

/// The slowest a body that declares its length may arrive, in bytes a
/// second, once [`BODY_GRACE`] has passed: 32 KiB/s (256 kbit/s).
const MIN_BODY_RATE: u64 = 32 * 1024;

/// What the server changes in a request body before rmcp reads it.
#[derive(Debug, Clone)]
struct BodyEdge {
    limit: usize,
    /// Fill a missing `Mcp-Name` on `tasks/get|update|cancel` from
    /// `params.taskId` (off with `strict_headers`).
    fill_names: bool,
    /// How long a request's whole body may take, from its head.
    body_timeout: Duration,
    /// The server's listen streams (see `listen`).
    listeners: Arc<Listeners>,
    /// The envelope checks, and `serverInfo` on 2026-07-28 results.
    front: Arc<Front>,
    /// `tasks/get` answered here (see `fast_get`).
    fast: Arc<FastGet>,
    /// Who makes a request.
    clients: Clients,
    /// The 2025-11-25 sessions.
    #[cfg(feature = "mcp-2025-11-25")]
    older: Arc<HttpSessions>,
}

impl BodyEdge {
    /// Serves one request, as its client (see [`Client`]), in its
    /// 2025-11-25 session if it names one (see `HttpSessions::serve`).
    async fn run(self, req: Request, next: Next) -> Response {
        // The whole body is due within `body_read_timeout` of the head, or
        // sooner for a short one (see `body_time`).
        let allowed = self.body_time(req.headers());
        let deadline = (tokio::time::Instant::now() + allowed, allowed);
        let (mut parts, body) = req.into_parts();
        let client = self.clients.of(&parts);
        if let Some(addr) = client.address() {
            parts.extensions.insert(ClientAddress(addr));
        }
        let req = Request::from_parts(parts, body);
        #[cfg(feature = "mcp-2025-11-25")]
        {
            let older = self.older.clone();
            older
                .serve(req, client.clone(), |req| {
                    self.serve(req, next, client, deadline)
                })
                .await
        }
        #[cfg(not(feature = "mcp-2025-11-25"))]
        self.serve(req, next, client, deadline).await
    }

    async fn serve(
        self,
        req: Request,
        next: Next,
        client: Client,
        (deadline, allowed): (tokio::time::Instant, Duration),
    ) -> Response {
        if req.method() != Method::POST {
            return next.run(req).await;
        }
        let headers = req.headers();
        let method = headers.get("mcp-method").and_then(|v| v.to_str().ok());
        let fill = self.fill_names
            && !headers.contains_key("mcp-name")
            && matches!(method, Some("tasks/get" | "tasks/update" | "tasks/cancel"));
        // A request in a session comes from a 2025-11-25 (or earlier) client.
        let older = cfg!(feature = "mcp-2025-11-25") && headers.contains_key("mcp-session-id");
        let listen_header = matches!(method, None | Some(listen::SPEC_METHOD));
        let poll = !older && method == Some("tasks/get");
        // Every POST body is read here, whole by the deadline, so that a
        // body that trickles or stalls gets 408 (rather than holding its
        // connection, or rmcp's 500 for a broken body).
        let (mut parts, body) = req.into_parts();
        let mut bytes = match tokio::time::timeout_at(deadline, to_bytes(body, self.limit)).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(e)) => return self.unreadable(&e),
            Err(_) => return self.too_slow(allowed),
        };
        if poll && let Some(answer) = self.fast.answer(&mut parts, &bytes).await {
            let (body, _) = self.front.stamped(answer.into());
            let json = HeaderValue::from_static("application/json");
            let mut response = Response::new(Body::from(body));
            response.headers_mut().insert(CONTENT_TYPE, json);
            return response;
        }
        let Inspection {
            refusal,
            modern,
            message,
        } = self.front.inspect(&parts.headers, &bytes);
        if let Some(refusal) = refusal {
            return refusal.answer(parts, next).await;
        }
        #[cfg(feature = "mcp-2025-11-25")]
        let opening = match message.as_ref() {
            Some(m) if !older && m.get("method").and_then(Value::as_str) == Some("initialize") => {
                match self.older.admit(m, &client) {
                    Ok(opening) => Some(opening),
                    Err(refusal) => return *refusal,
                }
            }
            _ => None,
        };
        #[cfg(not(feature = "mcp-2025-11-25"))]
        let _ = client;
        // A 2026-07-28 `subscriptions/listen` is served as our own method
        // (see `listen`), under its `Mcp-Method` header renamed with it.
        let listen = !older && listen_header;
        let mut listening = false;
        // The parsed body is dropped here, before rmcp parses it again.
        if let Some(mut v) = message
            && (fill || older || listen)
        {
            if listen && listen::rename(&mut v) {
                listening = true;
                if parts.headers.contains_key("mcp-method") {
                    parts
                        .headers
                        .insert("mcp-method", HeaderValue::from_static(listen::METHOD));
                }
                bytes = serde_json::to_vec(&v).map_or(bytes, Into::into);
            }
            if fill
                && let Some(id) = v.pointer("/params/taskId").and_then(Value::as_str)
                && let Some(value) = header_value(id)
            {
                parts.headers.insert("mcp-name", value);
            }
            #[cfg(feature = "mcp-2025-11-25")]
            if older && crate::mcp_2025::rewrite_request(&mut v) {
                bytes = serde_json::to_vec(&v).map_or(bytes, Into::into);
            }
        }
        let end = listening.then(listen::StreamEnd::default);
        if let Some(end) = &end {
            parts.extensions.insert(end.clone());
        }
        #[cfg(feature = "mcp-2025-11-25")]
        self.older.prepare(&mut parts);
        let response = next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
        #[cfg(feature = "mcp-2025-11-25")]
        if let Some(opening) = opening {
            opening.bind_to(&response);
        }
        if let Some(end) = end {
            return self.listen_response(response, end);
        }
        if modern {
            return self.front.stamp(response).await;
        }
        response
    }

    /// A listen stream's response: not buffered by proxies (core Subscriptions, stream lifecycle), and
    /// counted until hyper has written its last byte, so that a graceful
    /// shutdown waits for the final answers to go out.
    fn listen_response(&self, response: Response, end: listen::StreamEnd) -> Response {
        let (mut parts, body) = response.into_parts();
        let sse = parts
            .headers
            .get(axum::http::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        if !sse {
            return Response::from_parts(parts, body);
        }
        parts
            .headers
            .insert("x-accel-buffering", HeaderValue::from_static("no"));
        let stream = ListenBody {
            inner: Some(body.into_data_stream()),
            end,
            _flushing: self.listeners.flushing(),
        };
        Response::from_parts(parts, Body::from_stream(stream))
    }
}

impl BodyEdge {
    /// How long a request's body may take from its head: at most
    /// `body_read_timeout`, and for a body that declares its length
    /// (`Content-Length`) [`BODY_GRACE`] plus a second for each
    /// [`MIN_BODY_RATE`] bytes of it, so that a short body sent a byte at a
    /// time holds its connection for seconds, not for the whole timeout.
    fn body_time(&self, headers: &axum::http::HeaderMap) -> Duration {
        let declared = headers
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        match declared {
            Some(bytes) => self
                .body_timeout
                .min(BODY_GRACE + Duration::from_secs(bytes / MIN_BODY_RATE)),
            None => self.body_timeout,
        }
    }

    /// The answer to a body not whole by its deadline (`allowed` after its
    /// head): 408, and the connection closed (what is left of the body is
    /// never read).
    fn too_slow(&self, allowed: Duration) -> Response {
        let message = format!(
            "Request Timeout: the request body did not arrive whole within {} of its headers (body_read_timeout {}; a body that declares its length gets {} plus 1 s per {} KiB of it)",
            humantime::format_duration(allowed),
            humantime::format_duration(self.body_timeout),
            humantime::format_duration(BODY_GRACE),
            MIN_BODY_RATE / 1024,
        );
        (
            StatusCode::REQUEST_TIMEOUT,
            [("connection", "close")],
            message,
        )
            .into_response()
    }

    /// The answer to a body that could not be read: 413 when it is too
    /// large (as rmcp answers), 400 otherwise.
    fn unreadable(&self, e: &axum::Error) -> Response {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(err) = source {
            if err.is::<http_body_util::LengthLimitError>() {
                let message = format!(
                    "Payload Too Large: request body exceeds {} bytes",
                    self.limit
                );
                return (StatusCode::PAYLOAD_TOO_LARGE, message).into_response();
            }
            source = err.source();
        }
        (
            StatusCode::BAD_REQUEST,
            format!("Bad Request: unreadable body: {e}"),
        )
            .into_response()
    }
}

/// A listen stream's body. When hyper drops it before its end (the client
/// closed the stream), it tells the handler to end and reads what is left
/// (the handler's answer) on its own for up to 5 s, so that the request
/// ends as answered rather than cancelled.
struct ListenBody {
    inner: Option<axum::body::BodyDataStream>,
    end: listen::StreamEnd,
    _flushing: listen::Counted,
}

impl futures::Stream for ListenBody {
    type Item = Result<axum::body::Bytes, axum::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let Some(inner) = self.inner.as_mut() else {
            return std::task::Poll::Ready(None);
        };
        let next = inner.poll_next_unpin(cx);
        if let std::task::Poll::Ready(None) = next {
            self.inner = None;
        }
        next
    }
}

impl Drop for ListenBody {
    fn drop(&mut self) {
        let Some(mut rest) = self.inner.take() else {
            return;
        };
        self.end.fire();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let drained = async { while rest.next().await.is_some() {} };
                let _ = tokio::time::timeout(Duration::from_secs(5), drained).await;
            });
        }
    }
}

/// A header value for `s`: as is when it is a plain token, otherwise in the
/// spec's `=?base64?…?=` form.
fn header_value(s: &str) -> Option<HeaderValue> {
    let plain = !s.is_empty()
        && s.bytes().all(|b| (0x21..=0x7e).contains(&b))
        && !(s.starts_with("=?base64?") && s.ends_with("?="));
    if plain {
        HeaderValue::from_str(s).ok()
    } else {
        use base64::Engine as _;
        let encoded = base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
        HeaderValue::from_str(&format!("=?base64?{encoded}?=")).ok()
    }
}
