//! [`TaskServer`]: rmcp's `ServerHandler` over the [`Engine`].

use std::{borrow::Cow, collections::HashMap, sync::Arc, time::Duration};

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
        CompleteResult, CustomRequest, CustomResult, DiscoverResult, GetPromptRequestParams,
        GetPromptResponse, GetTaskParams, GetTaskResult, Implementation, JsonObject as RmcpObject,
        ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
        MetaObject, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
        ReadResourceResponse, ServerConfig, SubscribeRequestParams, Tool, UnsubscribeRequestParams,
        UpdateTaskParams,
    },
    service::RequestContext,
};
use serde_json::{Map, Value};

use super::{
    envelope::SERVER_INFO,
    listen::{self, Listen, Listeners},
    malformed,
    options::{HttpOptions, StdioOptions},
    peer::PrincipalFn,
    tool_call::{Current, ToolCall},
    wire,
};
use crate::{
    engine::Engine,
    input::InputCapabilities,
    request_state::{RequestStateKey, Sealer},
    tool::Registry,
};

/// What a built server knows besides its engine and its wrapped handler
/// (see [`TaskServerBuilder`](super::TaskServerBuilder)).
pub(super) struct Settings {
    pub(super) info: Option<Implementation>,
    pub(super) instructions: Option<String>,
    pub(super) inline_window: Duration,
    pub(super) tool_windows: HashMap<String, Duration>,
    pub(super) sealer: Sealer,
    pub(super) principal: Option<PrincipalFn>,
    pub(super) http: HttpOptions,
    pub(super) stdio: StdioOptions,
    pub(super) drain_timeout: Duration,
    /// Bearer-token authentication over HTTP.
    #[cfg(feature = "jwt")]
    pub(super) auth: Option<crate::auth::JwtAuth>,
    /// The task tools as `tools/list` shows them, converted once per set.
    tools: Listing,
    /// The server's name and version as JSON, for the `_meta` of results
    /// (made once, on first use).
    pub(super) server_info: std::sync::OnceLock<Value>,
}

impl Settings {
    /// Who makes an HTTP request with this head (none without one): the
    /// principal function's answer, else the verified token's subject.
    pub(super) fn principal(&self, head: Option<&axum::http::request::Parts>) -> Option<String> {
        if let Some(who) = &self.principal {
            return head.and_then(|parts| who(parts));
        }
        #[cfg(feature = "jwt")]
        if self.auth.is_some() {
            return head
                .and_then(|parts| parts.extensions.get::<crate::auth::VerifiedToken>())
                .map(|token| token.subject.clone());
        }
        None
    }
}

/// How long a `requestState` is accepted after it was sealed.
const STATE_TTL: Duration = Duration::from_secs(3600);

/// A set of task tools as `tools/list` shows them.
#[derive(Debug)]
struct Listed {
    /// The set.
    registry: Arc<Registry>,
    /// Its tools, as rmcp's types.
    tools: Result<Vec<Tool>, McpError>,
}

impl Listed {
    fn of(registry: Arc<Registry>) -> Self {
        let tools = registry
            .iter()
            .map(|t| {
                serde_json::from_value(Value::Object(t.definition().clone())).map_err(|e| {
                    let name = t.descriptor().name();
                    McpError::internal_error(
                        format!("tool `{name}` has an invalid definition: {e}"),
                        None,
                    )
                })
            })
            .collect();
        Self { registry, tools }
    }
}

/// The listing of the engine's latest set of tools, converted when the set
/// is first seen (see [`Engine::set_registry`]).
struct Listing(std::sync::RwLock<Arc<Listed>>);

impl Listing {
    /// The listing of `current`, the engine's set now.
    fn of(&self, current: Arc<Registry>) -> Arc<Listed> {
        let lock = &self.0;
        let last = lock
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if Arc::ptr_eq(&last.registry, &current) {
            return last;
        }
        let listed = Arc::new(Listed::of(current));
        *lock
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = listed.clone();
        listed
    }
}

impl Settings {
    /// The defaults, for a server of `registry`'s tools (their definitions
    /// converted once, here), with a `requestState` key drawn at random.
    pub(super) fn new(registry: Arc<Registry>) -> Self {
        let tools = Listing(std::sync::RwLock::new(Arc::new(Listed::of(registry))));
        Self {
            info: None,
            instructions: None,
            inline_window: Duration::ZERO,
            tool_windows: HashMap::new(),
            sealer: Sealer::new(&RequestStateKey::random(), STATE_TTL),
            principal: None,
            http: HttpOptions::default(),
            stdio: StdioOptions::default(),
            drain_timeout: Duration::from_secs(30),
            #[cfg(feature = "jwt")]
            auth: None,
            tools,
            server_info: std::sync::OnceLock::new(),
        }
    }
}

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
    listeners: Arc<Listeners>,
}

debug_fields!(TaskServer<H> |server| engine: server.engine);

