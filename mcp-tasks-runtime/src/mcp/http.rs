//! The Streamable HTTP endpoint: the axum `Router` that serves a
//! [`TaskServer`], and what it changes in a request before rmcp reads it.
//! Serving it on a socket is in `serve`.

mod host_check;
mod options;

use std::{sync::Arc, time::Duration};

use axum::{
    body::{Body, to_bytes},
    extract::Request,
    http::{HeaderValue, Method, StatusCode},
    middleware::{self, Next},
    response::{IntoResponse as _, Response},
};
use rmcp::{
    ServerHandler,
    transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService},
};
use serde_json::Value;

use futures::StreamExt as _;

#[cfg(feature = "admin")]
pub(crate) use host_check::HostCheck;
pub use options::HttpOptions;

use super::{
    envelope::{Front, Inspection},
    listen::{self, Listeners},
    sep1686,
    server::TaskServer,
    sessions::{
        CLIENT, Client, ClientAddress, Clients, EdgeSessions, Opening, SessionGate, SessionLimits,
        StoreSessions,
    },
};

/// The axum `Router` serving `server` at `options.path`, for embedding in a
/// larger application.
pub fn router<H: ServerHandler + Clone>(
    server: TaskServer<H>,
    options: HttpOptions,
) -> axum::Router {
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(true)
        .with_json_response(true)
        .with_allowed_hosts(options.allowed_hosts.clone())
        .with_allowed_origins(options.allowed_origins.clone())
        .with_max_request_body_bytes(options.max_body_bytes);
    config = config.enforce_origin_validation();
    let gate = Arc::new(SessionGate::new(SessionLimits {
        max_sessions: options.max_sessions,
        max_per_client: options.max_sessions_per_client,
        per_minute: options.sessions_per_minute,
        max_initialize_bytes: options.max_initialize_bytes,
        idle_timeout: options.session_idle_timeout,
    }));
    // Sessions (2025-11-25 and earlier) outlive a restart: their state is
    // kept in the engine's front door.
    config.session_store = Some(Arc::new(StoreSessions {
        store: server.engine().front_door().clone(),
        gate: gate.clone(),
    }));
    let front = Front::new(
        server.supported_protocol_versions().into_owned(),
        server.server_info_json().clone(),
        super::envelope::JsonLimits::of(&options),
    );
    let sessions = Arc::new(EdgeSessions::new(
        server.legacy_edge(),
        gate.clone(),
        server.engine().front_door().clone(),
    ));
    let clients = Clients {
        principal: server.principal_fn(),
        loopback_apart: options.loopback_addresses_apart,
    };
    let store = server.engine().front_door().clone();
    #[cfg(feature = "jwt")]
    let auth = server.auth().cloned();
    let listeners = server.listeners().clone();
    // Shared, not cloned per request: the transport's own `call` clones it
    // whole (its host and origin lists with it), and the router clones a
    // service more than once a request.
    let service = Arc::new(StreamableHttpService::new(
        move || Ok(server.for_session()),
        sessions.clone(),
        config,
    ));
    let edge = BodyEdge {
        limit: options.max_body_bytes,
        fill_names: !options.strict_headers,
        body_timeout: options.body_read_timeout,
        listeners,
        front: Arc::new(front),
        gate,
        clients,
        sessions,
        store,
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
        return super::auth::protect(app, auth, &options.path).layer(one_host);
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
    /// The limits on sessions, and who owns each.
    gate: Arc<SessionGate>,
    /// Who makes a request.
    clients: Clients,
    /// The sessions open here, for a `DELETE` of one that is not.
    sessions: Arc<EdgeSessions>,
    /// The sessions' stored state, for the same.
    store: Arc<dyn crate::store::FrontDoorStore>,
}

impl BodyEdge {
    /// Serves one request, as its client (see [`Client`]): a session
    /// another principal owns is unknown to it (404, as rmcp answers an
    /// unknown session); a session ended by `DELETE` is answered `200 OK`
    /// (rmcp says `202`, which the official SDKs take for a failure), and a
    /// `DELETE` of a session that is not open (ended, or never issued) `404`.
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
        let session = req
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok());
        let delete = req.method() == Method::DELETE;
        if let Some(id) = session {
            let usable = self.gate.may_use(id, &client);
            if usable == Some(false) || (delete && usable.is_none() && !self.is_open(id).await) {
                return (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response();
            }
        }
        let mut response = CLIENT
            .scope(client.clone(), self.serve(req, next, client, deadline))
            .await;
        if delete && response.status() == StatusCode::ACCEPTED {
            *response.status_mut() = StatusCode::OK;
        }
        response
    }

    /// Whether session `id`, which this process's gate does not know, is
    /// open here or stored (open on another instance, or before a restart).
    async fn is_open(&self, id: &str) -> bool {
        use rmcp::transport::streamable_http_server::SessionManager as _;
        let sid: rmcp::transport::streamable_http_server::SessionId = id.to_owned().into();
        if self.sessions.has_session(&sid).await.unwrap_or(false) {
            return true;
        }
        // A store that cannot answer: let rmcp try (and answer) as before.
        self.store
            .get_session(id)
            .await
            .map_or(true, |s| s.is_some())
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
        let legacy = headers.contains_key("mcp-session-id");
        let listen_header = matches!(method, None | Some(listen::SPEC_METHOD));
        // Every POST body is read here, whole by the deadline, so that a
        // body that trickles or stalls gets 408 (rather than holding its
        // connection, or rmcp's 500 for a broken body).
        let (mut parts, body) = req.into_parts();
        let mut bytes = match tokio::time::timeout_at(deadline, to_bytes(body, self.limit)).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(e)) => return self.unreadable(&e),
            Err(_) => return self.too_slow(allowed),
        };
        let Inspection {
            refusal,
            modern,
            message,
        } = self.front.inspect(&parts.headers, &bytes);
        if let Some(refusal) = refusal {
            return refusal.answer(parts, next).await;
        }
        let opening = match message.as_ref() {
            Some(m) if !legacy && m.get("method").and_then(Value::as_str) == Some("initialize") => {
                match self.admit(m, &client) {
                    Ok(opening) => Some(opening),
                    Err(refusal) => return *refusal,
                }
            }
            _ => None,
        };
        // A 2026-07-28 `subscriptions/listen` is served as our own method
        // (see `listen`), under its `Mcp-Method` header renamed with it.
        let listen = !legacy && listen_header;
        let mut listening = false;
        // The parsed body is dropped here, before rmcp parses it again.
        if let Some(mut v) = message
            && (fill || legacy || listen)
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
            if legacy && sep1686::rewrite_request(&mut v) {
                bytes = serde_json::to_vec(&v).map_or(bytes, Into::into);
            }
        }
        let end = listening.then(listen::StreamEnd::default);
        if let Some(end) = &end {
            parts.extensions.insert(end.clone());
        }
        if let Some(session) = parts
            .headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            // Where the handler's own notifications go: this request's stream.
            let streams = self.sessions.request_streams(session);
            parts.extensions.insert(streams);
        }
        let response = next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
        if let Some(opening) = opening
            && let Some(id) = response
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
        {
            opening.bind(id);
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
    /// A place for the session an `initialize` opens, or the answer that
    /// refuses it: params over `max_initialize_bytes` (400, `-32602`), or a
    /// client over its session cap or rate (429).
    fn admit(&self, initialize: &Value, client: &Client) -> Result<Opening, Box<Response>> {
        let id = initialize.get("id").cloned().unwrap_or(Value::Null);
        let limits = self.gate.limits();
        let size = initialize
            .get("params")
            .and_then(|p| serde_json::to_vec(p).ok())
            .map_or(0, |p| p.len());
        if size > limits.max_initialize_bytes {
            let message = format!(
                "Invalid params: the initialize params are {size} bytes, over the limit of {} (max_initialize_bytes)",
                limits.max_initialize_bytes
            );
            let error = serde_json::json!({"code": -32602, "message": message,
                "data": {"limit": "max_initialize_bytes", "max": limits.max_initialize_bytes}});
            return Err(Box::new(rpc_refusal(
                StatusCode::BAD_REQUEST,
                &id,
                &error,
                None,
            )));
        }
        self.gate.admit(client).map_err(|refused| {
            let mut data = serde_json::json!({"limit": refused.limit});
            if let Some(wait) = refused.retry_after {
                data["retryAfterMs"] = serde_json::json!(wait.as_millis());
            }
            let error =
                serde_json::json!({"code": -32603, "message": refused.message, "data": data});
            Box::new(rpc_refusal(
                StatusCode::TOO_MANY_REQUESTS,
                &id,
                &error,
                refused.retry_after,
            ))
        })
    }

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

/// A JSON-RPC error answering request `id`, with HTTP `status` (and
/// `Retry-After` when a wait is known).
fn rpc_refusal(status: StatusCode, id: &Value, error: &Value, retry: Option<Duration>) -> Response {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": error}).to_string();
    let mut response = (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response();
    if let Some(wait) = retry
        && let Ok(value) = HeaderValue::from_str(&wait.as_secs().max(1).to_string())
    {
        response
            .headers_mut()
            .insert(axum::http::header::RETRY_AFTER, value);
    }
    response
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
