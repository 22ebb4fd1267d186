//! Clients of MCP 2025-11-25 and earlier: the same task tools, the
//! mechanics of that era.
//!
//! Such a client opens a session with `initialize` and calls a tool with a
//! plain `tools/call` that waits for the result. For an `optional` tool the
//! call still creates a durable task; the call's handler then *relays* it:
//!
//! - a question the task parks on becomes a real request to the client in
//!   the session (`elicitation/create`, `sampling/createMessage`,
//!   `roots/list`), and the answer goes back into the task's journal. A
//!   question with a deadline is timed out by the task's own timer; once it
//!   passes, the request is cancelled in the session
//!   (`notifications/cancelled`), and what the client makes of a question
//!   no longer outstanding (timed out, or answered through `tasks/update`
//!   meanwhile) is ignored;
//! - a status message becomes `notifications/progress` when the call carries
//!   a progress token;
//! - `notifications/cancelled` for the call cancels the task.
//!
//! A session hears `notifications/tools/list_changed` when the engine's tools
//! change (`tool_list`).
//!
//! If the connection drops mid-run, the task is not lost: it carries on (or
//! stays parked on its question) under the engine. A repeat of the same call
//! (same tool and arguments) while its task is unfinished joins that task
//! instead of starting the work again, and gets its result; a call made
//! after the task finished starts anew. A repeat joins only within the
//! call's own scope: its principal when the server names one (a bearer
//! token's subject, or [`principal`](crate::mcp::TaskServerBuilder::principal)),
//! and otherwise its session (over stdio, the one client of the process).
//! Another client never joins the task, so it never sees its questions,
//! answers them or cancels it: the same call from another session without
//! a principal starts a task of its own. (Within one scope, two identical
//! plain calls at once share one run: the client cannot be told apart from
//! one that lost its connection and retried.) The call is forgotten when its
//! relay ends, unless the relay ended because the session went away while
//! the task runs on and the scope outlives the session (a principal): then
//! it is forgotten when the task ends. A `forbidden` tool runs inline, its
//! questions asked the same way round by round (one with a deadline is
//! waited on until then, and the next round finds it timed out); a
//! `required` tool is refused with `-32601`, as that revision says, naming
//! the task augmentation it needs.
//!
//! Over Streamable HTTP the sessions are rmcp's, bounded and kept in the
//! engine's front door (`sessions`, `gate`, `admission`); that revision's
//! experimental tasks (SEP-1686) are served on the same durable tasks
//! (`sep1686`).
//!
//! # One layer in front
//!
//! [`TaskServer`] speaks 2026-07-28 only. [`WithOlder`] is the handler the
//! transports give rmcp: it asks once per request which era its client is
//! of, and steers it, to the older era's handling here or on to the
//! `TaskServer`. Built without the `mcp-2025-11-25` feature, the transports
//! give rmcp the `TaskServer` itself, and none of this is compiled.

mod admission;
mod detached;
mod gate;
mod relay;
mod sep1686;
pub(crate) mod sessions;
mod tool_list;

use std::{borrow::Cow, sync::Arc};

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
        CompleteResult, CustomRequest, CustomResult, DiscoverResult, ErrorCode,
        GetPromptRequestParams, GetPromptResponse, GetTaskParams, GetTaskResult, ListPromptsResult,
        ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
        ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerConfig,
        SubscribeRequestParams, Tool, UnsubscribeRequestParams, UpdateTaskParams,
    },
    service::{NotificationContext, RequestContext},
};

pub(crate) use self::sep1686::Edge;
pub(crate) use self::{admission::HttpSessions, sep1686::rewrite_request};
use self::{detached::Detached, relay::Relay, sep1686::Tasks, tool_list::ToolListSessions};
use crate::{
    input::InputCapabilities,
    mcp::{
        listen,
        logging::SessionLevel,
        malformed,
        server::{TaskServer, boxed},
        wire,
    },
};

/// Whether the request comes from a client of an era with `initialize`
/// (2025-11-25 and earlier). Decided by the version, never by the declared
/// capabilities: some of those clients declare the 2026 tasks extension too.
fn is_older(cx: &RequestContext<RoleServer>) -> bool {
    cx.protocol_version().is_none_or(|v| v.has_initialize())
}

/// A [`TaskServer`] that also serves clients of 2025-11-25 and earlier:
/// each request is steered once ([`WithOlder::steer`]).
#[derive(Debug, Clone)]
pub(crate) struct WithOlder<H> {
    server: TaskServer<H>,
    /// The plain calls whose tasks a repeat joins (shared by the sessions).
    detached: Arc<Detached>,
    /// What the transports add to this era's answers.
    edge: Edge,
    /// The `logging/setLevel` level of the session this handler serves.
    level: SessionLevel,
    /// The sessions to tell when the engine's tools change (shared).
    tool_list: Arc<ToolListSessions>,
}

/// Where a request goes.
enum Era {
    /// On to the [`TaskServer`].
    Current(RequestContext<RoleServer>),
    /// Served here: the request, carrying its session's log level.
    Older(RequestContext<RoleServer>),
}

impl<H> WithOlder<H> {
    pub(crate) fn new(server: TaskServer<H>) -> Self {
        let edge = Edge::new(server.engine(), server.names_principals());
        Self {
            server,
            detached: Arc::default(),
            edge,
            level: SessionLevel::default(),
            tool_list: Arc::default(),
        }
    }

