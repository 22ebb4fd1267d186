//! Serving a [`TaskServer`] over Streamable HTTP or stdio: until the
//! transport ends or, with a graceful shutdown, until a signal and the drain
//! that follows it.

use std::{future::IntoFuture, sync::Arc, time::Duration};

use futures::future::BoxFuture;
use rmcp::{ServerHandler, ServiceExt as _};
use tokio::{net::TcpListener, sync::watch};
use tower_layer::Layer as _;

use super::{
    peer::{Client, Clients},
    server::TaskServer,
};
use crate::Engine;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long, after the drain, listen streams and open connections get to
/// write their last answers before the server returns.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Serves `server` over Streamable HTTP at `/mcp` (or
/// [`HttpOptions::path`](super::HttpOptions::path)) on `listener`, until the
/// process ends or, with [`Serve::with_graceful_shutdown`], until the signal
/// comes and the engine has drained. The transport's settings are the
/// server's ([`TaskServerBuilder::http`](super::TaskServerBuilder::http)).
///
/// ```no_run
/// use mcp_tasks_runtime::{Engine, mcp::{self, TaskServer}, store::MemoryStore};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let engine = Engine::builder(MemoryStore::new()).start().await?;
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// mcp::serve(listener, TaskServer::new(engine))
///     .with_graceful_shutdown(async {
///         let _ = tokio::signal::ctrl_c().await;
///     })
///     .await
/// # }
/// ```
pub fn serve<H: ServerHandler + Clone>(listener: TcpListener, server: TaskServer<H>) -> Serve<H> {
    Serve {
        server,
        listener: Some(listener),
        signal: None,
    }
}

/// Serves `server` over stdio (newline-delimited JSON-RPC on stdin and
/// stdout; logs belong on stderr) until the client closes stdin or, with
/// [`Serve::with_graceful_shutdown`], until the signal comes and the engine
/// has drained. The transport's settings are the server's
/// ([`TaskServerBuilder::stdio`](super::TaskServerBuilder::stdio)).
pub fn serve_stdio<H: ServerHandler + Clone>(server: TaskServer<H>) -> Serve<H> {
    Serve {
        server,
        listener: None,
        signal: None,
    }
}

/// A server on Streamable HTTP ([`serve`]) or stdio ([`serve_stdio`]): await
/// it (it is [`IntoFuture`]), or give it a signal to shut down on first.
///
/// With [`Serve::with_graceful_shutdown`], when the signal comes the
/// engine drains ([`Engine::drain`]): a `tools/call` that would create a
/// task is refused with JSON-RPC error `-32603` whose message says the
/// server is shutting down (`data.reason: "shutting_down"`), while
/// `tasks/get`, `tasks/update` (answers), `tasks/cancel`, `tasks/result` and
/// their 2025-11-25 forms are still served, and each running step finishes
/// and is journaled (for up to
/// [`TaskServerBuilder::drain_timeout`](super::TaskServerBuilder::drain_timeout),
/// 30 s by default). Then the engine gives up its tasks, so that another
/// instance sharing the store takes them over at once (or this one, after a
/// restart, from their journals); `subscriptions/listen` streams get their
/// final answer; the server stops accepting connections, lets open ones
/// finish the request they are in (for up to 2 s), and the future returns
/// `Ok`. Should the transport end first (stdin closed, say), the engine
/// gives up its tasks too.
///
/// # Errors
///
/// When the transport fails, or the store refuses to release the leases at
/// the end of a graceful shutdown.
#[must_use = "a server does nothing unless it is awaited"]
pub struct Serve<H> {
    server: TaskServer<H>,
    /// `None`: stdio.
    listener: Option<TcpListener>,
    signal: Option<BoxFuture<'static, ()>>,
}

impl<H> std::fmt::Debug for Serve<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serve")
            .field("listener", &self.listener)
            .finish_non_exhaustive()
    }
}

impl<H> Serve<H> {
    /// Shuts down gracefully when `signal` completes (see [`Serve`]):
    /// `tokio::signal::ctrl_c()`, a SIGTERM listener, or a channel of your
    /// own.
    pub fn with_graceful_shutdown(
        mut self,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> Self {
        self.signal = Some(Box::pin(signal));
        self
    }
}

impl<H: ServerHandler + Clone> IntoFuture for Serve<H> {
    type Output = Result<(), BoxError>;
    type IntoFuture = BoxFuture<'static, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let Self {
                server,
                listener,
                signal,
            } = self;
            match listener {
                Some(listener) => run_http(server, listener, signal).await,
                None => run_stdio(server, signal).await,
            }
        })
    }
}

