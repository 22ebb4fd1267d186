//! The plain calls whose tasks a repeat of the call joins: remembered by
//! call within their scope (a principal, or a session), and forgotten when
//! their relay ends or, for a principal whose session went away, when the
//! task ends.

use std::{
    collections::HashMap,
    hash::{BuildHasher as _, Hasher as _, RandomState},
    sync::{LazyLock, Mutex, PoisonError},
    time::Duration,
};

use rmcp::{RoleServer, service::RequestContext};

/// The tasks of plain calls, by call, so that a repeat of a call joins its
/// unfinished task.
#[derive(Debug, Default)]
pub(super) struct Detached {
    /// Task ids, by call: the [`Detached::digest`] of its scope, tool and
    /// canonical arguments, so that what is kept per call is a few bytes
    /// whatever the size of its arguments.
    calls: Mutex<HashMap<CallKey, String>>,
    /// The keys of the digest, random per process.
    seeds: [RandomState; 2],
}

/// A call, as [`Detached`] knows it: 128 bits of keyed SipHash.
pub(super) type CallKey = u128;

impl Detached {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CallKey, String>> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The key of a call, from its canonical bytes (scope, tool and
    /// arguments).
    pub(super) fn digest(&self, call: &[u8]) -> CallKey {
        let [a, b] = self.seeds.each_ref().map(|seed| {
            let mut h = seed.build_hasher();
            h.write(call);
            h.finish()
        });
        (u128::from(a) << 64) | u128::from(b)
    }

    /// The task an identical call started, if one did.
    pub(super) fn get(&self, call: CallKey) -> Option<String> {
        self.lock().get(&call).cloned()
    }

    pub(super) fn insert(&self, call: CallKey, task: String) {
        self.lock().insert(call, task);
    }

    /// Forgets the call, if it still names `task`.
    fn forget(&self, call: CallKey, task: &str) {
        let mut calls = self.lock();
        if calls.get(&call).is_some_and(|t| t == task) {
            calls.remove(&call);
        }
    }

    /// How many calls are remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// The 2025-11-25 sessions whose plain calls are being relayed, by session
/// id: dropping a session's sender tells its relays that it was closed.
static RELAYED_SESSIONS: LazyLock<Mutex<HashMap<String, tokio::sync::watch::Sender<()>>>> =
    LazyLock::new(Mutex::default);

fn relayed_sessions()
-> std::sync::MutexGuard<'static, HashMap<String, tokio::sync::watch::Sender<()>>> {
    RELAYED_SESSIONS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Session `id` was closed (`DELETE`, or it went idle): the relays of its
/// plain calls end now, letting go of the call (its arguments, its
/// questions), rather than when the session's service gives up on its
/// handlers; their tasks carry on under the engine.
pub(super) fn session_closed(id: &str) {
    relayed_sessions().remove(id);
}

/// What a relay watches to learn that its session was closed.
pub(super) struct SessionEnd {
    id: String,
    rx: tokio::sync::watch::Receiver<()>,
}

impl SessionEnd {
    /// Watches the session of the request `cx`, when it has one.
    pub(super) fn of(cx: &RequestContext<RoleServer>) -> Option<Self> {
        let id = cx
            .extensions
            .get::<axum::http::request::Parts>()?
            .headers
            .get("mcp-session-id")?
            .to_str()
            .ok()?
            .to_owned();
        let rx = relayed_sessions()
            .entry(id.clone())
            .or_insert_with(|| tokio::sync::watch::channel(()).0)
            .subscribe();
        Some(Self { id, rx })
    }

    /// Whether the session was closed.
    fn is_closed(&self) -> bool {
        self.rx.has_changed().is_err()
    }

    /// Resolves once the session is closed.
    pub(super) async fn closed(&mut self) {
        while self.rx.changed().await.is_ok() {}
    }
}

impl Drop for SessionEnd {
    fn drop(&mut self) {
        let mut sessions = relayed_sessions();
        // This relay's receiver still counts: the last one lets go.
        if sessions
            .get(&self.id)
            .is_some_and(|tx| tx.receiver_count() <= 1)
        {
            sessions.remove(&self.id);
        }
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
    key: CallKey,
    task: String,
    /// Set when the call may outlive the relay (see above).
    outlives: Option<Outlives>,
}

/// How often a call kept past its session looks up whether its task ended.
const OUTLIVED_POLL: Duration = Duration::from_secs(5);

/// What a [`Remembered`] call needs to wait for its task's end.
struct Outlives {
    engine: crate::Engine,
    principal: String,
    /// Whether the session's transport closed (the peer's, in a call).
    closed: Box<dyn Fn() -> bool + Send + Sync>,
    /// The session, closed by `DELETE` (or idleness) before its transport
    /// is.
    session: Option<SessionEnd>,
}

impl Remembered {
    pub(super) fn new(
        detached: &std::sync::Arc<Detached>,
        key: CallKey,
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
                    session: SessionEnd::of(cx),
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
        let key = self.key;
        let task = std::mem::take(&mut self.task);
        let lasting = self
            .outlives
            .take()
            .filter(|o| (o.closed)() || o.session.as_ref().is_some_and(SessionEnd::is_closed));
        let runtime = tokio::runtime::Handle::try_current();
        let (Some(o), Ok(runtime)) = (lasting, runtime) else {
            self.detached.forget(key, &task);
            return;
        };
        let detached = self.detached.clone();
        // The task is looked up now and then rather than watched: a watch
        // keeps the task's whole record (its arguments, its questions) in
        // memory until it ends, which a task created the 2026-07-28 way
        // does not.
        runtime.spawn(async move {
            loop {
                match o.engine.get(&task, Some(&o.principal)).await {
                    Ok(record) if !record.status.is_terminal() => {}
                    _ => break,
                }
                tokio::time::sleep(OUTLIVED_POLL).await;
            }
            detached.forget(key, &task);
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
        let key = detached.digest(&crate::request_state::state_binding(
            Some(&scope.tag()),
            "t",
            &Map::new(),
        ));
        detached.insert(key, task.to_owned());
        let outlives = match scope {
            Scope::Principal(p) => Some(Outlives {
                engine: engine.clone(),
                principal: p.clone(),
                closed: Box::new(move || closed),
                session: None,
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
        let key = |s: &Scope| crate::request_state::state_binding(Some(&s.tag()), "t", &Map::new());
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