    /// A handler for one more session: everything shared, but the log
    /// level its own.
    pub(crate) fn for_session(&self) -> Self
    where
        H: Clone,
    {
        Self {
            level: SessionLevel::default(),
            ..self.clone()
        }
    }

    /// What the transports add to this era's answers.
    pub(crate) fn edge(&self) -> &Edge {
        &self.edge
    }

    /// The one place a request's era is asked.
    fn steer(&self, mut cx: RequestContext<RoleServer>) -> Era {
        if is_older(&cx) {
            // For `mcp::log` and the wrapped handler: the session's level.
            cx.extensions.insert(self.level.clone());
            Era::Older(cx)
        } else {
            Era::Current(cx)
        }
    }

    /// `cx` as the `TaskServer` gets it: with the session's level when it
    /// is an older client's.
    fn context(&self, cx: RequestContext<RoleServer>) -> RequestContext<RoleServer> {
        let (Era::Current(cx) | Era::Older(cx)) = self.steer(cx);
        cx
    }

    fn relay(&self) -> Relay<'_> {
        Relay {
            engine: self.server.engine(),
            detached: &self.detached,
        }
    }
}

/// `ServerHandler` methods that pass a request on to the `TaskServer`.
macro_rules! forward {
    ($($(#[$attr:meta])* $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        $(
            $(#[$attr])*
            async fn $name(
                &self,
                $($arg: $ty,)*
                context: RequestContext<RoleServer>,
            ) -> Result<$ret, McpError> {
                self.server.$name($($arg,)* self.context(context)).await
            }
        )*
    };
}

impl<H: ServerHandler> WithOlder<H> {
    async fn answer_call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        match self.steer(context) {
            Era::Older(cx) if self.server.is_task_tool(&request.name) => {
                let call = self.server.tool_call(&request, &cx)?;
                self.relay().call(call, &cx).await
            }
            Era::Older(cx) | Era::Current(cx) => self.server.call_tool(request, cx).await,
        }
    }

    async fn answer_on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let cx = match self.steer(context) {
            Era::Current(cx) => return self.server.on_custom_request(request, cx).await,
            Era::Older(cx) => cx,
        };
        let tasks = Tasks {
            relay: self.relay(),
            principal: self.server.principal_of(&cx),
        };
        if let Some(answer) = tasks.answer(&request, &cx).await {
            return answer;
        }
        if request.method == listen::METHOD {
            return Err(McpError::new(
                ErrorCode::METHOD_NOT_FOUND,
                "Method not found: `subscriptions/listen` is part of protocol version \
                 2026-07-28; this session speaks an earlier one",
                None,
            ));
        }
        if let Some(refusal) = malformed::refusal(&request, wire::caller(&cx).tasks, false) {
            return Err(refusal);
        }
        self.server.extra().on_custom_request(request, cx).await
    }
}

impl<H: ServerHandler> ServerHandler for WithOlder<H> {
    fn get_info(&self) -> ServerConfig {
        self.server.get_info()
    }

    /// Every version rmcp knows: 2026-07-28 statelessly, and the earlier
    /// ones through `initialize` and sessions.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        let mut discovered = self.server.discover(context).await?;
        discovered.supported_versions = self.supported_protocol_versions().into_owned();
        Ok(discovered)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.server.get_tool(name)
    }

    /// A session is open: it hears of the engine's tool list changes from
    /// now on (see `tool_list`).
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.tool_list
            .join(context.peer.clone(), self.server.engine());
        self.server.on_initialized(context).await;
    }

    boxed! {
        call_tool(CallToolRequestParams) -> CallToolResponse = answer_call_tool;
        on_custom_request(CustomRequest) -> CustomResult = answer_on_custom_request;
    }

    /// A session's poll shows every question: its capabilities were
    /// declared when it opened, and its questions go out as requests in the
    /// session, not here.
    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        match self.steer(context) {
            Era::Older(cx) => {
                self.server
                    .detailed_task(&request, &cx, InputCapabilities::ALL)
                    .await
            }
            Era::Current(cx) => self.server.get_task(request, cx).await,
        }
    }

    /// A session's `logging/setLevel` goes to the wrapped handler, and once
    /// it accepts the level, the level is the session's (see
    /// [`mcp::log`](crate::mcp::log)); a 2026-07-28 request's gets
    /// `-32601` from the `TaskServer`.
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        match self.steer(context) {
            Era::Older(cx) => {
                let level = request.level;
                self.server.extra().set_level(request, cx).await?;
                self.level.set(level);
                Ok(())
            }
            Era::Current(cx) => self.server.set_level(request, cx).await,
        }
    }

    forward! {
        list_tools(request: Option<PaginatedRequestParams>) -> ListToolsResult;
        update_task(request: UpdateTaskParams) -> ();
        cancel_task(request: CancelTaskParams) -> ();
        complete(request: CompleteRequestParams) -> CompleteResult;
        get_prompt(request: GetPromptRequestParams) -> GetPromptResponse;
        list_prompts(request: Option<PaginatedRequestParams>) -> ListPromptsResult;
        list_resources(request: Option<PaginatedRequestParams>) -> ListResourcesResult;
        list_resource_templates(request: Option<PaginatedRequestParams>) -> ListResourceTemplatesResult;
        read_resource(request: ReadResourceRequestParams) -> ReadResourceResponse;
        #[allow(deprecated)]
        subscribe(request: SubscribeRequestParams) -> ();
        #[allow(deprecated)]
        unsubscribe(request: UnsubscribeRequestParams) -> ();
    }
}
