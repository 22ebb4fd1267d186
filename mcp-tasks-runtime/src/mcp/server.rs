//! [`TaskServer`]: rmcp's `ServerHandler` over the [`Engine`].

use std::{borrow::Cow, collections::HashMap, sync::Arc, time::Duration};

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
        CompleteResult, CreateTaskResult, GetPromptRequestParams, GetPromptResponse, GetTaskParams,
        GetTaskResult, Implementation, InputRequiredResult, JsonObject as RmcpObject,
        ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
        PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
        RequestStateCodec, SealOptions, ServerConfig, Tool, UpdateTaskParams,
    },
    service::RequestContext,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::wire;
use crate::{
    engine::{Engine, InlineOutcome, NewTask},
    error::Error,
    input::InputCapabilities,
    journal::JournalEntry,
    tool::{JsonObject, TaskPolicy},
};

/// A handler with nothing of its own: the default for [`TaskServer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct NoExtras;

impl ServerHandler for NoExtras {}

/// Serves the engine's task tools over MCP, next to whatever `H` (an rmcp
/// `ServerHandler` with its own tools, prompts and resources) serves.
///
/// ```
/// use mcp_tasks_runtime::{Engine, Registry, mcp::TaskServer, store::MemoryStore};
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
}

impl<H> std::fmt::Debug for TaskServer<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskServer")
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

struct Settings {
    info: Option<Implementation>,
    instructions: Option<String>,
    inline_window: Duration,
    tool_windows: HashMap<String, Duration>,
    codec: RequestStateCodec,
    state_ttl: Duration,
    principal: Option<PrincipalFn>,
}

/// Names the caller of a request (see [`TaskServerBuilder::principal`]).
type PrincipalFn = Arc<dyn Fn(&RequestContext<RoleServer>) -> Option<String> + Send + Sync>;

/// Builds a [`TaskServer`].
#[must_use]
pub struct TaskServerBuilder<H = NoExtras> {
    engine: Engine,
    extra: H,
    info: Option<Implementation>,
    instructions: Option<String>,
    inline_window: Duration,
    tool_windows: HashMap<String, Duration>,
    state_key: Option<Vec<u8>>,
    principal: Option<PrincipalFn>,
}

impl<H> std::fmt::Debug for TaskServerBuilder<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskServerBuilder").finish_non_exhaustive()
    }
}

impl TaskServer {
    /// A server for `engine`'s tools and nothing else.
    pub fn builder(engine: Engine) -> TaskServerBuilder {
        TaskServerBuilder {
            engine,
            extra: NoExtras,
            info: None,
            instructions: None,
            inline_window: Duration::ZERO,
            tool_windows: HashMap::new(),
            state_key: None,
            principal: None,
        }
    }

    /// A server with default settings.
    pub fn new(engine: Engine) -> Self {
        Self::builder(engine).build()
    }
}

impl<H> TaskServerBuilder<H> {
    /// Also serves `handler`'s tools, prompts, resources and completions.
    pub fn extras<H2: ServerHandler>(self, handler: H2) -> TaskServerBuilder<H2> {
        TaskServerBuilder {
            engine: self.engine,
            extra: handler,
            info: self.info,
            instructions: self.instructions,
            inline_window: self.inline_window,
            tool_windows: self.tool_windows,
            state_key: self.state_key,
            principal: self.principal,
        }
    }

    /// The `serverInfo` name and version.
    pub fn name(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.info = Some(Implementation::new(name, version));
        self
    }

