//! The experimental tasks of MCP 2025-11-25 (SEP-1686), mapped onto the same
//! durable tasks.
//!
//! A 2025-11-25 client that declared tasks may call a tool with a `task`
//! param, gets a `CreateTaskResult`, and follows the task with `tasks/get`,
//! `tasks/result` (which waits for the outcome, and carries the task's
//! questions to the client as requests tagged with the task), `tasks/list`
//! and `tasks/cancel`.
//!
//! rmcp models only the 2026-07-28 tasks, whose method names collide with
//! these and whose shapes differ. So the edge of each transport renames a
//! legacy client's task requests to methods of our own, which reach the
//! server as custom requests ([`rewrite_request`]), and adds what the
//! 2025-11-25 answers carry and rmcp's types cannot (`capabilities.tasks`
//! in `initialize`, `execution.taskSupport` in `tools/list`:
//! [`Edge::rewrite_response`]). Sessions, streams, routing and cancellation
//! stay rmcp's.

use std::time::Duration;

use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{CustomRequest, CustomResult, ErrorCode, ServerJsonRpcMessage, ServerResult},
    service::RequestContext,
};
use serde_json::{Map, Value, json};

use super::relay::{OnCancel, Relay, not_completed};
use crate::{
    Engine,
    engine::{CallMode, CallOutcome},
    mcp::{
        tool_call::ToolCall,
        wire::{self, rfc3339},
    },
    store::{ListCursor, TaskRecord, TaskStatus},
    tool::Registry,
    tool::TaskPolicy,
};

/// Our names for a legacy client's task requests.
const PREFIX: &str = "mcp-tasks/2025-11-25/";
const CALL: &str = "mcp-tasks/2025-11-25/tools/call";
const GET: &str = "mcp-tasks/2025-11-25/tasks/get";
const RESULT: &str = "mcp-tasks/2025-11-25/tasks/result";
const LIST: &str = "mcp-tasks/2025-11-25/tasks/list";
const CANCEL: &str = "mcp-tasks/2025-11-25/tasks/cancel";

/// The key of a related task in `_meta`.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// How many tasks a `tasks/list` page holds.
const PAGE: usize = 50;

/// How long `tasks/cancel` waits for a running task to stop.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// Renames a legacy client's task request (JSON-RPC, as received) to our
/// own method. A request that carries the 2026-07-28 `_meta` is left alone,
/// and so is everything that is not a task request. Returns whether it
/// renamed anything.
pub(crate) fn rewrite_request(message: &mut Value) -> bool {
    let Some(obj) = message.as_object_mut() else {
        return false;
    };
    let modern = obj
        .get("params")
        .and_then(|p| p.pointer("/_meta/io.modelcontextprotocol~1protocolVersion"))
        .is_some();
    let ours = match obj.get("method").and_then(Value::as_str) {
        _ if modern => return false,
        Some("tools/call") if obj.get("params").and_then(|p| p.get("task")).is_some() => CALL,
        Some("tasks/get") => GET,
        Some("tasks/result") => RESULT,
        Some("tasks/list") => LIST,
        Some("tasks/cancel") => CANCEL,
        _ => return false,
    };
    obj.insert("method".into(), json!(ours));
    true
}

/// What the edge adds to a legacy client's answers.
#[derive(Debug, Clone)]
pub(crate) struct Edge {
    /// Whose task tools' policies `tools/list` shows (the tools it serves
    /// when the answer goes out).
    engine: Engine,
    /// Whether `tasks/list` is offered (only when requestors are known).
    list: bool,
}

impl Edge {
    pub(crate) fn new(engine: &Engine, list: bool) -> Self {
        Self {
            engine: engine.clone(),
            list,
        }
    }

    /// Adds `capabilities.tasks` to an `initialize` answer (and drops the
    /// 2026 tasks extension, which that era does not speak), and
    /// `execution.taskSupport` to each task tool in `tools/list`.
    pub(crate) fn rewrite_response(&self, message: &mut ServerJsonRpcMessage) {
        let ServerJsonRpcMessage::Response(response) = message else {
            return;
        };
        let rewritten = match &response.result {
            ServerResult::InitializeResult(_) | ServerResult::ListToolsResult(_) => {
                serde_json::to_value(&response.result).ok()
            }
            _ => None,
        };
        let Some(mut value) = rewritten else { return };
        if let Some(caps) = value.get_mut("capabilities").and_then(Value::as_object_mut) {
            self.declare(caps);
        }
        if let Some(tools) = value.get_mut("tools").and_then(Value::as_array_mut) {
            let registry = self.engine.registry();
            for tool in tools {
                annotate(&registry, tool);
            }
        }
        response.result = ServerResult::CustomResult(CustomResult(value));
    }

