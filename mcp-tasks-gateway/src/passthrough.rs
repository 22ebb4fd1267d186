//! What the gateway passes to its upstream as it comes: the tools that run
//! as plain calls (policy `forbidden`), prompts, resources and completions.
//! Each request goes upstream on a session of its own for as long as it
//! runs, so that what the upstream sends meanwhile (progress, log
//! messages, and a 2025-11-25 upstream's questions) goes to the client
//! that asked, and the upstream sees that client's capabilities, not the
//! gateway's.

use std::sync::Arc;

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ClientRequest,
        CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse,
        GetPromptResult, InputRequiredResult, ListPromptsResult, ListResourceTemplatesResult,
        ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
        ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
        RequestMetaObject, ServerConfig, ServerRequest, Tool,
    },
    service::{PeerRequestOptions, RequestContext, ServiceError},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::{
    Inner,
    call::{self, Pending},
    upstream::Event,
};

/// Serves what the gateway does not make a task: the upstream's tools whose
/// task policy is `forbidden`, its prompts, resources, resource templates
/// and completions, each request passed upstream as it came and its answer
/// passed back. An `InputRequiredResult` goes back to a 2026-07-28 client
/// as it is (the client answers the upstream's questions itself, and the
/// gateway keeps nothing between the rounds); a client in a 2025-11-25
/// session, which cannot read one, is asked each question as a request of
/// its session, and the gateway sends the request upstream again with the
/// answers, until the upstream answers otherwise. Resource subscriptions
/// are not relayed (no `resources.subscribe` is declared). Made by [`Gateway::passthrough`](crate::Gateway::passthrough);
/// hand it to the runtime's front door with
/// [`TaskServerBuilder::extras`](mcp_tasks_runtime::mcp::TaskServerBuilder::extras).
///
/// While a request runs upstream, the upstream's progress reaches the
/// client under the client's own `progressToken`, its log messages at the
/// level the client asked for, and a 2025-11-25 upstream's questions
/// (`elicitation/create`, `sampling/createMessage`, `roots/list`) reach a
/// client in a 2025-11-25 session; a 2026-07-28 client, to which a server
/// sends no request, is asked nothing, and the upstream gets an error. The
/// upstream sees the capabilities the client declared, so that it asks
/// only what the client can answer.
#[derive(Debug, Clone)]
pub struct Passthrough {
    inner: Arc<Inner>,
}

