//! Sessions of 2025-11-25 (and earlier) clients over Streamable HTTP: rmcp's
//! own session manager, with the 2025-11-25 task edge on what the sessions
//! send (see `sep1686`), and the sessions' state kept in the task store so a
//! session outlives a restart of the server.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use rmcp::{
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
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
use crate::{id, store::Store};

/// rmcp's local session manager, with the task edge on every answer.
#[derive(Debug)]
pub(super) struct EdgeSessions {
    inner: LocalSessionManager,
    edge: Edge,
}

impl EdgeSessions {
    pub(super) fn new(edge: Edge) -> Self {
        Self {
            inner: LocalSessionManager::default(),
            edge,
        }
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

type Error = <LocalSessionManager as SessionManager>::Error;
type Transport = <LocalSessionManager as SessionManager>::Transport;

impl SessionManager for EdgeSessions {
    type Error = Error;
    type Transport = Transport;

    async fn create_session(&self) -> Result<(SessionId, Transport), Error> {
        self.inner.create_session().await
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

    async fn close_session(&self, id: &SessionId) -> Result<(), Error> {
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Error> {
        Ok(self.edged(self.inner.create_stream(id, message).await?))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Error> {
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Error> {
        Ok(self.edged(self.inner.create_standalone_stream(id).await?))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Error> {
        Ok(self.edged(self.inner.resume(id, last_event_id).await?))
    }

    async fn restore_session(&self, id: SessionId) -> Result<RestoreOutcome<Transport>, Error> {
        self.inner.restore_session(id).await
    }
}

/// Sessions' state in the task store: a session restarts with the server,
/// and any instance sharing the store can serve it.
#[derive(Debug)]
pub(super) struct StoreSessions(pub(super) Arc<dyn Store>);

#[async_trait::async_trait]
impl SessionStore for StoreSessions {
    async fn load(&self, id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        match self.0.get_session(id).await? {
            Some(state) => Ok(Some(serde_json::from_value(state)?)),
            None => Ok(None),
        }
    }

    async fn store(&self, id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let state = serde_json::to_value(state)?;
        Ok(self.0.put_session(id, state, id::now_ms()).await?)
    }

    async fn delete(&self, id: &str) -> Result<(), SessionStoreError> {
        Ok(self.0.delete_session(id).await?)
    }
}
