//! Who may open a 2025-11-25 session, and use one: caps and rates by
//! client ([`SessionGate`]), and the client of the request being served
//! ([`CLIENT`]).

use std::sync::Arc;

use crate::{engine::LOOPBACK_FACTOR, mcp::peer::Client};

tokio::task_local! {
    /// The client of the HTTP request being served, for the session store
    /// to record a new session's owner and check a restored one's.
    pub(super) static CLIENT: Client;
}

/// The limits on sessions (see [`HttpOptions`](crate::mcp::HttpOptions)).
#[derive(Debug, Clone, Copy)]
pub(super) struct SessionLimits {
    pub(super) max_sessions: usize,
    pub(super) max_per_client: usize,
    pub(super) per_minute: u32,
    pub(super) max_initialize_bytes: usize,
    pub(super) idle_timeout: std::time::Duration,
}

/// Why a session was not opened: the limit, and the answer's words.
#[derive(Debug)]
pub(super) struct Refused {
    /// The option that sets the limit.
    pub(super) limit: &'static str,
    pub(super) message: String,
    /// When a slot frees up, for a rate.
    pub(super) retry_after: Option<std::time::Duration>,
}

/// Sessions by owner: the caps and rates on opening them, and who may use
/// each. In memory, per process: a session restored from the store (after a
/// restart, or on another instance) is counted from its restore on.
#[derive(Debug)]
pub(super) struct SessionGate {
    limits: SessionLimits,
    state: std::sync::Mutex<GateState>,
}

#[derive(Debug, Default)]
struct GateState {
    /// Each open session's owner.
    owners: std::collections::HashMap<String, Client>,
    /// Per client: its open sessions (and those being opened), and its
    /// rate bucket.
    clients: std::collections::HashMap<Client, Usage>,
    /// Open sessions (and those being opened), of every client.
    open: usize,
}

#[derive(Debug)]
struct Usage {
    open: usize,
    /// Session creations left in the bucket (it refills at
    /// `per_minute / 60` a second, up to `per_minute`).
    tokens: f64,
    at: std::time::Instant,
}

impl SessionGate {
    pub(super) fn new(limits: SessionLimits) -> Self {
        Self {
            limits,
            state: std::sync::Mutex::default(),
        }
    }

    pub(super) fn limits(&self) -> SessionLimits {
        self.limits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A place for a new session of `client`, or why there is none. The
    /// place is held until [`Opening::bind`] gives it a session, and given
    /// back when the [`Opening`] drops unbound.
    pub(super) fn admit(self: &Arc<Self>, client: &Client) -> Result<Opening, Refused> {
        let limits = self.limits;
        let mut state = self.lock();
        let now = std::time::Instant::now();
        if state.clients.len() > 4096 {
            // Clients with nothing open whose buckets have refilled.
            state.clients.retain(|_, u| {
                u.open > 0 || now.duration_since(u.at) < std::time::Duration::from_secs(60)
            });
        }
        let total = state.open;
        let usage = state.clients.entry(client.clone()).or_insert(Usage {
            open: 0,
            tokens: f64::from(limits.per_minute),
            at: now,
        });
        let rate = f64::from(limits.per_minute) / 60.0;
        let elapsed = now.duration_since(usage.at).as_secs_f64();
        usage.tokens = (usage.tokens + elapsed * rate).min(f64::from(limits.per_minute));
        usage.at = now;
        let cap = client.cap(limits.max_per_client);
        if usage.open >= cap {
            let local = if matches!(client, Client::Local) {
                format!(
                    " (this machine's loopback addresses together: {LOOPBACK_FACTOR} times {})",
                    limits.max_per_client
                )
            } else {
                String::new()
            };
            return Err(Refused {
                limit: "max_sessions_per_client",
                message: format!(
                    "too many open sessions: at most {cap} per client{local} (max_sessions_per_client); close one (HTTP DELETE) or let one expire"
                ),
                retry_after: None,
            });
        }
        if total >= limits.max_sessions {
            return Err(Refused {
                limit: "max_sessions",
                message: format!(
                    "too many open sessions: the server holds at most {} (max_sessions); retry later",
                    limits.max_sessions
                ),
                retry_after: Some(std::time::Duration::from_secs(1)),
            });
        }

        if usage.tokens < 1.0 {
            let wait = if rate > 0.0 {
                (1.0 - usage.tokens) / rate
            } else {
                60.0
            };
            return Err(Refused {
                limit: "sessions_per_minute",
                message: format!(
                    "sessions opened too fast: at most {} a minute per client (sessions_per_minute)",
                    limits.per_minute
                ),
                retry_after: Some(std::time::Duration::from_secs_f64(wait.ceil())),
            });
        }
        usage.tokens -= 1.0;
        usage.open += 1;
        state.open += 1;
        Ok(Opening {
            gate: self.clone(),
            client: Some(client.clone()),
        })
    }

    /// Whether `client` may use session `id`; `None` when this process does
    /// not know the session (it is not open here: rmcp restores it from
    /// the store, or answers 404).
    pub(super) fn may_use(&self, id: &str, client: &Client) -> Option<bool> {
        self.lock()
            .owners
            .get(id)
            .map(|owner| owner.may_use(client))
    }

    /// Session `id` of `owner` is open here (restored from the store).
    pub(super) fn restored(&self, id: &str, owner: Client) {
        let mut state = self.lock();
        if state.owners.contains_key(id) {
            return;
        }
        let now = std::time::Instant::now();
        state
            .clients
            .entry(owner.clone())
            .or_insert(Usage {
                open: 0,
                tokens: f64::from(self.limits.per_minute),
                at: now,
            })
            .open += 1;
        state.open += 1;
        state.owners.insert(id.to_owned(), owner);
    }

    /// Session `id` closed: its owner's place is free.
    pub(super) fn closed(&self, id: &str) {
        let mut state = self.lock();
        if let Some(owner) = state.owners.remove(id) {
            state.release(&owner);
        }
    }
}

impl GateState {
    fn release(&mut self, client: &Client) {
        self.open = self.open.saturating_sub(1);
        if let Some(usage) = self.clients.get_mut(client) {
            usage.open = usage.open.saturating_sub(1);
            // A client with nothing open whose bucket has refilled is
            // forgotten.
            if usage.open == 0 && usage.at.elapsed() >= std::time::Duration::from_secs(60) {
                self.clients.remove(client);
            }
        }
    }
}

/// A place held for a session being opened (see [`SessionGate::admit`]).
#[derive(Debug)]
pub(crate) struct Opening {
    gate: Arc<SessionGate>,
    /// `None` once bound.
    client: Option<Client>,
}

impl Opening {
    /// The session opened as `id`: it keeps the place until it closes.
    /// Binds the session `response` opened, if it opened one.
    pub(crate) fn bind_to(self, response: &axum::response::Response) {
        if let Some(id) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            self.bind(id);
        }
    }

    fn bind(mut self, id: &str) {
        if let Some(client) = self.client.take() {
            self.gate.lock().owners.insert(id.to_owned(), client);
        }
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            self.gate.lock().release(&client);
        }
    }
}
