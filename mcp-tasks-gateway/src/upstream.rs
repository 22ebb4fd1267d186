//! The upstream server: how it is reached, and the sessions the gateway
//! keeps to it. Each session carries one call at a time, so that whatever
//! the upstream sends on it while the call runs (progress, and requests
//! for the client: elicitation, sampling, roots) belongs to that call.

use std::{
    fmt,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

use mcp_tasks_runtime::tool::JsonObject;
use rmcp::{
    ClientHandler, ErrorData as McpError, RoleClient,
    model::{
        ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, Implementation,
        ProgressNotificationParam, ProtocolVersion, ServerCapabilities,
    },
    service::{
        ClientLifecycleMode, ClientServiceExt, NotificationContext, Peer, RequestContext,
        RunningService,
    },
    transport::{
        StreamableHttpClientTransport, TokioChildProcess,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use crate::GatewayError;

/// How the gateway reaches its upstream MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Upstream {
    /// A command the gateway starts and speaks to over its stdin and stdout
    /// (one process a session).
    Command {
        /// The program.
        program: String,
        /// Its arguments.
        args: Vec<String>,
    },
    /// A Streamable HTTP endpoint (`http://127.0.0.1:3001/mcp`).
    Http {
        /// The endpoint's URL.
        url: String,
    },
}

impl Upstream {
    /// `program args…`, started by the gateway and spoken to over stdio.
    pub fn command(
        program: impl Into<String>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self::Command {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
        }
    }

    /// The Streamable HTTP endpoint at `url`.
    pub fn http(url: impl Into<String>) -> Self {
        Self::Http { url: url.into() }
    }
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Command { program, args } => {
                write!(f, "`{program}")?;
                for arg in args {
                    write!(f, " {arg}")?;
                }
                write!(f, "` (stdio)")
            }
            Self::Http { url } => write!(f, "{url}"),
        }
    }
}

/// The pause before the gateway opens another `subscriptions/listen` stream
/// once one ended, unless streams end soon after they open.
const LISTEN_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);
/// A stream that ends sooner than this after it opened doubles the pause.
const LISTEN_SHORT: std::time::Duration = std::time::Duration::from_secs(10);
/// The longest pause between two streams.
const LISTEN_PAUSE_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// What the upstream sends a call while it runs.
#[derive(Debug)]
pub(crate) enum Event {
    /// `notifications/progress`.
    Progress(ProgressNotificationParam),
    /// `notifications/message` (a log message; deprecated from 2026-07-28
    /// on, and still sent).
    #[allow(deprecated)]
    Log(rmcp::model::LoggingMessageNotificationParam),
    /// A request for the call's client (`{"method", "params"}`), and where
    /// its answer (the client's result, or why there is none) goes.
    Ask(Value, oneshot::Sender<Result<Value, McpError>>),
}

/// The gateway's side of one upstream session: it hands what the upstream
/// sends to the call the session carries.
#[derive(Debug, Clone, Default)]
pub(crate) struct Relay {
    state: Arc<Mutex<RelayState>>,
    /// Told when the upstream says its tools changed (shared by every
    /// session).
    tools_changed: Arc<ToolsChanged>,
}

/// The upstream's tool changes, as its sessions hear of them.
#[derive(Debug, Default)]
struct ToolsChanged {
    /// Wakes the gateway, which lists the tools again.
    notify: Notify,
    /// How many times the list the gateway read was not the one before: a
    /// session that read the tools' schemas at an earlier count reads them
    /// again before its next call.
    count: AtomicU64,
}

#[derive(Debug, Default)]
struct RelayState {
    /// The call the session carries, while it carries one.
    call: Option<mpsc::UnboundedSender<Event>>,
    /// The session answered `roots/list` for a call: an upstream may keep
    /// roots for the session's life, and the next call may be another
    /// client's, so the session is not used again.
    spent: bool,
    /// What the session's dropped call still sends upstream (its cancel):
    /// the spent session stays open until it is sent.
    farewell: Option<tokio::task::JoinHandle<()>>,
}

