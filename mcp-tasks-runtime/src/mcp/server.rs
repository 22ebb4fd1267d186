//! [`TaskServer`]: rmcp's `ServerHandler` over the [`Engine`].

use std::{borrow::Cow, sync::Arc, time::Duration};

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
        CompleteResult, CreateTaskResult, CustomRequest, CustomResult, DiscoverResult,
        GetPromptRequestParams, GetPromptResponse, GetTaskParams, GetTaskResult,
        InputRequiredResult, JsonObject as RmcpObject, ListPromptsResult,
        ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, MetaObject,
        PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
        ServerConfig, SubscribeRequestParams, Tool, UnsubscribeRequestParams, UpdateTaskParams,
    },
    service::RequestContext,
};
use serde_json::{Map, Value};

use super::{
    builder::Settings,
    envelope::SERVER_INFO,
    inline,
    legacy::{self, Detached},
    listen::{self, Listeners},
    logging::SessionLevel,
    malformed,
    sep1686::Edge,
    wire,
};
use crate::{
    engine::{Call, CallMode, CallOutcome, Engine},
    input::InputCapabilities,
};

/// A handler with nothing of its own: the default for [`TaskServer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct NoExtras;

impl ServerHandler for NoExtras {}

/// Serves the engine's task tools over MCP, next to whatever `H` (an rmcp
/// `ServerHandler` with its own tools, prompts and resources) serves.
///
/// ```
/// use mcp_tasks_runtime::{Engine, mcp::TaskServer, store::MemoryStore, tool::Registry};
///
/// # async fn run() -> mcp_tasks_runtime::Result<()> {
/// let engine = Engine::builder(MemoryStore::new()).registry(Registry::new()).start().await?;
/// let server = TaskServer::builder(engine).name("my-server", "1.0.0").build();
/// # let _ = server;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct TaskServer<H = NoExtras> {
    engine: Engine,
    extra: H,
    settings: Arc<Settings>,
    detached: Arc<Detached>,
    listeners: Arc<Listeners>,
    /// The `logging/setLevel` level of the session this server serves.
    log_level: SessionLevel,
}

impl<H> std::fmt::Debug for TaskServer<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskServer")
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

impl<H> TaskServer<H> {
    pub(super) fn new_with(engine: Engine, extra: H, settings: Settings) -> Self {
        Self {
            engine,
            extra,
            settings: Arc::new(settings),
            detached: Arc::default(),
            listeners: Arc::default(),
            log_level: SessionLevel::default(),
        }
    }

    /// A server for one more session: everything shared, but the log level
    /// its own (`logging`).
    pub(super) fn for_session(&self) -> Self
    where
        H: Clone,
    {
        Self {
            log_level: SessionLevel::default(),
            ..self.clone()
        }
    }

    pub(super) fn listeners(&self) -> &Arc<Listeners> {
        &self.listeners
    }

    /// How many `subscriptions/listen` streams are open.
    pub fn open_listeners(&self) -> usize {
        self.listeners.count()
    }

    /// Ends every `subscriptions/listen` stream gracefully: each gets its
    /// final answer (`{"resultType":"complete"}` with its subscription id)
    /// and closes. Waits up to `within` for the answers to be written; new
    /// listen requests made after this end at once. Call it before the
    /// process exits (the examples' `serve` does, on SIGINT and SIGTERM).
    pub async fn close_listeners(&self, within: Duration) {
        self.listeners.close(within).await;
    }

    /// What the transports add to 2025-11-25 clients' answers.
    pub(super) fn legacy_edge(&self) -> Edge {
        Edge::new(self.engine.registry(), self.names_principals())
    }

    pub(super) fn detached(&self) -> &Arc<Detached> {
        &self.detached
    }

    /// The engine behind the server.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Whether requests are told apart by principal (a principal function,
    /// or authentication).
    fn names_principals(&self) -> bool {
        #[cfg(feature = "jwt")]
        if self.settings.auth.is_some() {
            return true;
        }
        self.settings.principal.is_some()
    }

    /// The principal function, for the HTTP edge to name the caller of a
    /// request before rmcp reads it.
    pub(super) fn principal_fn(&self) -> Option<super::builder::PrincipalFn> {
        self.settings.principal.clone()
    }

