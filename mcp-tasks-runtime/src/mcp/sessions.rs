//! Sessions of 2025-11-25 (and earlier) clients over Streamable HTTP: rmcp's
//! own session manager, with the 2025-11-25 task edge on what the sessions
//! send (see `sep1686`), and the sessions' state kept in the engine's
//! [front door](crate::store::FrontDoorStore) (the task store's own, by
//! default) so a session outlives a restart of the server.
//!
//! Sessions cost the server memory and store rows, and without a principal
//! every client is a stranger, so they are bounded ([`SessionGate`]): so
//! many open per client (see [`Client`]) and in total, so many opened a
//! minute, `initialize` params of a bounded size, and an idle timeout. With
//! a principal (a principal function's answer, or a token's subject) a
//! session belongs to the principal that opened it: a request in it under
//! another is answered as for an unknown session (HTTP 404).
//!
//! The idle timeout is rmcp's keep-alive: every message in the session
//! renews it (a request, notification or response the client sends, a
//! stream it opens, and every message the server sends in it, such as the
//! progress of a call still running); an open stream with nothing on it
//! does not, nor do the stream's keep-alive comments. A session that goes
//! idle is closed and its stored state deleted, so its id cannot bring it
//! back; the stored state of a session still open lets it survive a
//! restart, and is swept [`SESSION_TTL`](crate::store::SESSION_TTL) after
//! its `initialize` whatever its use.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use rmcp::{
    model::{ClientJsonRpcMessage, RequestId, ServerJsonRpcMessage},
    transport::{
        common::server_side_http::ServerSseMessage,
        streamable_http_server::session::{
            RestoreOutcome, SessionId, SessionManager,
            local::LocalSessionManager,
            store::{SessionState, SessionStore, SessionStoreError},
        },
    },
};

use super::sep1686::Edge;
use crate::{engine::LOOPBACK_FACTOR, id, store::FrontDoorStore};

/// rmcp's local session manager, with the task edge on every answer, the
/// gate's count of open sessions, and idle sessions' stored state deleted.
#[derive(Debug)]
pub(super) struct EdgeSessions {
    inner: LocalSessionManager,
    edge: Edge,
    gate: Arc<SessionGate>,
    store: Arc<dyn FrontDoorStore>,
    /// When each open session last heard from its client.
    seen: std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
    /// The POST streams of the requests being served, for their handlers'
    /// own notifications.
    streams: Arc<RequestStreams>,
}

impl EdgeSessions {
    pub(super) fn new(edge: Edge, gate: Arc<SessionGate>, store: Arc<dyn FrontDoorStore>) -> Self {
        let mut inner = LocalSessionManager::default();
        inner.session_config.keep_alive = Some(gate.limits().idle_timeout);
        Self {
            inner,
            edge,
            gate,
            store,
            seen: std::sync::Mutex::default(),
            streams: Arc::default(),
        }
    }

    /// The POST streams of the requests being served in `session` (see
    /// [`RequestStreams`]).
    pub(super) fn request_streams(&self, session: &str) -> SessionStreams {
        SessionStreams {
            streams: self.streams.clone(),
            session: session.to_owned(),
        }
    }

    fn seen(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, std::time::Instant>> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The client sent something in session `id`.
    fn touch(&self, id: &SessionId) {
        self.seen()
            .insert(id.to_string(), std::time::Instant::now());
    }

    fn edged(
        &self,
        stream: impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
    ) -> impl Stream<Item = ServerSseMessage> + Send + Sync + 'static {
        let edge = self.edge.clone();
        stream.map(move |mut event| {
            if let Some(message) = &event.message {
                let mut message = (**message).clone();
                edge.rewrite_response(&mut message);
                event.message = Some(Arc::new(message));
            }
            event
        })
    }
}

/// How many of a request's own notifications may wait for its stream.
const OWN_BUFFER: usize = 64;