impl Relay {
    fn lock(&self) -> MutexGuard<'_, RelayState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks the call the session carries `method` with `params`, and waits
    /// for its client's answer.
    async fn ask<T: DeserializeOwned>(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<T, McpError> {
        let (to, answer) = oneshot::channel();
        let mut request = serde_json::json!({ "method": method });
        if let Some(params) = params {
            request["params"] = params;
        }
        let sent = {
            let state = self.lock();
            state
                .call
                .as_ref()
                .is_some_and(|call| call.send(Event::Ask(request, to)).is_ok())
        };
        if !sent {
            return Err(McpError::invalid_request(
                format!(
                    "{method} outside a call: the gateway asks a call's client, and no call is \
                     in flight on this session"
                ),
                None,
            ));
        }
        let answer = answer.await.map_err(|_| {
            McpError::internal_error(format!("{method}: the call ended before its answer"), None)
        })??;
        if method == "roots/list" {
            self.lock().spent = true;
        }
        serde_json::from_value(answer).map_err(|e| {
            McpError::internal_error(
                format!("{method}: the client's answer does not decode: {e}"),
                None,
            )
        })
    }
}

fn params<T: serde::Serialize>(params: &T) -> Option<Value> {
    serde_json::to_value(params).ok()
}

impl ClientHandler for Relay {
    fn get_info(&self) -> ClientConfig {
        // What the gateway relays to its own clients, each call asking its
        // own (a client that declared none of it gets an error back).
        // And the tasks extension: a 2026-07-28 upstream's tasks are
        // followed (a passed-on call declares its client's capabilities,
        // less this).
        let capabilities: ClientCapabilities = serde_json::from_value(serde_json::json!({
            "elicitation": {"form": {}, "url": {}},
            "sampling": {},
            "roots": {},
            "extensions": {rmcp::model::TASKS_EXTENSION_ID: {}},
        }))
        .unwrap_or_default();
        ClientConfig::new(
            capabilities,
            Implementation::new("mcp-tasks-gateway", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(call) = &self.lock().call {
            let _ = call.send(Event::Progress(params));
        }
    }

    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(call) = &self.lock().call {
            let _ = call.send(Event::Log(params));
        }
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        self.ask("elicitation/create", params(&request)).await
    }

    // Sampling and roots are deprecated from 2026-07-28 on, and still asked
    // by upstreams of 2025-11-25: relayed as long as clients can answer.
    #[allow(deprecated)]
    async fn create_message(
        &self,
        request: rmcp::model::CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, McpError> {
        self.ask("sampling/createMessage", params(&request)).await
    }

    #[allow(deprecated)]
    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, McpError> {
        self.ask("roots/list", None).await
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify.notify_one();
    }
}

/// One session to the upstream.
struct Session {
    service: RunningService<RoleClient, Relay>,
    relay: Relay,
    /// The change count at which the session last listed the tools, if it
    /// did: rmcp's client reads the `x-mcp-header` marks of a tool's schema
    /// off the `tools/list` answers of its own session, and a 2026-07-28
    /// session over HTTP sends the arguments they mark as `Mcp-Param-*`
    /// headers.
    listed: Option<u64>,
}

/// The gateway's sessions to its upstream: each carries one call at a
/// time, idle ones are kept for the next call, and at most `max` are open.
pub(crate) struct Sessions {
    upstream: Upstream,
    idle: Mutex<Vec<Session>>,
    open: Arc<Semaphore>,
    tools_changed: Arc<ToolsChanged>,
    /// What the upstream's last session said it serves, and its
    /// instructions.
    described: Mutex<(ServerCapabilities, Option<String>)>,
}

impl fmt::Debug for Sessions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sessions")
            .field("upstream", &self.upstream)
            .field("free", &self.open.available_permits())
            .finish_non_exhaustive()
    }
}

/// A session taken for one call: what the upstream sends on it goes to
/// the call's events; back to the idle ones when dropped, unless it
/// closed or answered `roots/list`.
pub(crate) struct Taken<'a> {
    sessions: &'a Sessions,
    session: Option<Session>,
    _permit: OwnedSemaphorePermit,
}

impl Taken<'_> {
    fn session_mut(&mut self) -> &mut Session {
        self.session
            .as_mut()
            .expect("a taken session is held until dropped")
    }

    fn session(&self) -> &Session {
        self.session
            .as_ref()
            .expect("a taken session is held until dropped")
    }

    pub(crate) fn peer(&self) -> &Peer<RoleClient> {
        self.session().service.peer()
    }

    /// The session is not to carry another call (its call was dropped
    /// mid-way: what the upstream still sends for it must reach no other).
    pub(crate) fn spender(&self) -> Spender {
        Spender(self.session().relay.clone())
    }
}

