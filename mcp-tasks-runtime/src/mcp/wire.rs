//! Where the core's types meet MCP's wire: every conversion between the
//! engine's values and rmcp's model types lives here, and nowhere else.

use std::time::{Duration, UNIX_EPOCH};

use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{
        CallToolResponse, CallToolResult, ClientCapabilities, DetailedTask, ErrorCode,
        InputRequest as WireRequest, InputRequests, JsonObject as RmcpObject, TASKS_EXTENSION_ID,
        Task, TaskPayload, TaskStatus as WireStatus,
    },
    service::RequestContext,
};
use serde_json::{Value, json};

use crate::{
    error::{Error, RpcError},
    input::InputCapabilities,
    journal::PendingInput,
    store::{TaskRecord, TaskStatus},
    tool::ToolOutcome,
};

/// The JSON-RPC error a client sees for an engine error.
impl From<Error> for McpError {
    fn from(e: Error) -> Self {
        error(&e)
    }
}

fn error(e: &Error) -> McpError {
    match e {
        Error::UnknownTool(_)
        | Error::InvalidArguments { .. }
        | Error::TaskNotFound(_)
        | Error::IdempotencyKey(_) => McpError::invalid_params(e.to_string(), None),
        Error::TaskRequired(_) => McpError::new(
            ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
            "Missing required client capability",
            Some(json!({
                "requiredCapabilities": {"extensions": {TASKS_EXTENSION_ID: {}}}
            })),
        ),
        Error::LimitExceeded {
            limit,
            message,
            retry_after_ms,
        } => {
            let mut data = json!({"limit": limit});
            if let Some(ms) = retry_after_ms {
                data["retryAfterMs"] = json!(ms);
            }
            // Sizes are the request's fault; caps and rates are the
            // caller's load, which the spec gives no code of its own.
            let code = match *limit {
                "max_argument_bytes" | "max_answer_bytes" => ErrorCode::INVALID_PARAMS,
                _ => ErrorCode::INTERNAL_ERROR,
            };
            McpError::new(code, message.clone(), Some(data))
        }
        // The spec has no code for a server going away: an internal error
        // that says so, and a `reason` to tell it apart.
        Error::ShuttingDown => {
            McpError::internal_error(e.to_string(), Some(json!({"reason": "shutting_down"})))
        }
        // The database out of reach (restarting, failing over, a cut
        // connection): the call may succeed again in a moment (a fast
        // restart takes about a second). The details stay in the log.
        Error::Store(store) if store.is_unavailable() => {
            let reference = &crate::id::random_hex()[..12];
            tracing::warn!(error = %crate::id::Redacted(&e), reference, "the store is unavailable; the client was told to call again");
            McpError::internal_error(
                format!(
                    "the task store cannot be reached right now; call again in a moment (reference {reference})"
                ),
                Some(json!({"reason": "store_unavailable", "retryAfterMs": 1000})),
            )
        }
        // What went wrong inside (a store's error names files and carries
        // the database's own text) stays in the log, under a reference the
        // client is given.
        _ => {
            let reference = &crate::id::random_hex()[..12];
            tracing::error!(error = %crate::id::Redacted(&e), reference, "internal error; the client was given the reference");
            McpError::internal_error(format!("internal error (reference {reference})"), None)
        }
    }
}

/// The `tools/call` answer to an engine error. Bad arguments (a wrong type, a
/// missing field, an argument the tool does not take) are a tool execution
/// error, as C-TOOLS has them: a result with `isError: true` whose text names
/// the field, so that the model can correct its call (tasks ext. § Task
/// Creation); no task exists. Every other error is the JSON-RPC error of
/// [`error`].
pub(crate) fn refused_call(e: &Error) -> Result<CallToolResponse, McpError> {
    match argument_error(e) {
        Some(result) => call_result(Ok(result)),
        None => Err(error(e)),
    }
}

/// The tool error (`isError: true`) for bad arguments, as JSON without
/// `resultType` (what a 2025-11-25 answer carries); `None` for any other
/// error.
pub(crate) fn argument_error(e: &Error) -> Option<RmcpObject> {
    match e {
        Error::InvalidArguments { .. } => crate::tool::output::failure(e).ok(),
        _ => None,
    }
}

/// Unix milliseconds as an RFC 3339 timestamp (`2026-11-30T10:30:00.123Z`).
pub(crate) fn rfc3339(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(t).to_string()
}

/// A task's JSON-RPC error as rmcp's error type.
pub(crate) fn rpc_error(e: &RpcError) -> McpError {
    McpError::new(
        i32::try_from(e.code).map_or(ErrorCode::INTERNAL_ERROR, ErrorCode),
        e.message.clone(),
        e.data.clone(),
    )
}

/// What a request's client declared: the tasks extension, and which
/// questions it can answer.
pub(crate) struct Caller {
    pub(crate) tasks: bool,
    pub(crate) input: InputCapabilities,
}

pub(crate) fn caller(cx: &RequestContext<RoleServer>) -> Caller {
    Caller::of(cx.client_capabilities().as_ref())
}

impl Caller {
    /// What a client that declared `caps` (if anything) can do.
    pub(crate) fn of(caps: Option<&ClientCapabilities>) -> Self {
        let mut input = InputCapabilities::NONE;
        if let Some(c) = caps {
            // `elicitation: {}` is form mode; `{"url": {}}` alone is not.
            input.elicitation = c
                .elicitation
                .as_ref()
                .is_some_and(|e| e.form.is_some() || e.url.is_none());
            input.elicitation_url = c.elicitation.as_ref().is_some_and(|e| e.url.is_some());
            input.sampling = c.sampling.is_some();
            input.sampling_tools = c.sampling.as_ref().is_some_and(|s| s.tools.is_some());
            input.roots = c.roots.is_some();
        }
        Self {
            tasks: caps.is_some_and(ClientCapabilities::supports_tasks),
            input,
        }
    }
}

