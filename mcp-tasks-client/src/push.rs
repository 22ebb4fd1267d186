//! Push: the client follows a task on a `subscriptions/listen` stream when
//! the server serves one, and polls otherwise.
//!
//! rmcp's `subscriptions/listen` filter has no `taskIds`, so the request is
//! sent as a custom request with the spec's method and params; rmcp still
//! adds the per-request `_meta` and carries the stream (SSE over HTTP, the
//! connection over stdio). The notifications reach [`Handler`]'s
//! `on_task_status`, which hands each to the follower of its task. A server
//! that refuses the request (a 2025-11-25 session, or one without push)
//! ends the stream at once, and the follower polls.

use std::collections::HashMap;

use rmcp::model::{ClientRequest, CustomRequest};
use tokio::sync::{oneshot, watch};

use super::*;

/// The spec's method.
const LISTEN: &str = "subscriptions/listen";

/// Who follows which task on a push stream.
#[derive(Debug, Default)]
pub(super) struct Pushed {
    by_task: Mutex<HashMap<String, watch::Sender<Option<DetailedTask>>>>,
}

impl Pushed {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<Option<DetailedTask>>>> {
        self.by_task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A state pushed by the server, for whoever follows its task.
    pub(super) fn deliver(&self, task: DetailedTask) {
        if let Some(tx) = self.lock().get(&task.task.task_id) {
            tx.send_replace(Some(task));
        }
    }

    fn register(&self, id: &str) -> watch::Receiver<Option<DetailedTask>> {
        self.lock()
            .entry(id.to_owned())
            .or_insert_with(|| watch::Sender::new(None))
            .subscribe()
    }

    /// The last follower of task `id` (whose receiver is still alive) goes.
    fn unregister(&self, id: &str) {
        let mut by_task = self.lock();
        if by_task.get(id).is_some_and(|tx| tx.receiver_count() <= 1) {
            by_task.remove(id);
        }
    }
}

/// One task followed on a push stream.
pub(super) struct Push {
    rx: watch::Receiver<Option<DetailedTask>>,
    /// Fires when the listen request ends: refused, or ended by the server.
    ended: oneshot::Receiver<()>,
    listen: tokio::task::JoinHandle<()>,
    pushed: Arc<Pushed>,
    id: String,
    live: bool,
}

impl Push {
    /// Listens to task `id`; `None` when no connection can be had.
    pub(super) async fn open(client: &TaskClient, id: &str) -> Option<Self> {
        let peer = client.inner.peer().await.ok()?;
        let pushed = client.inner.handler.pushed.clone();
        let rx = pushed.register(id);
        let (ended_tx, ended) = oneshot::channel();
        let request = ClientRequest::CustomRequest(CustomRequest::new(
            LISTEN,
            Some(json!({ "notifications": { "taskIds": [id] } })),
        ));
        let listen = tokio::spawn(async move {
            let _ = peer.send_request(request).await;
            let _ = ended_tx.send(());
        });
        Some(Self {
            rx,
            ended,
            listen,
            pushed,
            id: id.to_owned(),
            live: true,
        })
    }

    /// Whether states still arrive by push.
    pub(super) fn live(&self) -> bool {
        self.live
    }

    /// Waits up to `fallback` for a pushed state; `None`: look with
    /// `tasks/get` now (the wait ran out, or the stream ended).
    pub(super) async fn wait(&mut self, fallback: Duration) -> Option<DetailedTask> {
        tokio::select! {
            biased;
            changed = self.rx.changed() => {
                if changed.is_ok() {
                    return self.rx.borrow_and_update().clone();
                }
                self.live = false;
                None
            }
            _ = &mut self.ended => {
                self.live = false;
                None
            }
            () = tokio::time::sleep(fallback) => None,
        }
    }
}

impl Drop for Push {
    fn drop(&mut self) {
        // Dropping the request closes its stream (HTTP) or cancels it
        // (stdio).
        self.listen.abort();
        self.pushed.unregister(&self.id);
    }
}