    /// The bearer-token authentication the HTTP transport applies.
    #[cfg(feature = "jwt")]
    pub(super) fn auth(&self) -> Option<&super::auth::JwtAuth> {
        self.settings.auth.as_ref()
    }

    /// Who makes the request: the principal function's answer, else the
    /// verified token's subject.
    pub(super) fn principal_of(&self, cx: &RequestContext<RoleServer>) -> Option<String> {
        if let Some(who) = &self.settings.principal {
            // Over stdio there is no HTTP request, so no principal.
            return cx
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|parts| who(parts));
        }
        #[cfg(feature = "jwt")]
        if self.settings.auth.is_some() {
            return cx
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<super::auth::VerifiedToken>())
                .map(|token| token.subject.clone());
        }
        None
    }

    fn window_for(&self, tool: &str) -> Duration {
        self.settings
            .tool_windows
            .get(tool)
            .copied()
            .unwrap_or(self.settings.inline_window)
    }

    /// A call of one of the engine's tools: the engine decides between a
    /// task and an inline run; inline questions become MRTR rounds whose
    /// journal travels in a sealed `requestState`.
    async fn call_task_tool(
        &self,
        params: CallToolRequestParams,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let caller = wire::caller(cx);
        let principal = self.principal_of(cx);
        let args = params.arguments.unwrap_or_default();
        let binding = inline::state_binding(principal.as_deref(), &params.name, &args);
        let mut call = Call::new(params.name.to_string(), args)
            .principal(principal)
            .client_addr(wire::client_addr(cx))
            .capabilities(caller.input)
            .mode(if caller.tasks {
                CallMode::Task
            } else {
                CallMode::Inline
            })
            .inline_window(self.window_for(&params.name));
        if params.request_state.is_some() || params.input_responses.is_some() {
            // Checked before the state is spent, so that a retry with
            // answers over the limit can be made again with smaller ones.
            if let Some(answers) = &params.input_responses {
                self.engine
                    .limits()
                    .check_answers(answers)
                    .map_err(|e| wire::error(&e))?;
            }
            // Answers count for the questions the last round asked, and
            // no others (core MRTR): a first call has been asked nothing.
            let (journal, asked) = match &params.request_state {
                Some(sealed) => self.spend_state(sealed, &binding).await?,
                None => (Vec::new(), Vec::new()),
            };
            let answers: Map<String, Value> = params
                .input_responses
                .unwrap_or_default()
                .into_iter()
                .filter(|(key, _)| asked.contains(key))
                .collect();
            call = call.resume(journal, answers);
        }
        let outcome = match self.engine.call(call).await {
            Ok(outcome) => outcome,
            Err(e) => return wire::refused_call(&e),
        };
        match outcome {
            CallOutcome::Task(record) => Ok(CallToolResponse::Task(CreateTaskResult::new(
                wire::task(&record),
            ))),
            CallOutcome::Finished(outcome) => wire::call_result(outcome),
            CallOutcome::InputRequired { requests, journal } => {
                let asked = requests.iter().map(|r| r.key.clone()).collect();
                let sealed = self
                    .settings
                    .sealer
                    .seal(journal, asked, &binding, now_ms())?;
                Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
                    Some(wire::input_requests(&requests)?),
                    Some(sealed),
                )))
            }
        }
    }
}

impl<H> TaskServer<H> {
    /// Opens a `requestState` and spends it: a state comes back once (its
    /// journal, and the keys its round asked). The
    /// spend is recorded in the engine's front door before anything runs, so
    /// a state sent twice — in parallel, or to two instances sharing it — resumes
    /// the call once, and the other copy is refused.
    async fn spend_state(
        &self,
        sealed: &str,
        binding: &[u8],
    ) -> Result<(Vec<crate::journal::JournalEntry>, Vec<String>), McpError> {
        let now = now_ms();
        let opened = self.settings.sealer.open(sealed, binding, now)?;
        let first = self
            .engine
            .front_door()
            .spend(&opened.id, opened.expires_at_ms, now)
            .await
            .map_err(|e| wire::error(&e))?;
        if !first {
            return Err(McpError::invalid_params(
                "requestState already used: each requestState is good for one retry; \
                 send the one from the latest answer, or start the call again",
                None,
            ));
        }
        Ok((opened.journal, opened.asked))
    }
}

