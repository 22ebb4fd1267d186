//! Serving a [`TaskServer`] over Streamable HTTP or stdio: until the
//! transport ends or, with a graceful shutdown, until a signal and the drain
//! that follows it.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use futures::future::BoxFuture;
use rmcp::{ServerHandler, ServiceExt as _};
use tokio::{net::TcpListener, sync::watch};
use tower_layer::Layer as _;

use super::{http::HttpOptions, server::TaskServer, stdio::StdioOptions};
use crate::Engine;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long running steps may take to finish once a graceful shutdown
/// begins, unless [`ServeHttp::drain_timeout`] says otherwise.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// How long, after the drain, listen streams and open connections get to
/// write their last answers before the server returns.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// The default store file: `MCP_TASKS_STORE` or `mcp-tasks.db` in the working directory.
#[cfg(feature = "sqlite")]
fn default_store_path() -> std::path::PathBuf {
    std::env::var_os("MCP_TASKS_STORE").map_or_else(|| "mcp-tasks.db".into(), Into::into)
}

#[cfg(feature = "sqlite")]
async fn default_engine() -> crate::Result<Engine> {
    let store = crate::store::SqliteStore::open(default_store_path()).await?;
    Engine::builder(store).start().await
}

/// Serves every registered `#[task_tool]` over Streamable HTTP at
/// `http://ADDR/mcp`, durable in the embedded SQLite store (`mcp-tasks.db` in
/// the working directory, or `MCP_TASKS_STORE`).
///
/// Needs the `sqlite` feature (on by default); without it, build an engine on
/// your own store and use [`serve_http_with`], which can also shut down
/// gracefully.
///
/// # Errors
///
/// When the store cannot be opened, the tools are invalid, or the address
/// cannot be bound.
#[cfg(feature = "sqlite")]
pub async fn serve_http(addr: impl tokio::net::ToSocketAddrs + Send) -> Result<(), BoxError> {
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
/// default [`StdioOptions`]. Await it, or give it a signal to shut down on
/// first ([`ServeStdio::with_graceful_shutdown`]).
///
/// # Errors
///
/// When the transport fails.
pub fn serve_stdio_with<H: ServerHandler + Clone>(server: TaskServer<H>) -> ServeStdio<H> {
    serve_stdio_with_options(server, StdioOptions::default())
}

/// Serves `server` over stdio until the client closes stdin, with `options`
/// (the longest line read). See [`serve_stdio_with`].
///
/// # Errors
///
/// When the transport fails.
pub fn serve_stdio_with_options<H: ServerHandler + Clone>(
    server: TaskServer<H>,
    options: StdioOptions,
) -> ServeStdio<H> {
    ServeStdio {
        setup: Some(Box::new(StdioSetup {
            server,
            options,
            signal: None,
            drain_timeout: None,
        })),
        running: None,
    }
}

/// Serves `server` over Streamable HTTP at `addr` until the process ends, or,
/// with [`ServeHttp::with_graceful_shutdown`], until the signal comes and
/// the engine has drained.
///
/// ```no_run
/// use mcp_tasks_runtime::{Engine, mcp::{HttpOptions, TaskServer, serve_http_with}, store::MemoryStore};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let engine = Engine::builder(MemoryStore::new()).start().await?;
/// serve_http_with(TaskServer::new(engine), "127.0.0.1:8080", HttpOptions::default())
///     .with_graceful_shutdown(async {
///         let _ = tokio::signal::ctrl_c().await;
///     })
///     .await
/// # }
/// ```
///
/// # Errors
///
/// When the address cannot be bound or the server fails.
pub fn serve_http_with<'a, H: ServerHandler + Clone>(
    server: TaskServer<H>,
    addr: impl tokio::net::ToSocketAddrs + Send + 'a,
    options: HttpOptions,
) -> ServeHttp<'a, H> {
    ServeHttp::new(server, Box::pin(TcpListener::bind(addr)), options)
}