    fn declare(&self, caps: &mut Map<String, Value>) {
        if let Some(Value::Object(ext)) = caps.get_mut("extensions") {
            ext.remove(rmcp::model::TASKS_EXTENSION_ID);
            if ext.is_empty() {
                caps.remove("extensions");
            }
        }
        let mut tasks = json!({"cancel": {}, "requests": {"tools": {"call": {}}}});
        if self.list {
            tasks["list"] = json!({});
        }
        caps.insert("tasks".into(), tasks);
    }
}

/// Adds `execution.taskSupport` to `tool` when it is one of `registry`'s
/// task tools.
fn annotate(registry: &Registry, tool: &mut Value) {
    let Some(name) = tool.get("name").and_then(Value::as_str) else {
        return;
    };
    let support = match registry.get(name).map(|t| t.descriptor().policy()) {
        Some(TaskPolicy::Required) => "required",
        Some(TaskPolicy::Optional) => "optional",
        Some(TaskPolicy::Forbidden) | None => return,
    };
    tool["execution"] = json!({"taskSupport": support});
}

/// A task as the 2025-11-25 wire shows it. A tool call that completed with
/// `isError` shows as `failed`, as that revision asks.
fn task_json(r: &TaskRecord) -> Value {
    let tool_error = r
        .result
        .as_ref()
        .is_some_and(|res| res.get("isError") == Some(&json!(true)));
    let status = match r.status {
        TaskStatus::Completed if tool_error => "failed",
        s => s.as_str(),
    };
    let mut t = json!({
        "taskId": r.id,
        "status": status,
        "createdAt": rfc3339(r.created_at_ms),
        "lastUpdatedAt": rfc3339(r.updated_at_ms),
        "ttl": r.ttl_ms,
    });
    if let Some(m) = &r.status_message {
        t["statusMessage"] = json!(m);
    }
    if let Some(p) = r.poll_interval_ms {
        t["pollInterval"] = json!(p);
    }
    t
}

fn params(request: &CustomRequest) -> Map<String, Value> {
    match &request.params {
        Some(Value::Object(p)) => p.clone(),
        _ => Map::new(),
    }
}

fn task_id(params: &Map<String, Value>) -> Result<&str, McpError> {
    params
        .get("taskId")
        .and_then(Value::as_str)
        .ok_or_else(|| McpError::invalid_params("missing `taskId`: a string naming the task", None))
}

/// The 2025-11-25 task requests, served for one principal.
pub(super) struct Tasks<'a> {
    pub(super) relay: Relay<'a>,
    pub(super) principal: Option<String>,
}