/// Now, Unix milliseconds (`requestState` expiry is wall-clock time: it
/// must hold across the instances a client's rounds reach).
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

macro_rules! forward {
    ($($(#[$attr:meta])* $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        $(
            $(#[$attr])*
            fn $name(
                &self,
                $($arg: $ty,)*
                context: RequestContext<RoleServer>,
            ) -> impl Future<Output = Result<$ret, McpError>> + Send + '_ {
                self.extra.$name($($arg,)* self.with_session(context))
            }
        )*
    };
}

impl<H> TaskServer<H> {
    /// `cx` carrying the session's log level, for [`super::log`].
    fn with_session(&self, mut cx: RequestContext<RoleServer>) -> RequestContext<RoleServer> {
        cx.extensions.insert(self.log_level.clone());
        cx
    }
}

impl<H: ServerHandler> TaskServer<H> {
    /// The server's name and version as JSON (what `_meta` carries),
    /// made once.
    pub(super) fn server_info_json(&self) -> &Value {
        self.settings
            .server_info
            .get_or_init(|| serde_json::to_value(self.get_info().server_info).unwrap_or_default())
    }

    /// `meta` with the server's name and version added, made where the
    /// result is built, so that the HTTP edge need not parse the answer
    /// again to add them.
    fn server_info_meta(&self, meta: Option<MetaObject>) -> MetaObject {
        let mut meta = meta.unwrap_or_default();
        meta.0
            .entry(SERVER_INFO)
            .or_insert_with(|| self.server_info_json().clone());
        meta
    }
}

/// The requests this server answers itself. rmcp runs each request's
/// future in a task of its own, moving it as it goes: the trait's methods
/// box these (large) futures so that what moves is a pointer.
impl<H: ServerHandler> TaskServer<H> {
    async fn answer_call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if self.engine.registry().get(&request.name).is_some() {
            if legacy::is_legacy(&context) {
                let args = request.arguments.unwrap_or_default();
                return self.call_legacy(request.name.into(), args, &context).await;
            }
            let mut response = self.call_task_tool(request, &context).await;
            if let Ok(CallToolResponse::Task(created)) = &mut response {
                created.meta = Some(self.server_info_meta(created.meta.take()));
            }
            response
        } else if self.extra.get_info().capabilities.tools.is_some() {
            // The wrapped handler's tools (it answers unknown names itself).
            self.extra
                .call_tool(request, self.with_session(context))
                .await
        } else {
            Err(McpError::invalid_params(
                format!("unknown tool `{}`", request.name),
                None,
            ))
        }
    }

    async fn answer_get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        crate::metrics::poll();
        let record = self
            .engine
            .get(&request.task_id, self.principal_of(&context).as_deref())
            .await
            .map_err(|e| wire::error(&e))?;
        let legacy = legacy::is_legacy(&context);
        // A 2026-07-28 poll declares its capabilities (tasks ext. § Input
        // Requests); a session's were declared when it opened, and its
        // questions go out as requests in the session, not here.
        let shown = if legacy {
            InputCapabilities::ALL
        } else {
            wire::caller(&context).input
        };
        let mut result = GetTaskResult::new(wire::detailed(&record, shown)?);
        if !legacy {
            result.meta = Some(self.server_info_meta(None));
        }
        Ok(result)
    }

    async fn answer_update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let responses: Map<String, Value> = request.input_responses.into_iter().collect();
        self.engine
            .update(
                &request.task_id,
                responses,
                self.principal_of(&context).as_deref(),
            )
            .await
            .map_err(|e| wire::error(&e))
    }

    async fn answer_cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.engine
            .cancel(&request.task_id, self.principal_of(&context).as_deref())
            .await
            .map_err(|e| wire::error(&e))
    }

    async fn answer_on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        if request.method == listen::METHOD {
            return self.listen(&request, &context).await;
        }
        let (tasks, modern) = (wire::caller(&context).tasks, !legacy::is_legacy(&context));
        if let Some(refusal) = malformed::refusal(&request, tasks, modern) {
            return Err(refusal);
        }
        match self.on_task_request(&request, &context).await {
            Some(answer) => answer,
            None => {
                self.extra
                    .on_custom_request(request, self.with_session(context))
                    .await
            }
        }
    }
}

