//! Serving a [`TaskServer`] over Streamable HTTP or stdio: until the
//! transport ends or, with a graceful shutdown, until a signal and the drain
//! that follows it.

use std::{future::IntoFuture, time::Duration};

use futures::future::BoxFuture;
use rmcp::{ServerHandler, ServiceExt as _};
use tokio::{net::TcpListener, sync::watch};

use super::{peer::Clients, server::TaskServer};
use crate::{
    Engine,
    connections::{ConnectionCaps, serve_connections},
};

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
/// engine drains ([`Engine::drain`]): each new `tools/call` is refused
/// with JSON-RPC error `-32603` whose message says the server is shutting
/// down (`data.reason: "shutting_down"`; one log line at the end counts
/// them, `refused_calls`), while
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

debug_fields!(Serve<H> |serve| listener: serve.listener);

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
        "shutting down: no new calls; reads, answers and cancels are still served while running steps finish"
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
    tracing::info!(
        refused_calls = engine.refused_calls(),
        "shut down: this instance's tasks are released"
    );
    Ok(())
}