/// Marks a session not to be used again.
pub(crate) struct Spender(Relay);

impl Spender {
    pub(crate) fn spend(&self) {
        self.0.lock().spent = true;
    }

    /// Marks the session not to be used again, and keeps it open until
    /// `farewell` (what its dropped call still sends upstream) ends, 5 s at
    /// most.
    pub(crate) fn spend_after(&self, farewell: tokio::task::JoinHandle<()>) {
        let mut state = self.0.lock();
        state.spent = true;
        state.farewell = Some(farewell);
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        let (spent, farewell) = {
            let mut state = session.relay.lock();
            state.call = None;
            (state.spent, state.farewell.take())
        };
        if !spent && !session.service.peer().is_transport_closed() {
            self.sessions
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(session);
        } else if let Some(farewell) = farewell {
            tokio::spawn(async move {
                let _ = tokio::time::timeout(std::time::Duration::from_secs(5), farewell).await;
                drop(session);
            });
        }
    }
}

impl Sessions {
    pub(crate) fn new(upstream: Upstream, max: usize) -> Self {
        Self {
            upstream,
            idle: Mutex::new(Vec::new()),
            open: Arc::new(Semaphore::new(max.max(1))),
            tools_changed: Arc::default(),
            described: Mutex::new((ServerCapabilities::default(), None)),
        }
    }

    /// Waits until the upstream says its tools changed: a
    /// `notifications/tools/list_changed` on any session (2025-11-25), or on
    /// the `subscriptions/listen` stream this opens on a session of its own
    /// (2026-07-28, where nothing is sent unasked).
    pub(crate) async fn tools_changed(&self) {
        self.tools_changed.notify.notified().await;
    }

    /// The gateway listed the tools again and they are not the ones before:
    /// the sessions read their schemas again.
    pub(crate) fn schemas_changed(&self) {
        self.tools_changed.count.fetch_add(1, Ordering::SeqCst);
    }

    /// Keeps a session listening for the upstream's tool list changes, for
    /// an upstream of 2026-07-28 (and a new one after it is lost); returns
    /// at once for an upstream of an earlier era, whose sessions say so
    /// unasked.
    pub(crate) async fn listen_for_tools(&self) {
        // Between two streams: doubled while streams end soon after they
        // open (an upstream or a proxy that closes them), up to half a
        // minute.
        let mut pause = LISTEN_PAUSE;
        loop {
            let session = match self.connect().await {
                Ok(session) => session,
                Err(e) => {
                    tracing::warn!(error = %e, "could not open a session to hear the upstream's tool changes; trying again");
                    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
                    continue;
                }
            };
            let peer = session.service.peer().clone();
            let modern = peer
                .peer_info()
                .is_some_and(|info| info.protocol_version >= ProtocolVersion::V_2026_07_28);
            if !modern {
                return;
            }
            let filter = rmcp::model::SubscriptionFilter::builder()
                .tools_list_changed()
                .build();
            let opened = tokio::time::Instant::now();
            match peer.listen(filter).await {
                Ok(mut stream) => {
                    while let Ok(Some(notification)) = stream.next().await {
                        if matches!(
                            notification,
                            rmcp::model::ServerNotification::ToolListChangedNotification(_)
                        ) {
                            self.tools_changed.notify.notify_one();
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the upstream refused to tell of its tool changes");
                    return;
                }
            }
            // The stream ended (the session was lost, or the upstream closed
            // it): the list may have changed meanwhile.
            self.tools_changed.notify.notify_one();
            pause = if opened.elapsed() < LISTEN_SHORT {
                (pause * 2).min(LISTEN_PAUSE_MAX)
            } else {
                LISTEN_PAUSE
            };
            tracing::debug!(
                ?pause,
                "the upstream's stream of tool changes ended; opening another"
            );
            tokio::time::sleep(pause).await;
        }
    }

    /// What the upstream serves, and its instructions, as its last
    /// session said.
    pub(crate) fn described(&self) -> (ServerCapabilities, Option<String>) {
        self.described
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// A session for one call (waiting, first come first served, while
    /// every session allowed is busy), whose events go to `events`; one that
    /// sends `Mcp-Param-*` headers has read the tools' schemas first.
    pub(crate) async fn take(
        &self,
        events: Option<mpsc::UnboundedSender<Event>>,
    ) -> Result<Taken<'_>, GatewayError> {
        let mut taken = self.checkout(events).await?;
        self.read_schemas(taken.session_mut()).await;
        Ok(taken)
    }

    /// [`take`](Self::take), without reading the tools' schemas.
    async fn checkout(
        &self,
        events: Option<mpsc::UnboundedSender<Event>>,
    ) -> Result<Taken<'_>, GatewayError> {
        let permit = self
            .open
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| self.failed(e.to_string()))?;
        let idle = loop {
            let next = self
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            match next {
                Some(s) if s.service.peer().is_transport_closed() => continue,
                other => break other,
            }
        };
        let session = match idle {
            Some(session) => session,
            None => self.connect().await?,
        };
        session.relay.lock().call = events;
        Ok(Taken {
            sessions: self,
            session: Some(session),
            _permit: permit,
        })
    }