impl Passthrough {
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        Self { inner }
    }

    /// Sends `method` with `params` upstream for the request `cx`, relaying
    /// what the upstream sends for it meanwhile, and decodes its answer.
    async fn forward<P: Serialize, T: DeserializeOwned>(
        &self,
        method: &str,
        params: Option<&P>,
        cx: &RequestContext<RoleServer>,
    ) -> Result<T, McpError> {
        let answer = self.send(method, params, cx).await?;
        serde_json::from_value(answer).map_err(|e| not_one(method, &e))
    }

    /// [`forward`](Self::forward) for a request the upstream may answer
    /// with its questions (`InputRequiredResult`) or with `C`.
    async fn forward_mrtr<P: Serialize, C: DeserializeOwned, R>(
        &self,
        method: &str,
        params: &P,
        cx: &RequestContext<RoleServer>,
    ) -> Result<R, McpError>
    where
        R: From<C> + From<InputRequiredResult>,
    {
        let mut answer = self.send(method, Some(params), cx).await?;
        if !modern(cx) {
            answer = self.asked_in_session(method, params, answer, cx).await?;
        }
        if answer.get("resultType").and_then(Value::as_str) == Some("input_required") {
            let asked: InputRequiredResult =
                serde_json::from_value(answer).map_err(|e| not_one(method, &e))?;
            return Ok(asked.into());
        }
        let done: C = serde_json::from_value(answer).map_err(|e| not_one(method, &e))?;
        Ok(done.into())
    }

    /// For a client in a 2025-11-25 session, which cannot read an
    /// `InputRequiredResult`: asks it each of the upstream's questions as a
    /// request of the session, and sends `method` again with the answers
    /// and the upstream's `requestState`, until the upstream answers
    /// otherwise.
    async fn asked_in_session<P: Serialize>(
        &self,
        method: &str,
        params: &P,
        mut answer: Value,
        cx: &RequestContext<RoleServer>,
    ) -> Result<Value, McpError> {
        let mut params = serde_json::to_value(params).map_err(internal)?;
        for _ in 0..call::MAX_ROUNDS {
            if answer.get("resultType").and_then(Value::as_str) != Some("input_required") {
                return Ok(answer);
            }
            let requests = answer["inputRequests"].as_object().cloned();
            let mut responses = serde_json::Map::new();
            for (key, request) in requests.unwrap_or_default() {
                responses.insert(key, ask(request, cx).await?);
            }
            params["inputResponses"] = Value::Object(responses);
            match answer.get("requestState") {
                Some(state) => params["requestState"] = state.clone(),
                None => {
                    if let Some(params) = params.as_object_mut() {
                        params.remove("requestState");
                    }
                }
            }
            answer = self.send(method, Some(&params), cx).await?;
        }
        Err(McpError::internal_error(
            format!(
                "{method}: the upstream asked for input {} times: given up",
                call::MAX_ROUNDS
            ),
            None,
        ))
    }

    /// Sends `method` upstream for the request `cx` (see
    /// [`forward`](Self::forward)): its answer, as JSON.
    async fn send<P: Serialize>(
        &self,
        method: &str,
        params: Option<&P>,
        cx: &RequestContext<RoleServer>,
    ) -> Result<Value, McpError> {
        let mut request = json!({ "method": method });
        if let Some(params) = params {
            let mut params = serde_json::to_value(params).map_err(internal)?;
            // The client's own `_meta` is not the gateway's to send: the
            // upstream gets the client's capabilities below, and rmcp sets
            // the rest (its own progress token included).
            if let Value::Object(params) = &mut params {
                params.remove("_meta");
            }
            request["params"] = params;
        }
        let request: ClientRequest = serde_json::from_value(request).map_err(|e| {
            McpError::invalid_params(format!("{method}: not a request to pass on: {e}"), None)
        })?;
        let (events_to, mut events) = mpsc::unbounded_channel();
        let session = self
            .inner
            .upstream
            .take(Some(events_to))
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        let mut options = PeerRequestOptions::no_options();
        let mut meta = RequestMetaObject::new();
        if let Some(mut capabilities) = cx.client_capabilities() {
            // What is passed on is not a task: the upstream is not to make
            // one of it either.
            if let Some(extensions) = capabilities.extensions.as_mut() {
                extensions.remove(rmcp::model::TASKS_EXTENSION_ID);
            }
            meta.set_client_capabilities(capabilities);
        }
        // Every message the upstream logs comes back, and reaches the
        // client at the level it asked for (its request's `logLevel`, or
        // its 2025-11-25 session's `logging/setLevel`): see `relay`.
        #[allow(deprecated)]
        meta.set_log_level(rmcp::model::LoggingLevel::Debug);
        options.meta = Some(meta);
        let handle = session
            .peer()
            .send_cancellable_request(request, options)
            .await
            .map_err(|e| upstream_failed(method, &e))?;
        // Dropped before the answer (the client cancelled, or went away):
        // the upstream hears `notifications/cancelled`, and the session
        // carries nothing else.
        let mut pending = Pending::new(&session, Some(handle.id.clone()));
        let response = handle.await_response();
        tokio::pin!(response);
        let answer = loop {
            tokio::select! {
                answer = &mut response => break answer,
                () = cx.ct.cancelled() => {
                    return Err(McpError::internal_error(format!("{method}: cancelled by the client"), None));
                }
                Some(event) = events.recv() => relay(event, cx).await,
            }
        };
        pending.id = None;
        match answer {
            Ok(result) => {
                let mut result = serde_json::to_value(result).map_err(internal)?;
                if let Value::Object(result) = &mut result {
                    call::strip_protocol_meta(result);
                }
                Ok(result)
            }
            Err(ServiceError::McpError(e)) => Err(e),
            Err(e) => Err(upstream_failed(method, &e)),
        }
    }

    /// Whether `tool` is an upstream tool that runs as a plain call.
    fn plain(&self, tool: &str) -> bool {
        self.inner
            .definition(tool)
            .is_some_and(|t| !self.inner.tasked(&t, tool))
    }

    /// The upstream's tools that run as plain calls.
    fn plain_tools(&self) -> Vec<Tool> {
        self.inner
            .tools()
            .iter()
            .filter(|t| {
                t.get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|name| !self.inner.tasked(t, name))
            })
            .filter_map(|t| serde_json::from_value(Value::Object(t.clone())).ok())
            .collect()
    }
}