/// Serves `server` over Streamable HTTP on a listener the caller bound (for
/// example to port 0, to learn the port first). See [`serve_http_with`].
///
/// # Errors
///
/// When the server fails.
pub fn serve_http_on<H: ServerHandler + Clone>(
    server: TaskServer<H>,
    listener: TcpListener,
    options: HttpOptions,
) -> ServeHttp<'static, H> {
    ServeHttp::new(server, Box::pin(async move { Ok(listener) }), options)
}

/// What a graceful shutdown waits for, and how long it lets steps run.
struct Shutdown<'a> {
    signal: BoxFuture<'a, ()>,
    drain_timeout: Duration,
}

impl<'a> Shutdown<'a> {
    fn new(signal: BoxFuture<'a, ()>, drain_timeout: Option<Duration>) -> Self {
        Self {
            signal,
            drain_timeout: drain_timeout.unwrap_or(DRAIN_TIMEOUT),
        }
    }
}

/// A server on Streamable HTTP, made by [`serve_http_with`] and
/// [`serve_http_on`]: a future that serves until the process ends, unless
/// it is given a signal to shut down on.
///
/// With [`ServeHttp::with_graceful_shutdown`], when the signal comes the
/// engine drains ([`Engine::drain`]): a `tools/call` that would create a
/// task is refused with JSON-RPC error `-32603` whose message says the
/// server is shutting down (`data.reason: "shutting_down"`), while
/// `tasks/get`, `tasks/update` (answers), `tasks/cancel`, `tasks/result` and
/// their 2025-11-25 forms are still served, and each running step finishes
/// and is journaled (for up to [`ServeHttp::drain_timeout`], 30 s by
/// default). Then the engine gives up its tasks, so that another instance
/// sharing the store takes them over at once (or this one, after a restart,
/// from their journals); `subscriptions/listen` streams get their final
/// answer; the server stops accepting connections, lets open ones finish
/// the request they are in (for up to 2 s), and the future returns `Ok`.
/// Should the transport fail first, the engine gives up its tasks too.
///
/// # Errors
///
/// When the address cannot be bound, the server fails, or the store refuses
/// to release the leases at the end of a graceful shutdown.
#[must_use = "a server does nothing unless it is awaited"]
pub struct ServeHttp<'a, H> {
    setup: Option<Box<HttpSetup<'a, H>>>,
    running: Option<BoxFuture<'a, Result<(), BoxError>>>,
}

struct HttpSetup<'a, H> {
    server: TaskServer<H>,
    bind: BoxFuture<'a, std::io::Result<TcpListener>>,
    options: HttpOptions,
    signal: Option<BoxFuture<'a, ()>>,
    drain_timeout: Option<Duration>,
}

impl<H> std::fmt::Debug for ServeHttp<'_, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeHttp")
            .field("started", &self.running.is_some())
            .finish_non_exhaustive()
    }
}

impl<'a, H: ServerHandler + Clone> ServeHttp<'a, H> {
    fn new(
        server: TaskServer<H>,
        bind: BoxFuture<'a, std::io::Result<TcpListener>>,
        options: HttpOptions,
    ) -> Self {
        Self {
            setup: Some(Box::new(HttpSetup {
                server,
                bind,
                options,
                signal: None,
                drain_timeout: None,
            })),
            running: None,
        }
    }

    /// Shuts down gracefully when `signal` completes (see [`ServeHttp`]):
    /// `tokio::signal::ctrl_c()`, a SIGTERM listener, or a channel of your
    /// own.
    pub fn with_graceful_shutdown(mut self, signal: impl Future<Output = ()> + Send + 'a) -> Self {
        if let Some(setup) = self.setup.as_mut() {
            setup.signal = Some(Box::pin(signal));
        }
        self
    }

