//! A `tools/call` of a task tool: read from the request once ([`ToolCall`]),
//! then served in its client's dialect. The 2026-07-28 dialects are here: a
//! request that declares the tasks extension gets a task (or, within the
//! inline window, its result), one that does not runs inline, its questions
//! MRTR rounds whose journal travels in a sealed `requestState`
//! ([`request_state`](super::request_state)). The 2025-11-25 dialects (a task call, a
//! plain call relayed in the session) take the same [`ToolCall`], in the
//! older era's module.

use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{CallToolRequestParams, CallToolResponse, CreateTaskResult, InputRequiredResult},
    service::RequestContext,
};
use serde_json::{Map, Value};

use super::wire;
use crate::request_state::Sealer;
use crate::{
    engine::{Call, CallMode, CallOutcome, Engine, IDEMPOTENCY_KEY},
    input::InputCapabilities,
    tool::JsonObject,
};

/// A call of a task tool as every dialect reads it: the tool, its
/// arguments, and who calls it from where, able to answer what.
#[derive(Debug, Clone)]
pub(crate) struct ToolCall {
    pub(crate) name: String,
    pub(crate) args: JsonObject,
    pub(crate) principal: Option<String>,
    client_addr: Option<std::net::IpAddr>,
    input: InputCapabilities,
    /// The request's [`IDEMPOTENCY_KEY`].
    key: Option<String>,
}

impl ToolCall {
    /// The call of `name` with `args` in request `cx`, made by `principal`.
    ///
    /// # Errors
    ///
    /// `-32602` when the request's [`IDEMPOTENCY_KEY`] is not a string.
    pub(crate) fn new(
        name: String,
        args: JsonObject,
        principal: Option<String>,
        cx: &RequestContext<RoleServer>,
    ) -> Result<Self, McpError> {
        let key = crate::engine::keys::key_in_meta(cx.meta.get(IDEMPOTENCY_KEY))?;
        Ok(Self {
            name,
            args,
            principal,
            client_addr: wire::client_addr(cx),
            input: wire::caller(cx).input,
            key,
        })
    }

    /// What `state_binding` binds a `requestState` or a repeated call to:
    /// `scope` (the principal, by default), the tool and its arguments.
    pub(crate) fn binding(&self, scope: Option<&str>) -> Vec<u8> {
        crate::request_state::state_binding(scope, &self.name, &self.args)
    }

    /// The engine's call, run as `mode` says.
    pub(crate) fn engine_call(&self, mode: CallMode) -> Call {
        let call = Call::new(self.name.clone(), self.args.clone())
            .principal(self.principal.clone())
            .client_addr(self.client_addr)
            .capabilities(self.input)
            .mode(mode);
        match &self.key {
            Some(key) => call.idempotency_key(key.clone()),
            None => call,
        }
    }
}

/// What a 2026-07-28 call needs besides the engine: the `requestState`
/// sealer, and how long a task-capable call runs inline before it answers
/// with its task.
pub(super) struct Current<'a> {
    pub(super) engine: &'a Engine,
    pub(super) sealer: &'a Sealer,
    pub(super) window: std::time::Duration,
}

impl Current<'_> {
    /// Serves `call` (from `params`): a task when the request declared the
    /// extension (`tasks`), otherwise inline; an inline question becomes an
    /// MRTR round.
    pub(super) async fn serve(
        &self,
        call: ToolCall,
        params: CallToolRequestParams,
        tasks: bool,
    ) -> Result<CallToolResponse, McpError> {
        let binding = call.binding(call.principal.as_deref());
        let mode = if tasks {
            CallMode::Task
        } else {
            CallMode::Inline
        };
        let mut engine_call = call.engine_call(mode).inline_window(self.window);
        if params.request_state.is_some() || params.input_responses.is_some() {
            // Checked before the state is spent, so that a retry with
            // answers over the limit can be made again with smaller ones.
            if let Some(answers) = &params.input_responses {
                self.engine.limits().check_answers(answers)?;
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
            engine_call = engine_call.resume(journal, answers);
        }
        let outcome = match self.engine.call(engine_call).await {
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
                    .sealer
                    .seal(journal, asked, &binding, crate::id::now_ms())?;
                Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
                    Some(wire::input_requests(&requests)?),
                    Some(sealed),
                )))
            }
        }
    }

    /// Opens a `requestState` and spends it: a state comes back once (its
    /// journal, and the keys its round asked). The spend is recorded in the
    /// engine's front door before anything runs, so a state sent twice — in
    /// parallel, or to two instances sharing it — resumes the call once,
    /// and the other copy is refused.
    async fn spend_state(
        &self,
        sealed: &str,
        binding: &[u8],
    ) -> Result<(Vec<crate::journal::JournalEntry>, Vec<String>), McpError> {
        let now = crate::id::now_ms();
        let opened = self.sealer.open(sealed, binding, now)?;
        let first = self
            .engine
            .front_door()
            .spend(&opened.id, opened.expires_at_ms, now)
            .await?;
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
