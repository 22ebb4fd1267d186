//! Serving an axum `Router` over HTTP/1 on a listener, the connections
//! bounded: so many at once, so many per client (one more is refused at
//! once with `429`), a deadline on each request's head, and a stop that
//! lets open connections finish the request they are in. Nothing here
//! knows MCP: `mcp::serve` serves its router this way.

use std::{sync::Arc, time::Duration};

use tokio::{net::TcpListener, sync::watch};
use tower_layer::Layer as _;

use crate::mcp::peer::{Client, Clients};

/// The bounds on connections (see [`HttpOptions`](crate::mcp::HttpOptions)).
pub(crate) struct ConnectionCaps {
    pub(crate) header_timeout: Duration,
    pub(crate) all: usize,
    pub(crate) per_client: usize,
    /// Who a connection's peer is, before any request is read.
    pub(crate) clients: Clients,
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
pub(crate) async fn serve_connections(
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