/// The POST response streams of the requests being served in 2025-11-25
/// sessions, by session and request id: where a notification that a
/// request's handler sends for that request goes (a log line of
/// [`log`](super::log)). rmcp routes a request's progress and cancellation
/// to its own stream, and every other notification to the session's GET
/// stream, where it is lost when none is open; the transport says a
/// request's notifications go on its own stream.
#[derive(Debug, Default)]
pub(crate) struct RequestStreams {
    open: std::sync::Mutex<
        std::collections::HashMap<
            (String, String),
            tokio::sync::mpsc::Sender<ServerJsonRpcMessage>,
        >,
    >,
}

impl RequestStreams {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<
        '_,
        std::collections::HashMap<
            (String, String),
            tokio::sync::mpsc::Sender<ServerJsonRpcMessage>,
        >,
    > {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn key(session: &str, request: &RequestId) -> (String, String) {
        (
            session.to_owned(),
            serde_json::to_string(request).unwrap_or_default(),
        )
    }

    fn register(
        self: &Arc<Self>,
        session: &SessionId,
        request: &RequestId,
        tx: tokio::sync::mpsc::Sender<ServerJsonRpcMessage>,
    ) -> Registered {
        let key = Self::key(session, request);
        self.lock().insert(key.clone(), tx);
        Registered {
            streams: self.clone(),
            key,
        }
    }

    /// Sends `message` on the stream of `request` in `session`; `false`
    /// when that request has no stream open here (it was answered, or it
    /// came over another instance or transport).
    async fn send(
        &self,
        session: &str,
        request: &RequestId,
        message: ServerJsonRpcMessage,
    ) -> bool {
        let sender = self.lock().get(&Self::key(session, request)).cloned();
        match sender {
            Some(sender) => sender.send(message).await.is_ok(),
            None => false,
        }
    }
}

/// The POST streams of one session's requests, for a handler to send its
/// request's own notifications on (in the request's extensions).
#[derive(Debug, Clone)]
pub(crate) struct SessionStreams {
    streams: Arc<RequestStreams>,
    session: String,
}

impl SessionStreams {
    /// Sends `message` on the stream of `request`; `false` when it has none
    /// open here.
    pub(crate) async fn send(&self, request: &RequestId, message: ServerJsonRpcMessage) -> bool {
        self.streams.send(&self.session, request, message).await
    }
}

/// A request's place in [`RequestStreams`], given up with its stream.
#[derive(Debug)]
struct Registered {
    streams: Arc<RequestStreams>,
    key: (String, String),
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.streams.lock().remove(&self.key);
    }
}

/// A request's POST stream with its handler's own notifications: each sent
/// before what rmcp has ready (a notification is sent before the answer
/// that follows it).
struct WithOwn<S> {
    inner: std::pin::Pin<Box<S>>,
    own: Option<tokio::sync::mpsc::Receiver<ServerJsonRpcMessage>>,
    _registered: Option<Registered>,
}

impl<S: Stream<Item = ServerSseMessage>> Stream for WithOwn<S> {
    type Item = ServerSseMessage;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<ServerSseMessage>> {
        if let Some(own) = self.own.as_mut()
            && let std::task::Poll::Ready(Some(message)) = own.poll_recv(cx)
        {
            let mut event = ServerSseMessage::default();
            event.message = Some(Arc::new(message));
            return std::task::Poll::Ready(Some(event));
        }
        self.inner.as_mut().poll_next(cx)
    }
}

type Error = <LocalSessionManager as SessionManager>::Error;
type Transport = <LocalSessionManager as SessionManager>::Transport;

impl SessionManager for EdgeSessions {
    type Error = Error;
    type Transport = Transport;