    /// Lists the tools on `session` if it sends `Mcp-Param-*` headers and
    /// has not listed them since they last changed: an HTTP upstream of
    /// 2026-07-28 refuses a call without the headers its tool's schema asks
    /// for.
    async fn read_schemas(&self, session: &mut Session) {
        let headers = matches!(self.upstream, Upstream::Http { .. })
            && session
                .service
                .peer()
                .peer_info()
                .is_some_and(|info| info.protocol_version >= ProtocolVersion::STANDARD_HEADERS);
        let now = self.tools_changed.count.load(Ordering::SeqCst);
        if !headers || session.listed == Some(now) {
            return;
        }
        if let Err(e) = self.list_on(session).await {
            tracing::warn!(error = %e, "the upstream did not list its tools on a new session: its calls carry no Mcp-Param-* headers");
        }
    }

    /// The upstream's tools, listed on `session`, which notes that it did.
    async fn list_on(
        &self,
        session: &mut Session,
    ) -> Result<Vec<rmcp::model::Tool>, rmcp::service::ServiceError> {
        let now = self.tools_changed.count.load(Ordering::SeqCst);
        let tools = session.service.peer().list_all_tools().await?;
        session.listed = Some(now);
        Ok(tools)
    }

    fn failed(&self, message: String) -> GatewayError {
        GatewayError::Connect {
            upstream: self.upstream.to_string(),
            message,
        }
    }

    async fn connect(&self) -> Result<Session, GatewayError> {
        // The upstream's own era: a 2026-07-28 server is spoken to in it, any
        // other with `initialize` (2025-11-25).
        let lifecycle = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        };
        let relay = Relay {
            tools_changed: self.tools_changed.clone(),
            ..Relay::default()
        };
        let service = match &self.upstream {
            Upstream::Command { program, args } => {
                let mut command = tokio::process::Command::new(program);
                command.args(args);
                let transport =
                    TokioChildProcess::new(command).map_err(|e| self.failed(e.to_string()))?;
                relay
                    .clone()
                    .serve_with_lifecycle(transport, lifecycle)
                    .await
            }
            Upstream::Http { url } => {
                let transport = StreamableHttpClientTransport::from_config(
                    StreamableHttpClientTransportConfig::with_uri(url.clone()),
                );
                relay
                    .clone()
                    .serve_with_lifecycle(transport, lifecycle)
                    .await
            }
        }
        .map_err(|e| self.failed(e.to_string()))?;
        if let Some(info) = service.peer().peer_info() {
            *self
                .described
                .lock()
                .unwrap_or_else(PoisonError::into_inner) =
                (info.capabilities.clone(), info.instructions.clone());
        }
        Ok(Session {
            service,
            relay,
            listed: None,
        })
    }

    /// The upstream's tools, as JSON objects (every page).
    pub(crate) async fn list_tools(&self) -> Result<Vec<JsonObject>, GatewayError> {
        let failed = |message: String| GatewayError::ListTools {
            upstream: self.upstream.to_string(),
            message,
        };
        // The listing reads the schemas as well: nothing to read first.
        let mut session = self.checkout(None).await?;
        let tools = self
            .list_on(session.session_mut())
            .await
            .map_err(|e| failed(e.to_string()))?;
        tools
            .into_iter()
            .map(|tool| match serde_json::to_value(tool) {
                Ok(Value::Object(tool)) => Ok(tool),
                Ok(other) => Err(failed(format!("a tool is not an object: {other}"))),
                Err(e) => Err(failed(e.to_string())),
            })
            .collect()
    }
}