async fn run_stdio<H: ServerHandler + Clone>(
    server: TaskServer<H>,
    signal: Option<BoxFuture<'static, ()>>,
) -> Result<(), BoxError> {
    let transport = super::stdio::transport(&server);
    let closer = server.clone();
    #[cfg(feature = "mcp-2025-11-25")]
    let running = crate::mcp_2025::WithOlder::new(server)
        .serve(transport)
        .await?;
    #[cfg(not(feature = "mcp-2025-11-25"))]
    let running = server.serve(transport).await?;
    let served = async move {
        running.waiting().await?;
        Ok::<_, BoxError>(())
    };
    graceful(&closer, served, signal, async {}).await
}

async fn run_http<H: ServerHandler + Clone>(
    server: TaskServer<H>,
    listener: TcpListener,
    signal: Option<BoxFuture<'static, ()>>,
) -> Result<(), BoxError> {
    let options = server.http_options().clone();
    let local = listener.local_addr()?;
    tracing::info!(%local, path = %options.path, "serving MCP over Streamable HTTP");
    let caps = ConnectionCaps {
        header_timeout: options.header_read_timeout,
        all: options.max_connections,
        per_client: options.max_connections_per_client,
        clients: Clients {
            principal: None,
            loopback_apart: options.loopback_addresses_apart,
        },
    };
    let closer = server.clone();
    let app = super::http::router(server);
    let (stop, stopped) = watch::channel(false);
    let served = async {
        serve_connections(listener, app, caps, stopped).await;
        Ok(())
    };
    // Stops accepting, and waits for the open connections.
    let close = async move {
        let _ = stop.send(true);
    };
    graceful(&closer, served, signal, close).await
}

/// Serves (`served`) until `shutdown`'s signal, then drains the engine
/// while serving on; then ends the listen streams and `close`s the
/// transport. A transport that ends on its own gives up the engine's tasks.
async fn graceful<H: ServerHandler + Clone>(
    server: &TaskServer<H>,
    served: impl Future<Output = Result<(), BoxError>>,
    signal: Option<BoxFuture<'static, ()>>,
    close: impl Future<Output = ()>,
) -> Result<(), BoxError> {
    let engine: &Engine = server.engine();
    let drain_timeout = server.drain_timeout();
    let mut served = std::pin::pin!(served);
    let signal = async {
        match signal {
            Some(signal) => signal.await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        outcome = &mut served => {
            // Listen streams get their final answer before the tasks are let go.
            server.close_listeners(CLOSE_WAIT).await;
            engine.shutdown().await?;
            return outcome;
        }
        () = signal => {}
    }
    tracing::info!(
        drain_timeout = %humantime::format_duration(drain_timeout),
        "shutting down: no new tasks; reads, answers and cancels are still served while running steps finish"
    );
    // The transport goes on serving meanwhile.
    let drained = tokio::select! {
        drained = engine.drain(drain_timeout) => drained,
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

/// The bounds on connections (see [`HttpOptions`](super::HttpOptions)).
struct ConnectionCaps {
    header_timeout: Duration,
    all: usize,
    per_client: usize,
    /// Who a connection's peer is, before any request is read.
    clients: Clients,
}

/// The open connections of each client (by address, as
/// [`address_key`](crate::engine::address_key) keys it).
#[derive(Default)]
struct PerClient(std::sync::Mutex<std::collections::HashMap<Client, usize>>);

/// A connection's place in its client's count, given back on drop.
struct ClientPlace {
    counts: Arc<PerClient>,
    key: Client,
}

impl PerClient {
    /// A place for one more connection of `key`, if it has fewer than `cap`.
    fn take(self: &Arc<Self>, key: Client, cap: usize) -> Option<ClientPlace> {
        let mut counts = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let open = counts.entry(key.clone()).or_insert(0);
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
        let key = caps.clients.of_addr(peer.ip());
        let cap = key.cap(caps.per_client);
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