fn not_one(method: &str, e: &serde_json::Error) -> McpError {
    McpError::internal_error(
        format!("{method}: the upstream's answer is not one: {e}"),
        None,
    )
}

fn internal(e: serde_json::Error) -> McpError {
    McpError::internal_error(e.to_string(), None)
}

fn upstream_failed(method: &str, e: &ServiceError) -> McpError {
    McpError::internal_error(format!("{method}: the upstream failed: {e}"), None)
}

/// Hands the client of `cx` what the upstream sent for its request.
#[allow(deprecated)] // Logging is deprecated (SEP-2577), and still sent.
async fn relay(event: Event, cx: &RequestContext<RoleServer>) {
    match event {
        Event::Progress(progress) => {
            if let Some(token) = cx.meta.get_progress_token() {
                let mut mine = ProgressNotificationParam::new(token, progress.progress);
                mine.total = progress.total;
                mine.message = progress.message;
                let _ = cx.peer.notify_progress(mine).await;
            }
        }
        Event::Log(message) => {
            let logger = message.logger.as_deref().unwrap_or("upstream");
            mcp_tasks_runtime::mcp::log(cx, message.level, logger, message.data).await;
        }
        Event::Ask(request, reply) => {
            let _ = reply.send(ask(request, cx).await);
        }
    }
}

/// Whether the client of `cx` speaks 2026-07-28 (or later), where a server
/// sends the client no requests.
fn modern(cx: &RequestContext<RoleServer>) -> bool {
    cx.protocol_version()
        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28)
}

/// Asks the client of `cx` a question of the upstream's (sent while the
/// request runs, or in an `InputRequiredResult`): only a client in a
/// session can be asked.
async fn ask(request: Value, cx: &RequestContext<RoleServer>) -> Result<Value, McpError> {
    let method = request["method"].as_str().unwrap_or("?").to_owned();
    if modern(cx) {
        return Err(McpError::invalid_request(
            format!(
                "{method}: the gateway's client speaks 2026-07-28, where a server sends no \
                 requests; ask with an InputRequiredResult"
            ),
            None,
        ));
    }
    let request: ServerRequest = serde_json::from_value(request).map_err(|e| {
        McpError::invalid_params(format!("{method}: not a request to pass on: {e}"), None)
    })?;
    let answer = cx.peer.send_request(request).await.map_err(|e| match e {
        ServiceError::McpError(e) => e,
        e => McpError::internal_error(format!("{method}: the client did not answer: {e}"), None),
    })?;
    serde_json::to_value(answer).map_err(internal)
}

impl ServerHandler for Passthrough {
    /// The upstream's capabilities for what this passes on (prompts,
    /// resources, completions, logging) and tools, and its instructions;
    /// the runtime adds the tasks extension, its name and
    /// `tools.listChanged`. What needs a session of its own upstream is left
    /// out: subscriptions to resources and the prompt and resource lists'
    /// change notices.
    fn get_info(&self) -> ServerConfig {
        let (upstream, instructions) = self.inner.upstream.described();
        let mut capabilities = rmcp::model::ServerCapabilities::builder()
            .enable_tools()
            .build();
        capabilities.prompts = upstream.prompts.map(|mut p| {
            p.list_changed = None;
            p
        });
        capabilities.resources = upstream.resources.map(|mut r| {
            r.list_changed = None;
            r.subscribe = None;
            r
        });
        capabilities.completions = upstream.completions;
        #[allow(deprecated)]
        {
            capabilities.logging = upstream.logging;
        }
        let config = ServerConfig::new(capabilities);
        match instructions {
            Some(text) => config.with_instructions(text),
            None => config,
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.plain_tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.plain_tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if !self.plain(&request.name) {
            return Err(McpError::invalid_params(
                format!("unknown tool `{}`", request.name),
                None,
            ));
        }
        self.forward_mrtr::<_, CallToolResult, _>("tools/call", &request, &context)
            .await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        self.forward("prompts/list", request.as_ref(), &context)
            .await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        self.forward_mrtr::<_, GetPromptResult, _>("prompts/get", &request, &context)
            .await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.forward("resources/list", request.as_ref(), &context)
            .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        self.forward("resources/templates/list", request.as_ref(), &context)
            .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.forward_mrtr::<_, ReadResourceResult, _>("resources/read", &request, &context)
            .await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        self.forward("completion/complete", Some(&request), &context)
            .await
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        _request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        // Each request forwarded carries its client's level: nothing to
        // keep for the session.
        Ok(())
    }
}