    /// The `instructions` in `server/discover`.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self
    }

    /// Runs a task-capable call inline for up to `window` before answering
    /// (default zero: answer with the task at once). A call that finishes in
    /// the window gets its plain result; a question asked in the window is
    /// answered in MRTR style (`InputRequiredResult`); otherwise the client
    /// gets the `CreateTaskResult` of the same execution — nothing runs twice.
    pub fn inline_window(mut self, window: Duration) -> Self {
        self.inline_window = window;
        self
    }

    /// The inline window for one tool, overriding [`Self::inline_window`].
    pub fn tool_inline_window(mut self, tool: impl Into<String>, window: Duration) -> Self {
        self.tool_windows.insert(tool.into(), window);
        self
    }

    /// The key that signs MRTR `requestState` (at least 32 bytes). Servers
    /// that share clients (several instances, or restarts in the middle of a
    /// question) must share it; by default each process draws a random one.
    ///
    /// # Panics
    ///
    /// When `key` is shorter than 32 bytes.
    pub fn request_state_key(mut self, key: impl Into<Vec<u8>>) -> Self {
        let key = key.into();
        assert!(
            key.len() >= 32,
            "the requestState key must be at least 32 bytes"
        );
        self.state_key = Some(key);
        self
    }

    /// Binds each task to the principal `who` names for the request that
    /// created it (say, the subject of a verified bearer token, or the peer
    /// identity your HTTP layer put in the request's extensions). A task is
    /// then invisible — "not found" — to any other principal. Without this,
    /// the task id is the only secret.
    ///
    /// ```
    /// # use mcp_tasks_runtime::{Engine, Registry, mcp::TaskServer, store::MemoryStore};
    /// # async fn run() -> mcp_tasks_runtime::Result<()> {
    /// # let engine = Engine::builder(MemoryStore::new()).registry(Registry::new()).start().await?;
    /// let server = TaskServer::builder(engine)
    ///     .principal(|cx| {
    ///         let parts = cx.extensions.get::<axum::http::request::Parts>()?;
    ///         let user = parts.headers.get("x-authenticated-user")?;
    ///         user.to_str().ok().map(str::to_owned)
    ///     })
    ///     .build();
    /// # let _ = server;
    /// # Ok(())
    /// # }
    /// ```
    pub fn principal(
        mut self,
        who: impl Fn(&RequestContext<RoleServer>) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.principal = Some(Arc::new(who));
        self
    }

    /// Builds the server.
    pub fn build(self) -> TaskServer<H> {
        let key = self.state_key.unwrap_or_else(|| {
            let mut k = vec![0u8; 32];
            getrandom::fill(&mut k).expect("the operating system's random number generator failed");
            k
        });
        TaskServer {
            engine: self.engine,
            extra: self.extra,
            settings: Arc::new(Settings {
                info: self.info,
                instructions: self.instructions,
                inline_window: self.inline_window,
                tool_windows: self.tool_windows,
                codec: RequestStateCodec::try_new(key).expect("the key is 32 bytes or longer"),
                state_ttl: Duration::from_secs(3600),
                principal: self.principal,
            }),
        }
    }
}

impl<H> TaskServer<H> {
    /// The engine behind the server.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    fn principal_of(&self, cx: &RequestContext<RoleServer>) -> Option<String> {
        self.settings.principal.as_ref().and_then(|f| f(cx))
    }

    fn window_for(&self, tool: &str) -> Duration {
        self.settings
            .tool_windows
            .get(tool)
            .copied()
            .unwrap_or(self.settings.inline_window)
    }
}

/// What an MRTR `requestState` carries between rounds of an inline call.
#[derive(Serialize, Deserialize)]
struct InlineState {
    journal: Vec<JournalEntry>,
}

/// Binds a `requestState` to the caller, the tool and its arguments.
fn state_binding(principal: Option<&str>, tool: &str, args: &JsonObject) -> Vec<u8> {
    let mut ad = principal.unwrap_or_default().as_bytes().to_vec();
    ad.push(0);
    ad.extend(tool.as_bytes());
    ad.push(0);
    canonical(&Value::Object(args.clone()), &mut ad);
    ad
}

/// Writes `v` as JSON with object keys sorted at every level, so that the
/// binding does not depend on the order a client sends keys in (serde_json
/// keeps insertion order when a crate in the build enables `preserve_order`).
fn canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push(b'{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical(&Value::String(k.clone()), out);
                out.push(b':');
                canonical(&map[k], out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical(item, out);
            }
            out.push(b']');
        }
        scalar => out.extend(serde_json::to_vec(scalar).unwrap_or_default()),
    }
}