    /// How long running steps may take to finish once the shutdown signal
    /// has come (default 30 s): past it, their tasks are let go where they
    /// stand, and the steps that did not finish run again, here after a
    /// restart or on another instance.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        if let Some(setup) = self.setup.as_mut() {
            setup.drain_timeout = Some(timeout);
        }
        self
    }
}

impl<'a, H: ServerHandler + Clone> Future for ServeHttp<'a, H> {
    type Output = Result<(), BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if let Some(setup) = this.setup.take() {
            let HttpSetup {
                server,
                bind,
                options,
                signal,
                drain_timeout,
            } = *setup;
            let shutdown = signal.map(|s| Shutdown::new(s, drain_timeout));
            this.running = Some(Box::pin(async move {
                let listener = bind.await?;
                run_http(server, listener, options, shutdown).await
            }));
        }
        match this.running.as_mut() {
            Some(running) => running.as_mut().poll(cx),
            None => Poll::Ready(Err("the server was polled after it returned".into())),
        }
    }
}

/// A server on stdio, made by [`serve_stdio_with`] and
/// [`serve_stdio_with_options`]: a future that serves until the client
/// closes stdin, or, with [`ServeStdio::with_graceful_shutdown`], until the
/// signal comes and the engine has drained, as [`ServeHttp`] describes.
///
/// # Errors
///
/// When the transport fails, or the store refuses to release the leases at
/// the end of a graceful shutdown.
#[must_use = "a server does nothing unless it is awaited"]
pub struct ServeStdio<H> {
    setup: Option<Box<StdioSetup<H>>>,
    running: Option<BoxFuture<'static, Result<(), BoxError>>>,
}

struct StdioSetup<H> {
    server: TaskServer<H>,
    options: StdioOptions,
    signal: Option<BoxFuture<'static, ()>>,
    drain_timeout: Option<Duration>,
}

impl<H> std::fmt::Debug for ServeStdio<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeStdio")
            .field("started", &self.running.is_some())
            .finish_non_exhaustive()
    }
}

impl<H: ServerHandler + Clone> ServeStdio<H> {
    /// Shuts down gracefully when `signal` completes, as
    /// [`ServeHttp::with_graceful_shutdown`] does; when the client closes
    /// stdin first, the engine gives up its tasks and the future returns.
    pub fn with_graceful_shutdown(
        mut self,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> Self {
        if let Some(setup) = self.setup.as_mut() {
            setup.signal = Some(Box::pin(signal));
        }
        self
    }

    /// As [`ServeHttp::drain_timeout`].
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        if let Some(setup) = self.setup.as_mut() {
            setup.drain_timeout = Some(timeout);
        }
        self
    }
}

impl<H: ServerHandler + Clone> Future for ServeStdio<H> {
    type Output = Result<(), BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if let Some(setup) = this.setup.take() {
            let StdioSetup {
                server,
                options,
                signal,
                drain_timeout,
            } = *setup;
            let shutdown = signal.map(|s| Shutdown::new(s, drain_timeout));
            this.running = Some(Box::pin(run_stdio(server, options, shutdown)));
        }
        match this.running.as_mut() {
            Some(running) => running.as_mut().poll(cx),
            None => Poll::Ready(Err("the server was polled after it returned".into())),
        }
    }
}

async fn run_stdio<H: ServerHandler + Clone>(
    server: TaskServer<H>,
    options: StdioOptions,
    shutdown: Option<Shutdown<'static>>,
) -> Result<(), BoxError> {
    let server_info = server.server_info_json().clone();
    let transport = super::stdio::transport(server.legacy_edge(), server_info, &options);
    let closer = server.clone();
    let running = server.serve(transport).await?;
    let served = async move {
        running.waiting().await?;
        Ok::<_, BoxError>(())
    };
    match shutdown {
        None => served.await,
        Some(shutdown) => graceful(&closer, served, shutdown, async {}).await,
    }
}

