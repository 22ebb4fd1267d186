//! Transports: stdio and Streamable HTTP, with the defaults a local server wants.

use std::{sync::Arc, time::Duration};

use axum::{
    body::{Body, to_bytes},
    extract::Request,
    http::{HeaderValue, Method, StatusCode},
    middleware::{self, Next},
    response::{IntoResponse as _, Response},
};
use rmcp::{
    ServerHandler, ServiceExt,
    transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService},
};
use serde_json::Value;

use futures::StreamExt as _;
use tower_layer::Layer as _;

use super::{
    envelope::{Front, Inspection},
    listen::{self, Listeners},
    sep1686,
    server::TaskServer,
    sessions::{CLIENT, Client, EdgeSessions, Opening, SessionGate, SessionLimits, StoreSessions},
    stdio::StdioOptions,
};
/// Settings for [`serve_http_with`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HttpOptions {
    /// The endpoint path (default `/mcp`).
    pub path: String,
    /// Reject `tasks/*` requests that omit `Mcp-Name` (default `false`: fill
    /// it in from the body; a header that contradicts the body is always
    /// rejected).
    pub strict_headers: bool,
    /// Accepted `Host` values (default: loopback names only, against DNS
    /// rebinding). Set your public host names when serving beyond loopback.
    pub allowed_hosts: Vec<String>,
    /// Accepted browser `Origin`s (default: loopback origins on any port);
    /// a request with another `Origin` gets HTTP 403.
    pub allowed_origins: Vec<String>,
    /// Largest request body accepted, in bytes (default 4 MiB).
    pub max_body_bytes: usize,
    /// How long a client may take to send a request's headers (default
    /// 10 s), counted from when the server starts waiting for them: on a new
    /// connection, and between requests on a kept-alive one, so it is also
    /// how long an idle connection stays open. hyper's
    /// `header_read_timeout`, which has one timer for both; past it the
    /// connection is closed.
    pub header_read_timeout: Duration,
    /// How long a request body may go without a byte arriving (default
    /// 30 s; tower-http's `RequestBodyTimeout`): past it the request is
    /// answered `408 Request Timeout` and the connection closed.
    pub body_read_timeout: Duration,
    /// How many connections are served at once (default 1024). The rest
    /// wait, unaccepted, in the listener's backlog until one closes; with
    /// the timeouts above, a stalled client frees its place in bounded time.
    /// Only [`serve_http_on`] and [`serve_http_with`] apply it (a
    /// [`router`] embedded in another server is served by that server).
    pub max_connections: usize,
    /// How many 2025-11-25 sessions one client may have open at once
    /// (default 256): a client is its bearer token's subject under
    /// [`auth`](super::TaskServerBuilder::auth), otherwise its IP address
    /// (so on loopback, every local client together). One more
    /// `initialize` is answered HTTP 429 with a JSON-RPC error naming
    /// `max_sessions_per_client`, until one closes (`DELETE`) or goes idle.
    pub max_sessions_per_client: usize,
    /// How many sessions one client may open a minute (default 120, at
    /// most that many at once, then one every `60 / n` seconds). One more
    /// is answered HTTP 429 with `Retry-After` and a JSON-RPC error naming
    /// `sessions_per_minute`.
    pub sessions_per_minute: u32,
    /// Largest `initialize` params accepted, in bytes of JSON (default
    /// 64 KiB): a session keeps them in memory and in the store. A larger
    /// `initialize` is answered HTTP 400 with a `-32602` error naming
    /// `max_initialize_bytes`, and nothing is kept.
    pub max_initialize_bytes: usize,
    /// How long a session may go without a message before it is closed
    /// and its stored state deleted (default 5 minutes, rmcp's). Every
    /// message in the session renews it, the client's and the server's
    /// (the progress of a call still running keeps its session open); an
    /// open stream with nothing on it does not.
    pub session_idle_timeout: Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            path: "/mcp".into(),
            strict_headers: false,
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            allowed_origins: vec![
                "http://localhost:*".into(),
                "http://127.0.0.1:*".into(),
                "http://[::1]:*".into(),
                "https://localhost:*".into(),
                "https://127.0.0.1:*".into(),
            ],
            max_body_bytes: 4 * 1024 * 1024,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            max_connections: 1024,
            max_sessions_per_client: 256,
            sessions_per_minute: 300,
            max_initialize_bytes: 64 * 1024,
            session_idle_timeout: Duration::from_secs(300),
        }
    }
}