impl<H: ServerHandler> TaskServer<H> {
    async fn call_task_tool(
        &self,
        params: CallToolRequestParams,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tool = params.name.to_string();
        let args = params.arguments.clone().unwrap_or_default();
        let policy = self
            .engine
            .check(&tool, &args)
            .map_err(|e| wire::error(&e))?;
        let wire::Caller {
            tasks: declared,
            input: caps,
        } = wire::caller(cx);
        let as_task = declared && policy != TaskPolicy::Forbidden;
        if !declared && policy == TaskPolicy::Required {
            return Err(wire::error(&Error::TaskRequired(tool)));
        }
        let window = self.window_for(&tool);
        let principal = self.principal_of(cx);
        let mrtr_round = params.request_state.is_some() || params.input_responses.is_some();
        let new_task = |args: JsonObject, caps: InputCapabilities| NewTask {
            tool: tool.clone(),
            arguments: args,
            client_capabilities: caps,
            principal: principal.clone(),
        };
        if as_task && window.is_zero() && !mrtr_round {
            let record = self
                .engine
                .create(new_task(args, caps))
                .await
                .map_err(|e| wire::error(&e))?;
            return Ok(CallToolResponse::Task(CreateTaskResult::new(wire::task(
                &record,
            ))));
        }

        // Inline: the fn runs here; questions become MRTR rounds whose journal
        // travels in a signed `requestState`. A task-capable call runs for at
        // most its window, then carries on as a task from its journal.
        let binding = state_binding(principal.as_deref(), &tool, &args);
        let journal = match &params.request_state {
            Some(sealed) => {
                let state: InlineState = self
                    .settings
                    .codec
                    .open_json_with(sealed, &binding)
                    .map_err(|e| {
                        McpError::invalid_params(
                            format!("invalid requestState (it must come back exactly as the server sent it): {e}"),
                            None,
                        )
                    })?;
                state.journal
            }
            None => Vec::new(),
        };
        let responses: Map<String, Value> = params
            .input_responses
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let outcome = self
            .engine
            .run_inline_for(
                &tool,
                args.clone(),
                &caps,
                journal,
                responses,
                as_task.then_some(window),
            )
            .await
            .map_err(|e| wire::error(&e))?;
        match outcome {
            InlineOutcome::Done(result) if as_task && policy == TaskPolicy::Required => {
                // A required tool always answers with a task: here one that
                // is already finished.
                let record = self
                    .engine
                    .create_finished(new_task(args, caps), result)
                    .await
                    .map_err(|e| wire::error(&e))?;
                Ok(CallToolResponse::Task(CreateTaskResult::new(wire::task(
                    &record,
                ))))
            }
            InlineOutcome::Done(result) => wire::call_result(result),
            InlineOutcome::HandedOff { journal } => {
                let record = self
                    .engine
                    .create_from_journal(new_task(args, caps), journal)
                    .await
                    .map_err(|e| wire::error(&e))?;
                Ok(CallToolResponse::Task(CreateTaskResult::new(wire::task(
                    &record,
                ))))
            }
            InlineOutcome::InputRequired { requests, journal } => {
                let sealed = self
                    .settings
                    .codec
                    .seal_json_with(
                        &InlineState { journal },
                        &SealOptions::new()
                            .associated_data(&binding)
                            .ttl(self.settings.state_ttl),
                    )
                    .map_err(|e| McpError::internal_error(e.to_string(), None))?;
                Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
                    Some(wire::input_requests(&requests)?),
                    Some(sealed),
                )))
            }
        }
    }
}

macro_rules! forward {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        $(
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

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Owned(vec![ProtocolVersion::V_2026_07_28])
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
        for t in self.engine.registry().iter() {
            tools.push(
                serde_json::from_value(Value::Object(t.definition().clone())).map_err(|e| {
                    McpError::internal_error(
                        format!(
                            "tool `{}` has an invalid definition: {e}",
                            t.descriptor().name()
                        ),
                        None,
                    )
                })?,
            );
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        match self.engine.registry().get(name) {
            Some(t) => serde_json::from_value(Value::Object(t.definition().clone())).ok(),
            None => self.extra.get_tool(name),
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if self.engine.registry().get(&request.name).is_some() {
            self.call_task_tool(request, &context).await
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

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let record = self
            .engine
            .get(&request.task_id, self.principal_of(&context).as_deref())
            .await
            .map_err(|e| wire::error(&e))?;
        Ok(GetTaskResult::new(wire::detailed(&record)?))
    }

    async fn update_task(
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

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.engine
            .cancel(&request.task_id, self.principal_of(&context).as_deref())
            .await
            .map_err(|e| wire::error(&e))
    }

    forward! {
        complete(request: CompleteRequestParams) -> CompleteResult;
        get_prompt(request: GetPromptRequestParams) -> GetPromptResponse;
        list_prompts(request: Option<PaginatedRequestParams>) -> ListPromptsResult;
        list_resources(request: Option<PaginatedRequestParams>) -> ListResourcesResult;
        list_resource_templates(request: Option<PaginatedRequestParams>) -> ListResourceTemplatesResult;
        read_resource(request: ReadResourceRequestParams) -> ReadResourceResponse;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::state_binding;

    #[test]
    fn binding_ignores_key_order_but_not_values_tools_or_principals() {
        let a = json!({"b": 1, "a": {"y": [1, {"q": 2, "p": 3}], "x": "s"}});
        let b = json!({"a": {"x": "s", "y": [1, {"p": 3, "q": 2}]}, "b": 1});
        let (a, b) = (a.as_object().unwrap(), b.as_object().unwrap());
        assert_eq!(state_binding(None, "t", a), state_binding(None, "t", b));
        assert_ne!(state_binding(None, "t", a), state_binding(None, "u", a));
        assert_ne!(
            state_binding(Some("alice"), "t", a),
            state_binding(Some("bob"), "t", a)
        );
        let c = json!({"b": 2, "a": {"x": "s", "y": [1, {"p": 3, "q": 2}]}});
        assert_ne!(
            state_binding(None, "t", a),
            state_binding(None, "t", c.as_object().unwrap())
        );
    }
}
