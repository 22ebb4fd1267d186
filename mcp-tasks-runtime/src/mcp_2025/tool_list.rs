//! `notifications/tools/list_changed` to the sessions of 2025-11-25 clients
//! when the engine's tools change ([`Engine::set_registry`]).
//!
//! A session joins once its client has sent `notifications/initialized`
//! (over Streamable HTTP, a session restored after a restart replays it and
//! joins again). One task per server, started with its first session, waits
//! for the engine's tool list to change and tells every open session: over
//! Streamable HTTP on the session's standalone GET stream (a session without
//! one open misses it, as the transport says of every message sent there),
//! over stdio on the connection. Sessions are told concurrently, each within
//! [`SEND_WAIT`], so a client that does not read its stream delays no other.
//! Nothing queues per session: changes made while a round is being sent
//! make one more round after it. Closed sessions are let go when the next
//! session joins or the next round is sent.

use std::{
    sync::{Arc, Mutex, OnceLock, PoisonError, Weak},
    time::Duration,
};

use rmcp::{Peer, RoleServer};
use tokio::sync::oneshot;

use crate::Engine;

/// How long one session may take to accept a notification.
const SEND_WAIT: Duration = Duration::from_secs(5);

/// The open 2025-11-25 sessions of a server, to tell of tool list changes.
#[derive(Debug, Default)]
pub(super) struct ToolListSessions {
    peers: Mutex<Vec<Peer<RoleServer>>>,
    /// Set once the announcing task runs; dropped with this, it stops the
    /// task.
    running: OnceLock<oneshot::Sender<()>>,
}

impl ToolListSessions {
    /// Adds the session of `peer`, and starts telling the sessions of the
    /// changes of `engine`'s tools if nothing does yet.
    pub(super) fn join(self: &Arc<Self>, peer: Peer<RoleServer>, engine: &Engine) {
        {
            let mut peers = self.lock();
            peers.retain(|p| !p.is_transport_closed());
            peers.push(peer);
        }
        self.running.get_or_init(|| {
            let (stop, stopped) = oneshot::channel();
            tokio::spawn(announce(Arc::downgrade(self), engine.clone(), stopped));
            stop
        });
    }

    /// The sessions still open.
    fn open(&self) -> Vec<Peer<RoleServer>> {
        let mut peers = self.lock();
        peers.retain(|p| !p.is_transport_closed());
        peers.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Peer<RoleServer>>> {
        self.peers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Tells `sessions` of each change of `engine`'s tools, until they are
/// dropped (the server is) or the engine is.
async fn announce(
    sessions: Weak<ToolListSessions>,
    engine: Engine,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut changes = engine.watch_registry();
    drop(engine);
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
        let Some(peers) = sessions.upgrade().map(|s| s.open()) else {
            return;
        };
        let told = peers.iter().map(|peer| async move {
            let _ = tokio::time::timeout(SEND_WAIT, peer.notify_tool_list_changed()).await;
        });
        futures::future::join_all(told).await;
    }
}