impl HttpOptions {
    /// Rejects a missing `Mcp-Name` on `tasks/*` too.
    #[must_use]
    pub fn strict_headers(mut self, strict: bool) -> Self {
        self.strict_headers = strict;
        self
    }

    /// Replaces the accepted `Host` values.
    #[must_use]
    pub fn allowed_hosts(mut self, hosts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.allowed_hosts = hosts.into_iter().map(Into::into).collect();
        self
    }

    /// Replaces the accepted `Origin`s.
    #[must_use]
    pub fn allowed_origins(mut self, origins: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.allowed_origins = origins.into_iter().map(Into::into).collect();
        self
    }

    /// Sets [`HttpOptions::header_read_timeout`].
    #[must_use]
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// Sets [`HttpOptions::body_read_timeout`].
    #[must_use]
    pub fn body_read_timeout(mut self, timeout: Duration) -> Self {
        self.body_read_timeout = timeout;
        self
    }

    /// Sets [`HttpOptions::max_connections`] (at least 1).
    #[must_use]
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Sets [`HttpOptions::max_body_bytes`].
    #[must_use]
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Sets [`HttpOptions::max_sessions_per_client`] (at least 1).
    #[must_use]
    pub fn max_sessions_per_client(mut self, n: usize) -> Self {
        self.max_sessions_per_client = n.max(1);
        self
    }

    /// Sets [`HttpOptions::sessions_per_minute`] (at least 1).
    #[must_use]
    pub fn sessions_per_minute(mut self, n: u32) -> Self {
        self.sessions_per_minute = n.max(1);
        self
    }

    /// Sets [`HttpOptions::max_initialize_bytes`].
    #[must_use]
    pub fn max_initialize_bytes(mut self, bytes: usize) -> Self {
        self.max_initialize_bytes = bytes;
        self
    }

    /// Sets [`HttpOptions::session_idle_timeout`].
    #[must_use]
    pub fn session_idle_timeout(mut self, timeout: Duration) -> Self {
        self.session_idle_timeout = timeout;
        self
    }

    /// Sets the endpoint path.
    #[must_use]
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }
}

/// The MCP endpoint's `Host` and `Origin` checks (rmcp's, against DNS
/// rebinding: the same lists, matched the same way), for another address
/// of the program: the admin address asks it before serving anything.
///
/// rmcp checks both before it looks at a request's method, so the check
/// hands it the request's head as an `OPTIONS` request: a request that
/// passes comes back `405 Method Not Allowed`; one that fails, with rmcp's
/// `403 Forbidden` and its message, which is answered as is.
#[cfg(feature = "admin")]
#[derive(Clone)]
pub(crate) struct HostCheck(
    Arc<
        StreamableHttpService<
            HostCheckOnly,
            rmcp::transport::streamable_http_server::session::never::NeverSessionManager,
        >,
    >,
);

/// The handler behind [`HostCheck`]'s service: never called, since no
/// request it is given gets past the checks to a method.
#[cfg(feature = "admin")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct HostCheckOnly;

#[cfg(feature = "admin")]
impl ServerHandler for HostCheckOnly {}

#[cfg(feature = "admin")]
impl std::fmt::Debug for HostCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCheck").finish_non_exhaustive()
    }
}

#[cfg(feature = "admin")]
impl HostCheck {
    /// Accepts the `Host` values and `Origin`s listed, as
    /// [`HttpOptions::allowed_hosts`] and [`HttpOptions::allowed_origins`] do.
    pub(crate) fn new(hosts: &[String], origins: &[String]) -> Self {
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_allowed_hosts(hosts.to_vec())
            .with_allowed_origins(origins.to_vec())
            .enforce_origin_validation();
        let service =
            StreamableHttpService::new(|| Ok(HostCheckOnly), Arc::new(Default::default()), config);
        Self(Arc::new(service))
    }

    /// `None` when a request with this head may be served; otherwise the
    /// answer to give it (`403`, naming the header refused).
    pub(crate) async fn refusal(&self, head: &axum::http::request::Parts) -> Option<Response> {
        let mut probe = Request::builder()
            .method(Method::OPTIONS)
            .uri(head.uri.clone());
        for name in [axum::http::header::HOST, axum::http::header::ORIGIN] {
            for value in head.headers.get_all(&name) {
                probe = probe.header(&name, value);
            }
        }
        let Ok(probe) = probe.body(http_body_util::Empty::<axum::body::Bytes>::new()) else {
            return Some((StatusCode::BAD_REQUEST, "Bad Request: unreadable head").into_response());
        };
        let answer = self.0.handle(probe).await;
        if answer.status() == StatusCode::METHOD_NOT_ALLOWED {
            return None;
        }
        Some(answer.map(Body::new))
    }
}