impl<H> TaskServer<H> {
    pub(super) fn new_with(engine: Engine, extra: H, settings: Settings) -> Self {
        Self {
            engine,
            extra,
            settings: Arc::new(settings),
            listeners: Arc::default(),
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

    pub(super) fn http_options(&self) -> &HttpOptions {
        &self.settings.http
    }

    pub(super) fn stdio_options(&self) -> &StdioOptions {
        &self.settings.stdio
    }

    pub(super) fn drain_timeout(&self) -> Duration {
        self.settings.drain_timeout
    }

    /// The engine behind the server.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Whether requests are told apart by principal (a principal function,
    /// or authentication).
    #[cfg(feature = "mcp-2025-11-25")]
    pub(crate) fn names_principals(&self) -> bool {
        #[cfg(feature = "jwt")]
        if self.settings.auth.is_some() {
            return true;
        }
        self.settings.principal.is_some()
    }

    /// The principal function, for the HTTP edge to name the caller of a
    /// request before rmcp reads it.
    pub(super) fn principal_fn(&self) -> Option<PrincipalFn> {
        self.settings.principal.clone()
    }

    /// The bearer-token authentication the HTTP transport applies.
    #[cfg(feature = "jwt")]
    pub(super) fn auth(&self) -> Option<&crate::auth::JwtAuth> {
        self.settings.auth.as_ref()
    }

    /// Who makes the request: the principal function's answer, else the
    /// verified token's subject.
    pub(crate) fn principal_of(&self, cx: &RequestContext<RoleServer>) -> Option<String> {
        // Over stdio there is no HTTP request, so no principal.
        self.settings
            .principal(cx.extensions.get::<axum::http::request::Parts>())
    }

    /// What the server knows besides its engine, shared.
    pub(super) fn settings(&self) -> &Arc<Settings> {
        &self.settings
    }

    fn window_for(&self, tool: &str) -> Duration {
        self.settings
            .tool_windows
            .get(tool)
            .copied()
            .unwrap_or(self.settings.inline_window)
    }

    /// The handler this server wraps.
    #[cfg(feature = "mcp-2025-11-25")]
    pub(crate) fn extra(&self) -> &H {
        &self.extra
    }

    /// Whether `name` is one of the engine's task tools.
    pub(crate) fn is_task_tool(&self, name: &str) -> bool {
        self.engine.registry().get(name).is_some()
    }

    /// The engine's task tools now, as `tools/list` shows them.
    fn listed(&self) -> Arc<Listed> {
        self.settings.tools.of(self.engine.registry())
    }
}

/// `ServerHandler` methods that pass a request on to the wrapped handler.
macro_rules! forward {
    ($($(#[$attr:meta])* $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        $(
            $(#[$attr])*
            fn $name(
                &self,
                $($arg: $ty,)*
                context: RequestContext<RoleServer>,
            ) -> impl Future<Output = Result<$ret, McpError>> + Send + '_ {
                self.extra.$name($($arg,)* context)
            }
        )*
    };
}

/// `ServerHandler` methods answered by `answer` methods, whose futures are
/// boxed: rmcp runs each request's future in a task of its own, moving it
/// as it goes, and what moves is then a pointer.
macro_rules! boxed {
    ($($name:ident($request:ty) -> $ret:ty = $answer:ident;)*) => {
        $(
            fn $name(
                &self,
                request: $request,
                context: RequestContext<RoleServer>,
            ) -> impl Future<Output = Result<$ret, McpError>> + Send + '_ {
                Box::pin(self.$answer(request, context))
            }
        )*
    };
}

#[cfg(feature = "mcp-2025-11-25")]
pub(crate) use boxed;

impl<H> TaskServer<H> {
    /// The call of a task tool that `request` makes.
    pub(crate) fn tool_call(
        &self,
        request: &CallToolRequestParams,
        cx: &RequestContext<RoleServer>,
    ) -> Result<ToolCall, McpError> {
        let args = request.arguments.clone().unwrap_or_default();
        ToolCall::new(request.name.to_string(), args, self.principal_of(cx), cx)
    }

    /// The task `tasks/get` asks for, as a request that declared `shown`
    /// sees it.
    pub(crate) async fn detailed_task(
        &self,
        request: &GetTaskParams,
        cx: &RequestContext<RoleServer>,
        shown: InputCapabilities,
    ) -> Result<GetTaskResult, McpError> {
        crate::metrics::poll();
        let record = self
            .engine
            .get(&request.task_id, self.principal_of(cx).as_deref())
            .await?;
        Ok(GetTaskResult::new(wire::detailed(record, shown)?))
    }
}

impl<H: ServerHandler> TaskServer<H> {
    /// The server's name and version as JSON (what `_meta` carries),
    /// made once.
    pub(crate) fn server_info_json(&self) -> &Value {
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
        if self.is_task_tool(&request.name) {
            let call = self.tool_call(&request, &context)?;
            let current = Current {
                engine: &self.engine,
                sealer: &self.settings.sealer,
                window: self.window_for(&request.name),
            };
            let tasks = wire::caller(&context).tasks;
            let mut response = current.serve(call, request, tasks).await;
            if let Ok(CallToolResponse::Task(created)) = &mut response {
                created.meta = Some(self.server_info_meta(created.meta.take()));
            }
            response
        } else if self.extra.get_info().capabilities.tools.is_some() {
            // The wrapped handler's tools (it answers unknown names itself).
            self.extra.call_tool(request, context).await
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
        // A 2026-07-28 poll declares its capabilities (tasks ext. § Input
        // Requests).
        let shown = wire::caller(&context).input;
        let mut result = self.detailed_task(&request, &context, shown).await?;
        result.meta = Some(self.server_info_meta(None));
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
            .map_err(McpError::from)
    }

    async fn answer_cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.engine
            .cancel(&request.task_id, self.principal_of(&context).as_deref())
            .await
            .map_err(McpError::from)
    }

    async fn answer_on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        if request.method == listen::METHOD {
            let listen = Listen {
                engine: &self.engine,
                listeners: &self.listeners,
                server_info: self.get_info().server_info,
            };
            return listen
                .serve(&request, &context, self.principal_of(&context))
                .await;
        }
        let tasks = wire::caller(&context).tasks;
        if let Some(refusal) = malformed::refusal(&request, tasks, true) {
            return Err(refusal);
        }
        self.extra.on_custom_request(request, context).await
    }
}

impl<H: ServerHandler> ServerHandler for TaskServer<H> {
    /// The wrapped handler's, with `tools.listChanged` (the engine's tools
    /// may be replaced: [`Engine::set_registry`]) and the tasks extension.
    fn get_info(&self) -> ServerConfig {
        let mut info = self.extra.get_info();
        let tools = info.capabilities.tools.get_or_insert_with(Default::default);
        tools.list_changed = Some(true);
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

    /// The versions without `initialize` (2026-07-28); the older era's
    /// layer adds the earlier ones.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        let current = ProtocolVersion::KNOWN_VERSIONS.iter();
        Cow::Owned(current.filter(|v| !v.has_initialize()).cloned().collect())
    }