async fn run_http<H: ServerHandler + Clone>(
    server: TaskServer<H>,
    listener: TcpListener,
    options: HttpOptions,
    shutdown: Option<Shutdown<'_>>,
) -> Result<(), BoxError> {
    let local = listener.local_addr()?;
    tracing::info!(%local, path = %options.path, "serving MCP over Streamable HTTP");
    let caps = ConnectionCaps {
        header_timeout: options.header_read_timeout,
        all: options.max_connections,
        per_client: options.max_connections_per_client,
        loopback_apart: options.loopback_addresses_apart,
    };
    let closer = server.clone();
    let app = super::http::router(server, options);
    let (stop, stopped) = watch::channel(false);
    let served = async {
        serve_connections(listener, app, caps, stopped).await;
        Ok(())
    };
    match shutdown {
        None => served.await,
        Some(shutdown) => {
            // Stops accepting, and waits for the open connections.
            let close = async move {
                let _ = stop.send(true);
            };
            graceful(&closer, served, shutdown, close).await
        }
    }
}

/// Serves (`served`) until `shutdown`'s signal, then drains the engine
/// while serving on; then ends the listen streams and `close`s the
/// transport. A transport that ends on its own gives up the engine's tasks.
async fn graceful<H: ServerHandler + Clone>(
    server: &TaskServer<H>,
    served: impl Future<Output = Result<(), BoxError>>,
    shutdown: Shutdown<'_>,
    close: impl Future<Output = ()>,
) -> Result<(), BoxError> {
    let engine: &Engine = server.engine();
    let mut served = std::pin::pin!(served);
    tokio::select! {
        outcome = &mut served => {
            // Listen streams get their final answer before the tasks are let go.
            server.close_listeners(CLOSE_WAIT).await;
            engine.shutdown().await?;
            return outcome;
        }
        () = shutdown.signal => {}
    }
    tracing::info!(
        drain_timeout = %humantime::format_duration(shutdown.drain_timeout),
        "shutting down: no new tasks; reads, answers and cancels are still served while running steps finish"
    );
    // The transport goes on serving meanwhile.
    let drained = tokio::select! {
        drained = engine.drain(shutdown.drain_timeout) => drained,
        outcome = &mut served => {
            engine.shutdown().await?;
            return outcome;
        }
    };
    server.close_listeners(CLOSE_WAIT).await;
    close.await;
    let _ = tokio::time::timeout(CLOSE_WAIT, served).await;
    drained?;
    tracing::info!("shut down: this instance's tasks are released");
    Ok(())
}

/// The bounds on connections (see [`HttpOptions`]).
struct ConnectionCaps {
    header_timeout: Duration,
    all: usize,
    per_client: usize,
    loopback_apart: bool,
}

/// The open connections of each client address (as
/// [`address_key`](crate::engine::address_key) keys it).
#[derive(Default)]
struct PerClient(std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>);

/// A connection's place in its client's count, given back on drop.
struct ClientPlace {
    counts: Arc<PerClient>,
    key: std::net::IpAddr,
}

impl PerClient {
    /// A place for one more connection of `key`, if it has fewer than `cap`.
    fn take(self: &Arc<Self>, key: std::net::IpAddr, cap: usize) -> Option<ClientPlace> {
        let mut counts = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let open = counts.entry(key).or_insert(0);
        if *open >= cap {
            return None;
        }
        *open += 1;
        Some(ClientPlace {
            counts: self.clone(),
            key,
        })
    }
}

