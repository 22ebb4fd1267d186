//! The plain calls whose tasks a repeat of the call joins: remembered by
//! call within their scope (a principal, or a session), and forgotten when
//! their relay ends or, for a principal whose session went away, when the
//! task ends.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
};

use rmcp::{RoleServer, service::RequestContext};

/// The tasks of plain calls, by call, so that a repeat of a call joins its
/// unfinished task.
#[derive(Debug, Default)]
pub(in crate::mcp) struct Detached {
    /// Task ids, by call (scope, tool and canonical arguments).
    calls: Mutex<HashMap<Vec<u8>, String>>,
}

impl Detached {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, String>> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The task an identical call started, if one did.
    pub(super) fn get(&self, call: &[u8]) -> Option<String> {
        self.lock().get(call).cloned()
    }

    pub(super) fn insert(&self, call: Vec<u8>, task: String) {
        self.lock().insert(call, task);
    }

    /// Forgets the call, if it still names `task`.
    fn forget(&self, call: &[u8], task: &str) {
        let mut calls = self.lock();
        if calls.get(call).is_some_and(|t| t == task) {
            calls.remove(call);
        }
    }

    /// How many calls are remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// The scope within which a repeat of a plain call joins its task: the
/// principal when there is one, otherwise the session (`Mcp-Session-Id`);
/// over stdio, where there is no HTTP request, the process's one client.
/// `None` (an HTTP request in no session and of no principal): never joined.
pub(super) fn join_scope(
    principal: Option<&str>,
    cx: &RequestContext<RoleServer>,
) -> Option<Scope> {
    if let Some(p) = principal {
        return Some(Scope::Principal(p.to_owned()));
    }
    let Some(parts) = cx.extensions.get::<axum::http::request::Parts>() else {
        return Some(Scope::Session(String::new()));
    };
    parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(|id| Scope::Session(id.to_owned()))
}

/// See [`join_scope`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Scope {
    Principal(String),
    Session(String),
}

impl Scope {
    /// The bytes that stand for the scope in a call's key.
    pub(super) fn tag(&self) -> String {
        match self {
            Self::Principal(p) => format!("principal:{p}"),
            Self::Session(s) => format!("session:{s}"),
        }
    }
}

/// A call remembered in [`Detached`] while its relay runs; dropping it
/// forgets the call, on every path (the result, an error, a cancel, the
/// session closing, the relay's future dropped). One exception: when the
/// session went away while the task runs on and the scope is a principal
/// (whose next session may repeat the call), the call is forgotten when the
/// task ends.
pub(super) struct Remembered {
    detached: std::sync::Arc<Detached>,
    key: Vec<u8>,
    task: String,
    /// Set when the call may outlive the relay (see above).
    outlives: Option<Outlives>,
}

/// What a [`Remembered`] call needs to wait for its task's end.
struct Outlives {
    engine: crate::Engine,
    principal: String,
    /// Whether the session's transport closed (the peer's, in a call).
    closed: Box<dyn Fn() -> bool + Send + Sync>,
}

impl Remembered {
    pub(super) fn new(
        detached: &std::sync::Arc<Detached>,
        key: Vec<u8>,
        task: &str,
        scope: &Scope,
        engine: &crate::Engine,
        cx: &RequestContext<RoleServer>,
    ) -> Self {
        let outlives = match scope {
            Scope::Principal(p) => {
                let peer = cx.peer.clone();
                Some(Outlives {
                    engine: engine.clone(),
                    principal: p.clone(),
                    closed: Box::new(move || peer.is_transport_closed()),
                })
            }
            Scope::Session(_) => None,
        };
        Self {
            detached: detached.clone(),
            key,
            task: task.to_owned(),
            outlives,
        }
    }
}

impl Drop for Remembered {
    fn drop(&mut self) {
        let key = std::mem::take(&mut self.key);
        let task = std::mem::take(&mut self.task);
        let lasting = self.outlives.take().filter(|o| (o.closed)());
        let runtime = tokio::runtime::Handle::try_current();
        let (Some(o), Ok(runtime)) = (lasting, runtime) else {
            self.detached.forget(&key, &task);
            return;
        };
        let detached = self.detached.clone();
        runtime.spawn(async move {
            if let Ok(mut rx) = o.engine.subscribe(&task, Some(&o.principal)).await {
                // Until the task ends, or its watch does (it was purged).
                let _ = rx.wait_for(|r| r.status.is_terminal()).await;
            }
            detached.forget(&key, &task);
        });
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use serde_json::Map;

    use super::*;
    use crate::{Engine, store::MemoryStore, tool::Registry};

    async fn engine() -> Engine {
        Engine::builder(MemoryStore::new())
            .registry(Registry::new())
            .start()
            .await
            .unwrap()
    }

    /// A call of `scope` remembered for task `task`, its session's transport
    /// closed or not.
    fn remembered(
        detached: &Arc<Detached>,
        scope: &Scope,
        task: &str,
        engine: &Engine,
        closed: bool,
    ) -> Remembered {
        let key = crate::mcp::inline::state_binding(Some(&scope.tag()), "t", &Map::new());
        detached.insert(key.clone(), task.to_owned());
        let outlives = match scope {
            Scope::Principal(p) => Some(Outlives {
                engine: engine.clone(),
                principal: p.clone(),
                closed: Box::new(move || closed),
            }),
            Scope::Session(_) => None,
        };
        Remembered {
            detached: detached.clone(),
            key,
            task: task.to_owned(),
            outlives,
        }
    }

    /// A relay that ends by a cancel (the transport still open) or by its
    /// session closing leaves no call behind in a session's scope.
    #[tokio::test]
    async fn a_relay_that_ends_by_cancel_or_a_closed_session_forgets_its_call() {
        let engine = engine().await;
        let detached = Arc::new(Detached::default());
        for closed in [false, true] {
            let session = Scope::Session("s1".into());
            drop(remembered(&detached, &session, "task-1", &engine, closed));
            assert_eq!(detached.len(), 0, "session scope, closed: {closed}");
        }
        let principal = Scope::Principal("alice".into());
        drop(remembered(&detached, &principal, "task-2", &engine, false));
        assert_eq!(detached.len(), 0, "a cancel under a principal");
    }

    /// Under a principal, a relay whose session closed keeps the call for a
    /// repeat in the principal's next session only while the task may run:
    /// a task that is gone (here: never was) forgets it at once.
    #[tokio::test]
    async fn a_call_kept_past_its_session_is_forgotten_when_its_task_is_gone() {
        let engine = engine().await;
        let detached = Arc::new(Detached::default());
        let principal = Scope::Principal("alice".into());
        drop(remembered(
            &detached,
            &principal,
            "no-such-task",
            &engine,
            true,
        ));
        for _ in 0..200 {
            if detached.len() == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the call of a task that is gone was kept");
    }

    /// Two sessions without a principal are two scopes; one principal is
    /// one scope whatever the session.
    #[test]
    fn a_call_is_keyed_by_its_scope() {
        let key = |s: &Scope| crate::mcp::inline::state_binding(Some(&s.tag()), "t", &Map::new());
        assert_ne!(
            key(&Scope::Session("a".into())),
            key(&Scope::Session("b".into()))
        );
        assert_ne!(
            key(&Scope::Session("a".into())),
            key(&Scope::Principal("a".into()))
        );
    }
}