impl Tasks<'_> {
    /// Answers one of our renamed task requests; `None` for any other method.
    pub(super) async fn answer(
        &self,
        request: &CustomRequest,
        cx: &RequestContext<RoleServer>,
    ) -> Option<Result<CustomResult, McpError>> {
        if !request.method.starts_with(PREFIX) {
            return None;
        }
        let params = params(request);
        let principal = self.principal.as_deref();
        Some(match request.method.as_str() {
            CALL => self.task_call(params, cx).await,
            GET => self.task_get(&params, principal).await,
            RESULT => self.task_result(&params, principal, cx).await,
            LIST => self.task_list(&params, principal).await,
            CANCEL => self.task_cancel(&params, principal).await,
            other => Err(McpError::new(
                ErrorCode::METHOD_NOT_FOUND,
                other.to_owned(),
                None,
            )),
        })
    }

    /// `tools/call` with `params.task`: a `CreateTaskResult`.
    async fn task_call(
        &self,
        params: Map<String, Value>,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let tools = self.relay.engine.registry();
        let Some(tool) = tools.get(name) else {
            return Err(McpError::invalid_params(
                format!("unknown tool `{name}`"),
                None,
            ));
        };
        if tool.descriptor().policy() == TaskPolicy::Forbidden {
            return Err(McpError::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("tool `{name}` does not run as a task: call it without `params.task`"),
                None,
            ));
        }
        let args = match params.get("arguments") {
            Some(Value::Object(args)) => args.clone(),
            None | Some(Value::Null) => Map::new(),
            Some(_) => {
                return Err(McpError::invalid_params(
                    "`arguments` must be an object",
                    None,
                ));
            }
        };
        let call = ToolCall::new(name.to_owned(), args, self.principal.clone(), cx)?;
        let outcome = match self
            .relay
            .engine
            .call(call.engine_call(CallMode::Task))
            .await
        {
            Ok(outcome) => outcome,
            // Bad arguments: a tool error, and no task (tasks ext. § Task
            // Creation).
            Err(e) => {
                return match wire::argument_error(&e) {
                    Some(result) => Ok(CustomResult(Value::Object(result))),
                    None => Err(e.into()),
                };
            }
        };
        match outcome {
            CallOutcome::Task(record) => Ok(CustomResult(json!({"task": task_json(&record)}))),
            _ => Err(McpError::internal_error(
                "the call did not start a task",
                None,
            )),
        }
    }

    async fn task_get(
        &self,
        params: &Map<String, Value>,
        principal: Option<&str>,
    ) -> Result<CustomResult, McpError> {
        crate::metrics::poll();
        let record = self.relay.engine.get(task_id(params)?, principal).await?;
        Ok(CustomResult(task_json(&record)))
    }

    /// Waits for the task's outcome, asking its questions of the client on
    /// the way; answers exactly what the call would have.
    async fn task_result(
        &self,
        params: &Map<String, Value>,
        principal: Option<&str>,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let id = task_id(params)?;
        let record = self
            .relay
            .relay(id, principal, cx, OnCancel::Leave, Some(id))
            .await?;
        match record.status {
            TaskStatus::Completed => {
                let mut result = record.result.clone().unwrap_or_default();
                result.insert("_meta".into(), json!({RELATED_TASK: {"taskId": id}}));
                Ok(CustomResult(Value::Object(result)))
            }
            _ => Err(not_completed(&record, |status| {
                format!("task {id} ended `{status}` without a result")
            })),
        }
    }

    async fn task_list(
        &self,
        params: &Map<String, Value>,
        principal: Option<&str>,
    ) -> Result<CustomResult, McpError> {
        if principal.is_none() {
            return Err(McpError::new(
                ErrorCode::METHOD_NOT_FOUND,
                "tasks/list needs an identified requestor: this server binds no tasks to one",
                None,
            ));
        }
        let after = match params.get("cursor") {
            None | Some(Value::Null) => None,
            Some(c) => Some(decode_cursor(c)?),
        };
        let mut page = self
            .relay
            .engine
            .list(principal, after.as_ref(), PAGE + 1)
            .await?;
        let more = page.len() > PAGE;
        page.truncate(PAGE);
        let mut result = json!({"tasks": page.iter().map(task_json).collect::<Vec<_>>()});
        if more && let Some(last) = page.last() {
            let cursor = ListCursor::after(last);
            result["nextCursor"] = json!(format!("{}.{}", cursor.created_at_ms, cursor.id));
        }
        Ok(CustomResult(result))
    }

    async fn task_cancel(
        &self,
        params: &Map<String, Value>,
        principal: Option<&str>,
    ) -> Result<CustomResult, McpError> {
        let id = task_id(params)?;
        let engine = self.relay.engine;
        let before = engine.get(id, principal).await?;
        if before.status.is_terminal() {
            return Err(McpError::invalid_params(
                format!("task {id} is already {}", before.status.as_str()),
                None,
            ));
        }
        engine.cancel(id, principal).await?;
        // A running task stops at its next step; give it that long.
        let after = engine.wait(id, principal, CANCEL_WAIT).await?;
        Ok(CustomResult(task_json(&after)))
    }
}

fn decode_cursor(cursor: &Value) -> Result<ListCursor, McpError> {
    let invalid = || McpError::invalid_params("invalid cursor: pass back a `nextCursor`", None);
    let (at, id) = cursor
        .as_str()
        .and_then(|c| c.split_once('.'))
        .ok_or_else(invalid)?;
    Ok(ListCursor {
        created_at_ms: at.parse().map_err(|_| invalid())?,
        id: id.to_owned(),
    })
}