impl<H: ServerHandler> ServerHandler for TaskServer<H> {
    fn get_info(&self) -> ServerConfig {
        let mut info = self.extra.get_info();
        info.capabilities.tools.get_or_insert_with(Default::default);
        info.capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .insert(
                rmcp::model::TASKS_EXTENSION_ID.to_owned(),
                RmcpObject::new(),
            );
        if let Some(i) = &self.settings.info {
            info.server_info = i.clone();
        }
        if let Some(text) = &self.settings.instructions {
            info.instructions = Some(text.clone());
        }
        info
    }

    /// Every version rmcp knows: 2026-07-28 statelessly, and the earlier
    /// ones through `initialize` and sessions.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
    }

    /// [`get_info`](Self::get_info) for 2026-07-28 clients, less what only
    /// a session delivers: 2026-07-28 sends list changes and resource updates
    /// through `subscriptions/listen`, which this server serves for task ids
    /// only, so
    /// the wrapped handler's `listChanged` and `resources.subscribe` (served
    /// to older clients in their session) are left out here and kept in the
    /// `initialize` answer.
    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        let mut info = self.get_info();
        let capabilities = &mut info.capabilities;
        if let Some(tools) = capabilities.tools.as_mut() {
            tools.list_changed = None;
        }
        if let Some(prompts) = capabilities.prompts.as_mut() {
            prompts.list_changed = None;
        }
        if let Some(resources) = capabilities.resources.as_mut() {
            resources.list_changed = None;
            resources.subscribe = None;
        }
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            info,
        ))
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        if request.as_ref().is_some_and(|r| r.cursor.is_some()) {
            return Err(McpError::invalid_params(
                "invalid cursor: tools/list has one page",
                None,
            ));
        }
        // The wrapped handler's tools first, then the task tools (sorted).
        let mut tools: Vec<Tool> = if self.extra.get_info().capabilities.tools.is_some() {
            self.extra.list_tools(request, context).await?.tools
        } else {
            Vec::new()
        };
        tools.extend(self.settings.tools.clone()?);
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        let ours = self.settings.tools.as_ref().ok().into_iter().flatten();
        match ours.into_iter().find(|t| t.name == name) {
            Some(t) => Some(t.clone()),
            None => self.extra.get_tool(name),
        }
    }

    fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CallToolResponse, McpError>> + Send + '_ {
        Box::pin(self.answer_call_tool(request, context))
    }

    fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<GetTaskResult, McpError>> + Send + '_ {
        Box::pin(self.answer_get_task(request, context))
    }

    fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), McpError>> + Send + '_ {
        Box::pin(self.answer_update_task(request, context))
    }

    fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), McpError>> + Send + '_ {
        Box::pin(self.answer_cancel_task(request, context))
    }

    fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CustomResult, McpError>> + Send + '_ {
        Box::pin(self.answer_on_custom_request(request, context))
    }

    forward! {
        complete(request: CompleteRequestParams) -> CompleteResult;
        get_prompt(request: GetPromptRequestParams) -> GetPromptResponse;
        list_prompts(request: Option<PaginatedRequestParams>) -> ListPromptsResult;
        list_resources(request: Option<PaginatedRequestParams>) -> ListResourcesResult;
        list_resource_templates(request: Option<PaginatedRequestParams>) -> ListResourceTemplatesResult;
        read_resource(request: ReadResourceRequestParams) -> ReadResourceResponse;
    }

    // Legacy-only methods (rmcp deprecates them: 2026-07-28 asks for a log
    // level per request and listens for changes with `subscriptions/listen`).
    // The wrapped handler answers them for older sessions.
    /// `logging/setLevel` is gone from 2026-07-28 (core Changelog), whose
    /// requests carry their log level: such a request gets `-32601`. A
    /// session's goes to the wrapped handler, and once it accepts the level,
    /// the level is the session's (see [`super::log`]).
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if !legacy::is_legacy(&context) {
            return Err(McpError::method_not_found::<
                rmcp::model::SetLevelRequestMethod,
            >());
        }
        let level = request.level;
        self.extra.set_level(request, context).await?;
        self.log_level.set(level);
        Ok(())
    }

    forward! {
        #[allow(deprecated)]
        subscribe(request: SubscribeRequestParams) -> ();
        #[allow(deprecated)]
        unsubscribe(request: UnsubscribeRequestParams) -> ();
    }
}