impl Drop for ClientPlace {
    fn drop(&mut self) {
        let mut counts = self
            .counts
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(open) = counts.get_mut(&self.key) {
            *open = open.saturating_sub(1);
            if *open == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

/// How long a connection refused for its client's cap is kept, at most:
/// to read its request's head before the answer (an HTTP client that gets
/// an answer before it has sent its request takes it for a broken
/// connection), then what is left, so that closing does not reset the
/// connection before the client has read the answer.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// Answers a connection over its client's cap at once: `429 Too Many
/// Requests` naming `max_connections_per_client`, after its request's head
/// (or `REFUSAL_LINGER`, or 16 KiB), then closes it. Its request is not
/// served.
async fn refuse_connection(mut tcp: tokio::net::TcpStream, cap: usize) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let body = format!(
        "Too Many Requests: this client already has {cap} open connections \
         (max_connections_per_client); reuse one, or close one\n"
    );
    let head = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: text/plain; charset=utf-8\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let mut seen = Vec::with_capacity(1024);
    let mut buf = [0u8; 4096];
    let request_head = async {
        while seen.len() < 16 * 1024 && !seen.windows(4).any(|w| w == b"\r\n\r\n") {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(REFUSAL_LINGER, request_head).await;
    let refused = async {
        tcp.write_all(head.as_bytes()).await?;
        tcp.write_all(body.as_bytes()).await?;
        tcp.shutdown().await?;
        let mut left = 64 * 1024usize;
        while left > 0 {
            let n = tcp.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            left = left.saturating_sub(n);
        }
        Ok::<_, std::io::Error>(())
    };
    let _ = tokio::time::timeout(REFUSAL_LINGER, refused).await;
}

/// Accepts connections while fewer than `caps.all` are open, and serves
/// each with hyper's HTTP/1 server, which closes it when a request's
/// headers take longer than `caps.header_timeout`; a connection whose
/// client address already holds `caps.per_client` is refused at once
/// ([`refuse_connection`]). Once `stop` turns true it accepts no more, asks
/// each open connection to close after the request it is serving, and
/// returns when they all have.
async fn serve_connections(
    listener: TcpListener,
    app: axum::Router,
    caps: ConnectionCaps,
    mut stop: watch::Receiver<bool>,
) {
    let all = u32::try_from(caps.all.max(1)).unwrap_or(u32::MAX);
    let per_client = Arc::new(PerClient::default());
    // Refusals in flight: each lingers up to `REFUSAL_LINGER`.
    let refusals = Arc::new(tokio::sync::Semaphore::new(256));
    let permits = Arc::new(tokio::sync::Semaphore::new(
        usize::try_from(all).unwrap_or(usize::MAX),
    ));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(caps.header_timeout)
        .keep_alive(true);
    loop {
        // Hold a place before accepting: beyond the cap, connections wait
        // in the backlog (they are not refused) until one closes.
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            () = stopped(&mut stop) => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stopped(&mut stop) => break,
        };
        let (tcp, peer) = match accepted {
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
        let key = crate::engine::address_key(peer.ip(), caps.loopback_apart);
        let cap = if !caps.loopback_apart && key.is_loopback() {
            caps.per_client
                .saturating_mul(crate::engine::LOOPBACK_FACTOR)
        } else {
            caps.per_client
        };
        let Some(place) = per_client.take(key, cap) else {
            drop(permit);
            tracing::debug!(%peer, cap, "connection refused: max_connections_per_client");
            // Bounded: beyond that many refusals at once, closed unanswered.
            if let Ok(slot) = refusals.clone().try_acquire_owned() {
                tokio::spawn(async move {
                    refuse_connection(tcp, cap).await;
                    drop(slot);
                });
            }
            continue;
        };
        // The peer's address, where axum's `ConnectInfo` puts it (an
        // embedder serving `router` with `into_make_service_with_connect_info`
        // gives the same): limits without a principal count by it.
        let app = axum::Extension(axum::extract::ConnectInfo(peer)).layer(app.clone());
        let service = hyper_util::service::TowerToHyperService::new(app);
        let connection = http
            .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
            .with_upgrades();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                () = stopped(&mut stop) => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = ended {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(place);
            drop(permit);
        });
    }
    drop(listener);
    // Every place is free once every connection has closed.
    let _ = permits.acquire_many(all).await;
}

/// Waits until `stop` turns true (forever, if its sender goes away first).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    if stop.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}