    /// [`get_info`](Self::get_info) for 2026-07-28 clients, less what only
    /// a session delivers: 2026-07-28 sends list changes and resource updates
    /// through `subscriptions/listen`, which this server serves for task ids
    /// and the engine's tool list only, so the wrapped handler's prompt and
    /// resource `listChanged` and `resources.subscribe` (served to older
    /// clients in their session) are left out here and kept in the
    /// `initialize` answer. `tools.listChanged` stays: a listen with
    /// `toolsListChanged` hears of the engine's tools (not of the wrapped
    /// handler's, which it has no way to announce here).
    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        let mut info = self.get_info();
        let capabilities = &mut info.capabilities;
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
        tools.extend(self.listed().tools.clone()?);
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        let listed = self.listed();
        let ours = listed.tools.as_ref().ok().into_iter().flatten();
        match ours.into_iter().find(|t| t.name == name) {
            Some(t) => Some(t.clone()),
            None => self.extra.get_tool(name),
        }
    }

    boxed! {
        call_tool(CallToolRequestParams) -> CallToolResponse = answer_call_tool;
        get_task(GetTaskParams) -> GetTaskResult = answer_get_task;
        update_task(UpdateTaskParams) -> () = answer_update_task;
        cancel_task(CancelTaskParams) -> () = answer_cancel_task;
        on_custom_request(CustomRequest) -> CustomResult = answer_on_custom_request;
    }

    forward! {
        complete(request: CompleteRequestParams) -> CompleteResult;
        get_prompt(request: GetPromptRequestParams) -> GetPromptResponse;
        list_prompts(request: Option<PaginatedRequestParams>) -> ListPromptsResult;
        list_resources(request: Option<PaginatedRequestParams>) -> ListResourcesResult;
        list_resource_templates(request: Option<PaginatedRequestParams>) -> ListResourceTemplatesResult;
        read_resource(request: ReadResourceRequestParams) -> ReadResourceResponse;
    }

    /// `logging/setLevel` is gone from 2026-07-28 (core Changelog), whose
    /// requests carry their log level: `-32601`. (A 2025-11-25 session's
    /// is served by the older era's layer.)
    #[allow(deprecated)]
    async fn set_level(
        &self,
        _request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Err(McpError::method_not_found::<
            rmcp::model::SetLevelRequestMethod,
        >())
    }

    // rmcp answers these only in 2025-11-25 sessions.
    forward! {
        #[allow(deprecated)]
        subscribe(request: SubscribeRequestParams) -> ();
        #[allow(deprecated)]
        unsubscribe(request: UnsubscribeRequestParams) -> ();
    }
}
