//! The sessions' part of the HTTP edge ([`HttpSessions`]): who may open a
//! session and use one, a `DELETE` answered as the official SDKs expect,
//! and each request's own stream for its handler's notifications.

use std::{sync::Arc, time::Duration};

use axum::{
    extract::Request,
    http::{HeaderValue, Method, StatusCode, request::Parts},
    response::{IntoResponse as _, Response},
};
use rmcp::transport::streamable_http_server::{
    SessionId, SessionManager as _, StreamableHttpServerConfig,
};
use serde_json::{Value, json};

use super::{
    gate::{CLIENT, Opening, SessionGate, SessionLimits},
    sep1686::Edge,
    sessions::{EdgeSessions, StoreSessions},
};
use crate::{
    mcp::{options::HttpOptions, peer::Client},
    store::FrontDoorStore,
};

/// The 2025-11-25 sessions of one HTTP endpoint.
#[derive(Debug)]
pub(crate) struct HttpSessions {
    /// The limits on sessions, and who owns each.
    gate: Arc<SessionGate>,
    /// The sessions open here.
    sessions: Arc<EdgeSessions>,
    /// The sessions' stored state.
    store: Arc<dyn FrontDoorStore>,
}

impl HttpSessions {
    /// The sessions of an endpoint whose answers get `edge`, stored in
    /// `store`, as `options` bound them.
    pub(crate) fn new(edge: Edge, store: Arc<dyn FrontDoorStore>, options: &HttpOptions) -> Self {
        let gate = Arc::new(SessionGate::new(SessionLimits {
            max_sessions: options.max_sessions,
            max_per_client: options.max_sessions_per_client,
            per_minute: options.sessions_per_minute,
            max_initialize_bytes: options.max_initialize_bytes,
            idle_timeout: options.session_idle_timeout,
        }));
        Self {
            sessions: Arc::new(EdgeSessions::new(edge, gate.clone(), store.clone())),
            gate,
            store,
        }
    }

    /// rmcp's settings for sessions: opened by `initialize`, and kept in
    /// the engine's front door so that they outlive a restart.
    pub(crate) fn configure(
        &self,
        config: StreamableHttpServerConfig,
    ) -> StreamableHttpServerConfig {
        let mut config = config.with_legacy_session_mode(true);
        config.session_store = Some(Arc::new(StoreSessions {
            store: self.store.clone(),
            gate: self.gate.clone(),
        }));
        config
    }

    /// The session manager rmcp serves the sessions with.
    pub(crate) fn manager(&self) -> Arc<EdgeSessions> {
        self.sessions.clone()
    }

    /// Serves `req` (with `serve`) as `client`'s: a session another
    /// principal owns is unknown to it (404, as rmcp answers an unknown
    /// session); a session ended by `DELETE` is answered `200 OK` (rmcp says
    /// `202`, which the official SDKs take for a failure), and a `DELETE` of
    /// a session that is not open (ended, or never issued) `404`.
    pub(crate) async fn serve<F: Future<Output = Response>>(
        &self,
        req: Request,
        client: Client,
        serve: impl FnOnce(Request) -> F,
    ) -> Response {
        let delete = req.method() == Method::DELETE;
        let session = req
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok());
        if let Some(id) = session {
            let usable = self.gate.may_use(id, &client);
            if usable == Some(false) || (delete && usable.is_none() && !self.is_open(id).await) {
                return (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response();
            }
        }
        let mut response = CLIENT.scope(client, serve(req)).await;
        if delete && response.status() == StatusCode::ACCEPTED {
            *response.status_mut() = StatusCode::OK;
        }
        response
    }

    /// Whether session `id`, which this process's gate does not know, is
    /// open here or stored (open on another instance, or before a restart).
    async fn is_open(&self, id: &str) -> bool {
        let sid: SessionId = id.to_owned().into();
        if self.sessions.has_session(&sid).await.unwrap_or(false) {
            return true;
        }
        // A store that cannot answer: let rmcp try (and answer) as before.
        self.store
            .get_session(id)
            .await
            .map_or(true, |s| s.is_some())
    }

    /// Where the handler's own notifications go, for a request in a
    /// session: its own stream.
    pub(crate) fn prepare(&self, parts: &mut Parts) {
        if let Some(session) = parts
            .headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            let streams = self.sessions.request_streams(session);
            parts.extensions.insert(streams);
        }
    }

    /// A place for the session an `initialize` opens, or the answer that
    /// refuses it: params over `max_initialize_bytes` (400, `-32602`), or a
    /// client over its session cap or rate (429).
    pub(crate) fn admit(
        &self,
        initialize: &Value,
        client: &Client,
    ) -> Result<Opening, Box<Response>> {
        let id = initialize.get("id").cloned().unwrap_or(Value::Null);
        let limits = self.gate.limits();
        let size = initialize
            .get("params")
            .and_then(|p| serde_json::to_vec(p).ok())
            .map_or(0, |p| p.len());
        if size > limits.max_initialize_bytes {
            let message = format!(
                "Invalid params: the initialize params are {size} bytes, over the limit of {} (max_initialize_bytes)",
                limits.max_initialize_bytes
            );
            let error = json!({"code": -32602, "message": message,
                "data": {"limit": "max_initialize_bytes", "max": limits.max_initialize_bytes}});
            return Err(Box::new(rpc_refusal(
                StatusCode::BAD_REQUEST,
                &id,
                &error,
                None,
            )));
        }
        self.gate.admit(client).map_err(|refused| {
            let mut data = json!({"limit": refused.limit});
            if let Some(wait) = refused.retry_after {
                data["retryAfterMs"] = json!(wait.as_millis());
            }
            let error = json!({"code": -32603, "message": refused.message, "data": data});
            Box::new(rpc_refusal(
                StatusCode::TOO_MANY_REQUESTS,
                &id,
                &error,
                refused.retry_after,
            ))
        })
    }
}

/// A JSON-RPC error answering request `id`, with HTTP `status` (and
/// `Retry-After` when a wait is known).
fn rpc_refusal(status: StatusCode, id: &Value, error: &Value, retry: Option<Duration>) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": error}).to_string();
    let mut response = (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response();
    if let Some(wait) = retry
        && let Ok(value) = HeaderValue::from_str(&wait.as_secs().max(1).to_string())
    {
        response
            .headers_mut()
            .insert(axum::http::header::RETRY_AFTER, value);
    }
    response
}