/// The default store file: `MCP_TASKS_STORE` or `mcp-tasks.db` in the working directory.
#[cfg(feature = "sqlite")]
fn default_store_path() -> std::path::PathBuf {
    std::env::var_os("MCP_TASKS_STORE").map_or_else(|| "mcp-tasks.db".into(), Into::into)
}

#[cfg(feature = "sqlite")]
async fn default_engine() -> crate::Result<crate::Engine> {
    let store = crate::store::SqliteStore::open(default_store_path()).await?;
    crate::Engine::builder(store).start().await
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Serves every registered `#[task_tool]` over Streamable HTTP at
/// `http://ADDR/mcp`, durable in the embedded SQLite store (`mcp-tasks.db` in
/// the working directory, or `MCP_TASKS_STORE`).
///
/// Needs the `sqlite` feature (on by default); without it, build an engine on
/// your own store and use [`serve_http_with`].
///
/// # Errors
///
/// When the store cannot be opened, the tools are invalid, or the address
/// cannot be bound.
#[cfg(feature = "sqlite")]
pub async fn serve_http(addr: impl tokio::net::ToSocketAddrs) -> Result<(), BoxError> {
    let engine = default_engine().await?;
    serve_http_with(TaskServer::new(engine), addr, HttpOptions::default()).await
}

/// Serves every registered `#[task_tool]` over stdio (newline-delimited
/// JSON-RPC on stdin/stdout; logs belong on stderr), durable in the embedded
/// SQLite store like [`serve_http`].
///
/// Needs the `sqlite` feature (on by default); without it, use
/// [`serve_stdio_with`].
///
/// # Errors
///
/// As [`serve_http`], or when stdio fails.
#[cfg(feature = "sqlite")]
pub async fn serve_stdio() -> Result<(), BoxError> {
    let engine = default_engine().await?;
    serve_stdio_with(TaskServer::new(engine)).await
}

/// Serves `server` over stdio until the client closes stdin, with the
/// default [`StdioOptions`].
///
/// # Errors
///
/// When the transport fails.
pub async fn serve_stdio_with<H: ServerHandler + Clone>(
    server: TaskServer<H>,
) -> Result<(), BoxError> {
    serve_stdio_with_options(server, StdioOptions::default()).await
}

/// Serves `server` over stdio until the client closes stdin, with `options`
/// (the longest line read).
///
/// # Errors
///
/// When the transport fails.
pub async fn serve_stdio_with_options<H: ServerHandler + Clone>(
    server: TaskServer<H>,
    options: StdioOptions,
) -> Result<(), BoxError> {
    let server_info = server.server_info_json().clone();
    let transport = super::stdio::transport(server.legacy_edge(), server_info, &options);
    let running = server.serve(transport).await?;
    running.waiting().await?;
    Ok(())
}

/// Serves `server` over Streamable HTTP until the process ends.
///
/// # Errors
///
/// When the address cannot be bound or the server fails.
pub async fn serve_http_with<H: ServerHandler + Clone>(
    server: TaskServer<H>,
    addr: impl tokio::net::ToSocketAddrs,
    options: HttpOptions,
) -> Result<(), BoxError> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    serve_http_on(server, listener, options).await
}

/// Serves `server` over Streamable HTTP on a listener the caller bound (for
/// example to port 0, to learn the port first).
///
/// # Errors
///
/// When the server fails.
pub async fn serve_http_on<H: ServerHandler + Clone>(
    server: TaskServer<H>,
    listener: tokio::net::TcpListener,
    options: HttpOptions,
) -> Result<(), BoxError> {
    let local = listener.local_addr()?;
    tracing::info!(%local, path = %options.path, "serving MCP over Streamable HTTP");
    let (header_timeout, cap) = (options.header_read_timeout, options.max_connections);
    let app = router(server, options);
    serve_connections(listener, app, header_timeout, cap).await;
    Ok(())
}