fn status(s: TaskStatus) -> WireStatus {
    match s {
        TaskStatus::Working => WireStatus::Working,
        TaskStatus::InputRequired => WireStatus::InputRequired,
        TaskStatus::Completed => WireStatus::Completed,
        TaskStatus::Failed => WireStatus::Failed,
        TaskStatus::Cancelled => WireStatus::Cancelled,
    }
}

/// The task fields shared by `CreateTaskResult`, `tasks/get` and notifications.
pub(crate) fn task(r: &TaskRecord) -> Task {
    let mut t = Task::new(
        r.id.clone(),
        status(r.status),
        rfc3339(r.created_at_ms),
        rfc3339(r.updated_at_ms),
    );
    if let Some(m) = &r.status_message {
        t = t.with_status_message(m.clone());
    }
    if let Some(ttl) = r.ttl_ms {
        t = t.with_ttl_ms(ttl);
    }
    if let Some(p) = r.poll_interval_ms {
        t = t.with_poll_interval_ms(p);
    }
    t
}

/// Outstanding questions as `inputRequests`, by key.
pub(crate) fn input_requests(pending: &[PendingInput]) -> Result<InputRequests, McpError> {
    pending
        .iter()
        .map(|p| {
            let request = json!({"method": p.request.method(), "params": p.request.params()});
            serde_json::from_value::<WireRequest>(request)
                .map(|r| (p.key.clone(), r))
                .map_err(|e| {
                    McpError::internal_error(
                        format!("input request `{}` is not a valid MCP request: {e}", p.key),
                        None,
                    )
                })
        })
        .collect()
}

/// Drops the empty `elicitationId` rmcp writes into every URL-mode
/// elicitation of `holder["inputRequests"]` (a result, or a task
/// notification's params): 2026-07-28 has no such field. Whether it dropped
/// any.
pub(crate) fn drop_empty_elicitation_ids(holder: &mut Value) -> bool {
    let Some(requests) = holder
        .get_mut("inputRequests")
        .and_then(Value::as_object_mut)
    else {
        return false;
    };
    let mut dropped = false;
    for request in requests.values_mut() {
        if let Some(params) = request.get_mut("params").and_then(Value::as_object_mut)
            && params.get("mode").and_then(Value::as_str) == Some("url")
            && params.get("elicitationId").and_then(Value::as_str) == Some("")
        {
            params.remove("elicitationId");
            dropped = true;
        }
    }
    dropped
}

/// The `DetailedTask` for a record, exactly as `tasks/get` shows it to a
/// request that declared `shown`: its `inputRequests` hold only the questions
/// that request's client can answer (tasks ext. § Input Requests). The task
/// was only asked questions its creating call declared; a poll that declares
/// less (another client, or the same one with fewer capabilities) is not sent
/// the others, and the task stays `input_required` until a client that can
/// answer them does. `InputCapabilities::ALL` shows every question.
///
/// It takes the record, whose result and questions it moves into the answer
/// rather than copying them (a `tasks/get` reads the record for this alone).
pub(crate) fn detailed(
    mut r: TaskRecord,
    shown: InputCapabilities,
) -> Result<DetailedTask, McpError> {
    let payload = match r.status {
        TaskStatus::Working => TaskPayload::Working,
        TaskStatus::InputRequired => {
            r.pending
                .retain(|p| p.is_open() && shown.allows(&p.request));
            TaskPayload::InputRequired {
                input_requests: input_requests(&r.pending)?,
            }
        }
        TaskStatus::Completed => {
            let mut result: RmcpObject = r.result.take().unwrap_or_default();
            result.insert("resultType".into(), json!("complete"));
            TaskPayload::Completed { result }
        }
        TaskStatus::Failed => {
            let fallback = RpcError::internal("the task failed");
            let error = r.error.as_ref().unwrap_or(&fallback);
            TaskPayload::Failed {
                error: match serde_json::to_value(error) {
                    Ok(Value::Object(map)) => map,
                    _ => RmcpObject::new(),
                },
            }
        }
        TaskStatus::Cancelled => TaskPayload::Cancelled,
    };
    Ok(DetailedTask::new(task(&r), payload))
}

/// A finished inline call as the `tools/call` response.
pub(crate) fn call_result(outcome: ToolOutcome) -> Result<CallToolResponse, McpError> {
    match outcome {
        Ok(mut result) => {
            result.insert("resultType".into(), json!("complete"));
            serde_json::from_value::<CallToolResult>(Value::Object(result))
                .map(CallToolResponse::Complete)
                .map_err(|e| {
                    McpError::internal_error(format!("the tool's result is not valid: {e}"), None)
                })
        }
        Err(e) => Err(rpc_error(&e)),
    }
}

/// The address of the client that sent the request, where the transport
/// knows it: [`serve`](super::serve) puts each connection's
/// peer on its requests as axum's `ConnectInfo` (an embedder gets the same
/// with `into_make_service_with_connect_info::<SocketAddr>()`); stdio has
/// none.
///
/// The HTTP edge puts the client's address as every per-client limit keys
/// it (loopback addresses as one, unless counted apart) in the request's
/// extensions; that one is used when it is there.
pub(crate) fn client_addr(cx: &RequestContext<RoleServer>) -> Option<std::net::IpAddr> {
    let parts = cx.extensions.get::<axum::http::request::Parts>()?;
    if let Some(keyed) = parts.extensions.get::<super::peer::ClientAddress>() {
        return Some(keyed.0);
    }
    parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|info| info.0.ip())
}
