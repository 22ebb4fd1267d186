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

use super::{
    gate::{CLIENT, SessionGate},
    sep1686::Edge,
};
use crate::{id, mcp::peer::Client, store::FrontDoorStore};

/// rmcp's local session manager, with the task edge on every answer, the
/// gate's count of open sessions, and idle sessions' stored state deleted.
#[derive(Debug)]
pub(crate) struct EdgeSessions {
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
/// [`log`](crate::mcp::log)). rmcp routes a request's progress and cancellation
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
        super::detached::session_closed(id.as_ref());
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