    async fn create_session(&self) -> Result<(SessionId, Transport), Error> {
        let (id, transport) = self.inner.create_session().await?;
        self.touch(&id);
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Error> {
        let mut answer = self.inner.initialize_session(id, message).await?;
        self.edge.rewrite_response(&mut answer);
        Ok(answer)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Error> {
        self.inner.has_session(id).await
    }

    /// Called on `DELETE` and when the session's worker ends (idle, or
    /// its service stopped). A session the client left idle for the idle
    /// timeout has its stored state deleted too (rmcp deletes it itself on
    /// `DELETE`), so that its id cannot revive it.
    async fn close_session(&self, id: &SessionId) -> Result<(), Error> {
        super::legacy::session_closed(id.as_ref());
        let last = self.seen().remove(id.as_ref());
        self.gate.closed(id);
        let idle = last.is_some_and(|at| at.elapsed() >= self.gate.limits().idle_timeout);
        if idle && let Err(e) = self.store.delete_session(id).await {
            tracing::warn!(error = %e, "could not delete an idle session's state");
        }
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Error> {
        self.touch(id);
        let request = match &message {
            ClientJsonRpcMessage::Request(request) => Some(request.id.clone()),
            _ => None,
        };
        let inner = self.inner.create_stream(id, message).await?;
        let (own, registered) = match request {
            Some(request) => {
                let (tx, rx) = tokio::sync::mpsc::channel(OWN_BUFFER);
                (Some(rx), Some(self.streams.register(id, &request, tx)))
            }
            None => (None, None),
        };
        Ok(self.edged(WithOwn {
            inner: Box::pin(inner),
            own,
            _registered: registered,
        }))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Error> {
        self.touch(id);
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Error> {
        self.touch(id);
        Ok(self.edged(self.inner.create_standalone_stream(id).await?))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Error> {
        self.touch(id);
        Ok(self.edged(self.inner.resume(id, last_event_id).await?))
    }

    async fn restore_session(&self, id: SessionId) -> Result<RestoreOutcome<Transport>, Error> {
        self.touch(&id);
        self.inner.restore_session(id).await
    }
}

/// Sessions' state in the front door: a session restarts with the server,
/// and any instance sharing the store can serve it. Under bearer tokens the
/// state names the subject that opened the session (`owner`), and a restore
/// under another finds nothing.
#[derive(Debug)]
pub(super) struct StoreSessions {
    pub(super) store: Arc<dyn FrontDoorStore>,
    pub(super) gate: Arc<SessionGate>,
}

/// The field of a session's stored state that names its owner.
const OWNER: &str = "owner";

#[async_trait::async_trait]
impl SessionStore for StoreSessions {
    async fn load(&self, id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let Some(state) = self.store.get_session(id).await? else {
            return Ok(None);
        };
        let client = CLIENT.try_with(Clone::clone).unwrap_or(Client::Unknown);
        let owner = match state.get(OWNER).and_then(serde_json::Value::as_str) {
            Some(p) => Client::Principal(p.to_owned()),
            None => client.clone(),
        };
        if !owner.may_use(&client) {
            return Ok(None);
        }
        let state = serde_json::from_value(state)?;
        self.gate.restored(id, owner);
        Ok(Some(state))
    }

    async fn store(&self, id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let mut state = serde_json::to_value(state)?;
        let owner = CLIENT
            .try_with(|c| c.stored().map(str::to_owned))
            .ok()
            .flatten();
        if let (Some(owner), Some(fields)) = (owner, state.as_object_mut()) {
            fields.insert(OWNER.into(), owner.into());
        }
        Ok(self.store.put_session(id, state, id::now_ms()).await?)
    }

    async fn delete(&self, id: &str) -> Result<(), SessionStoreError> {
        Ok(self.store.delete_session(id).await?)
    }
}

/// Who makes an HTTP request, for every per-client limit and for the
/// binding of sessions: the principal (the principal function's answer, else
/// the bearer token's subject under [`auth`](super::TaskServerBuilder::auth));
/// without one, the peer's address as
/// [`address_key`](crate::engine::address_key) keys it (IPv6 by its /64,
/// every loopback address together unless counted apart).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Client {
    /// The principal function's answer, or a verified token's `sub`.
    Principal(String),
    /// No principal: the peer's address, keyed.
    Addr(std::net::IpAddr),
    /// No principal, on a loopback address, loopback addresses counted
    /// together: this machine, with [`LOOPBACK_FACTOR`] times the budget.
    Local,
    /// Neither is known (a router served without `ConnectInfo`).
    Unknown,
}

/// The address the engine counts a request's creates by, when it has no
/// principal: the request's [`Client`] address (loopback addresses as one,
/// `127.0.0.1`, unless counted apart), put in the request's extensions by
/// the HTTP edge for `wire::client_addr`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientAddress(pub(crate) std::net::IpAddr);

/// How the HTTP edge tells clients apart (see [`Client`]).
#[derive(Clone)]
pub(super) struct Clients {
    pub(super) principal: Option<super::builder::PrincipalFn>,
    pub(super) loopback_apart: bool,
}

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clients")
            .field("principal", &self.principal.is_some())
            .field("loopback_apart", &self.loopback_apart)
            .finish()
    }
}

impl Clients {
    /// The client of an HTTP request, from its head.
    pub(super) fn of(&self, parts: &axum::http::request::Parts) -> Client {
        if let Some(who) = &self.principal {
            if let Some(p) = who(parts) {
                return Client::Principal(p);
            }
        } else {
            #[cfg(feature = "jwt")]
            if let Some(token) = parts.extensions.get::<super::auth::VerifiedToken>() {
                return Client::Principal(token.subject.clone());
            }
        }
        parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map_or(Client::Unknown, |info| self.of_addr(info.0.ip()))
    }

    /// The client at `ip`, without a principal (a connection, before any
    /// request is read).
    pub(super) fn of_addr(&self, ip: std::net::IpAddr) -> Client {
        let key = crate::engine::address_key(ip, self.loopback_apart);
        if !self.loopback_apart && key.is_loopback() {
            Client::Local
        } else {
            Client::Addr(key)
        }
    }
}

impl Client {
    /// A per-client cap of `cap`, for this client: [`LOOPBACK_FACTOR`]
    /// times it for this machine's loopback addresses together.
    pub(super) fn cap(&self, cap: usize) -> usize {
        match self {
            Self::Local => cap.saturating_mul(LOOPBACK_FACTOR),
            _ => cap,
        }
    }

    /// The address the engine counts creates by (none for a principal).
    pub(super) fn address(&self) -> Option<std::net::IpAddr> {
        match self {
            Self::Addr(ip) => Some(*ip),
            Self::Local => Some(std::net::Ipv4Addr::LOCALHOST.into()),
            Self::Principal(_) | Self::Unknown => None,
        }
    }

    /// Whether a session opened by `self` may be used by `other`: with a
    /// principal only by the same principal; without, by anyone who holds
    /// its id (an address is no identity: clients behind one NAT share it,
    /// and one client may change it).
    fn may_use(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Principal(_), _) | (_, Self::Principal(_)) => self == other,
            _ => true,
        }
    }

    /// How the session's stored state names its owner (principals only).
    fn stored(&self) -> Option<&str> {
        match self {
            Self::Principal(p) => Some(p),
            _ => None,
        }
    }
}

tokio::task_local! {
    /// The client of the HTTP request being served, for the session store
    /// to record a new session's owner and check a restored one's.
    pub(super) static CLIENT: Client;
}

/// The limits on sessions (see [`HttpOptions`](super::HttpOptions)).
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
    fn restored(&self, id: &str, owner: Client) {
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
    fn closed(&self, id: &str) {
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
pub(super) struct Opening {
    gate: Arc<SessionGate>,
    /// `None` once bound.
    client: Option<Client>,
}

impl Opening {
    /// The session opened as `id`: it keeps the place until it closes.
    pub(super) fn bind(mut self, id: &str) {
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