/// Accepts connections while fewer than `cap` are open, and serves each
/// with hyper's HTTP/1 server, which closes it when a request's headers
/// take longer than `header_timeout`.
async fn serve_connections(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    header_timeout: Duration,
    cap: usize,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(cap.max(1)));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(true);
    loop {
        // Hold a place before accepting: beyond the cap, connections wait
        // in the backlog (they are not refused) until one closes.
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, or a connection reset before it
                // was accepted: try again shortly rather than spin.
                tracing::warn!(error = %e, "could not accept a connection");
                drop(permit);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Responses go out in pieces: without this, Nagle's algorithm waits
        // for the client's delayed ACK (~40 ms) on most sequential requests.
        let _ = tcp.set_nodelay(true);
        // The peer's address, where axum's `ConnectInfo` puts it (an
        // embedder serving `router` with `into_make_service_with_connect_info`
        // gives the same): limits without a principal count by it.
        let app = axum::Extension(axum::extract::ConnectInfo(peer)).layer(app.clone());
        let service = hyper_util::service::TowerToHyperService::new(app);
        let connection = http
            .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
            .with_upgrades();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
}

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
    );
    let sessions = EdgeSessions::new(
        server.legacy_edge(),
        gate.clone(),
        server.engine().front_door().clone(),
    );
    #[cfg(feature = "jwt")]
    let auth = server.auth().cloned();
    let listeners = server.listeners().clone();
    let service =
        StreamableHttpService::new(move || Ok(server.for_session()), Arc::new(sessions), config);
    let edge = BodyEdge {
        limit: options.max_body_bytes,
        fill_names: !options.strict_headers,
        body_timeout: options.body_read_timeout,
        listeners,
        front: Arc::new(front),
        gate,
    };
    let app = axum::Router::new()
        .route_service(&options.path, service)
        .layer(middleware::from_fn(move |req, next| {
            edge.clone().run(req, next)
        }))
        // Outside the edge, which reads the body through it.
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            options.body_read_timeout,
        ));
    // Tokens are checked before anything else reads the request.
    #[cfg(feature = "jwt")]
    if let Some(auth) = auth {
        return super::auth::protect(app, auth, &options.path);
    }
    app
}

/// What the server changes in a request body before rmcp reads it.
#[derive(Debug, Clone)]
struct BodyEdge {
    limit: usize,
    /// Fill a missing `Mcp-Name` on `tasks/get|update|cancel` from
    /// `params.taskId` (off with `strict_headers`).
    fill_names: bool,
    /// For the message of a body that stalled.
    body_timeout: Duration,
    /// The server's listen streams (see `listen`).
    listeners: Arc<Listeners>,
    /// The envelope checks, and `serverInfo` on 2026-07-28 results.
    front: Arc<Front>,
    /// The limits on sessions, and who owns each.
    gate: Arc<SessionGate>,
}

impl BodyEdge {
    /// Serves one request, as its client (see [`Client`]): a session
    /// another principal owns is unknown to it (404, as rmcp answers an
    /// unknown session); a session ended by `DELETE` is answered `200 OK`
    /// (rmcp says `202`, which the official SDKs take for a failure).
    async fn run(self, req: Request, next: Next) -> Response {
        let client = Client::of(&req);
        let session = req
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok());
        if let Some(id) = session
            && self.gate.may_use(id, &client) == Some(false)
        {
            return (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response();
        }
        let delete = req.method() == Method::DELETE;
        let mut response = CLIENT
            .scope(client.clone(), self.serve(req, next, client))
            .await;
        if delete && response.status() == StatusCode::ACCEPTED {
            *response.status_mut() = StatusCode::OK;
        }
        response
    }

    async fn serve(self, req: Request, next: Next, client: Client) -> Response {
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
        // Every POST body is read here, through the body timeout, so that a
        // body that stalls gets 408 rather than rmcp's 500 for a broken body.
        let (mut parts, body) = req.into_parts();
        let mut bytes = match to_bytes(body, self.limit).await {
            Ok(bytes) => bytes,
            Err(e) => return self.unreadable(&e),
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
        if (fill || legacy || listen)
            && let Some(mut v) = message
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

    /// A listen stream's response: not buffered by proxies (R90), and
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

    /// The answer to a body that could not be read: 408 when it stalled,
    /// 413 when it is too large (as rmcp answers), 400 otherwise.
    fn unreadable(&self, e: &axum::Error) -> Response {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(err) = source {
            if err.is::<tower_http::timeout::TimeoutError>() {
                let message = format!(
                    "Request Timeout: the request body stalled for {} (body_read_timeout)",
                    humantime::format_duration(self.body_timeout)
                );
                return (
                    StatusCode::REQUEST_TIMEOUT,
                    [("connection", "close")],
                    message,
                )
                    .into_response();
            }
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
