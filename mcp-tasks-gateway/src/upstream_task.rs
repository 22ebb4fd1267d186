//! A tool the upstream runs as a task.
//!
//! - 2025-11-25 (`execution.taskSupport: "required"`): called with
//!   `params.task`, the upstream's task followed with `tasks/get` (its
//!   `statusMessage` becomes the task's) while `tasks/result` waits for its
//!   end on the call's session, where the upstream also sends the questions
//!   the task asks.
//! - 2026-07-28 (the tasks extension): the upstream answers the call with a
//!   task of its own, which is followed with `tasks/get` alone: its status
//!   message becomes the task's, its questions (`input_required`) are asked
//!   as the gateway's own (parking the task) and answered upstream with
//!   `tasks/update`, and its inlined result or error ends the task.

use std::time::Duration;

use mcp_tasks_runtime::{
    checkpoint, durable,
    tool::{JsonObject, TaskPolicy},
};
use rmcp::{
    RoleClient,
    model::{ClientRequest, CustomRequest, ProtocolVersion, ServerResult},
    service::{Peer, PeerRequestOptions, ServiceError},
};
use serde_json::{Value, json};

use crate::{
    Inner,
    call::{self, Flight, Pending, Round},
    upstream::Taken,
};

/// The `_meta` key that ties a message to an upstream task.
pub(crate) const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// How long the gateway asks the upstream to keep a task (an hour; the
/// upstream may keep it less).
const TTL_MS: u64 = 60 * 60 * 1000;

/// How often the upstream task's status is read, unless its
/// `pollInterval` says otherwise (kept between 100 ms and 10 s).
const POLL: Duration = Duration::from_secs(1);

/// Whether the upstream declared `tool` to run only as a task.
pub(crate) fn required(inner: &Inner, tool: &str) -> bool {
    inner
        .definition(tool)
        .is_some_and(|t| crate::declared(&t) == Some(TaskPolicy::Required))
}

/// Whether the upstream refused a plain call because the tool runs only as
/// a task there (it must answer so, `-32601`, without running the tool; the
/// TypeScript SDK 1.x sends that error as the tool's error result).
pub(crate) fn refused(answer: &Result<ServerResult, ServiceError>) -> bool {
    let says = |text: &str| text.contains("-32601") && text.contains("task");
    match answer {
        Err(ServiceError::McpError(e)) => says(&format!("{} {}", e.code.0, e.message)),
        Ok(ServerResult::CallToolResult(result)) if result.is_error == Some(true) => {
            let result = serde_json::to_value(result).unwrap_or(Value::Null);
            let texts = result["content"].as_array().cloned().unwrap_or_default();
            texts.len() == 1 && texts[0]["text"].as_str().is_some_and(says)
        }
        _ => false,
    }
}

/// Whether the session speaks the era of the upstream tasks the gateway
/// follows (2025-11-25).
pub(crate) fn spoken(peer: &Peer<RoleClient>) -> bool {
    peer.peer_info()
        .is_some_and(|info| info.protocol_version == ProtocolVersion::V_2025_11_25)
}

fn request(method: &str, params: Value) -> ClientRequest {
    ClientRequest::CustomRequest(CustomRequest::new(method, Some(params)))
}

/// `tasks/cancel` of the upstream task `task`.
pub(crate) fn cancel(task: &str) -> ClientRequest {
    request("tasks/cancel", json!({ "taskId": task }))
}

/// A result as the upstream sent it (rmcp's types know the tasks of
/// 2026-07-28, not these: a `CreateTaskResult` of 2025-11-25 reaches here as
/// a custom result).
fn as_json(result: &ServerResult) -> Value {
    serde_json::to_value(result).unwrap_or(Value::Null)
}

/// How long to wait between two reads of a task's status: what its
/// `field` (`pollInterval` at 2025-11-25, `pollIntervalMs` at 2026-07-28)
/// asks, kept between 100 ms and 10 s, else `otherwise`.
fn interval(task: &Value, field: &str, otherwise: Duration) -> Duration {
    task.get(field)
        .and_then(Value::as_u64)
        .map_or(otherwise, |ms| {
            Duration::from_millis(ms).clamp(Duration::from_millis(100), Duration::from_secs(10))
        })
}

/// Shows the task's `statusMessage` as ours when it differs from the one
/// shown last.
fn show_status(task: &Value, shown: &mut Option<String>) {
    if let Some(message) = task.get("statusMessage").and_then(Value::as_str)
        && shown.as_deref() != Some(message)
    {
        durable::status(message);
        *shown = Some(message.to_owned());
    }
}

/// Calls `tool` as a task upstream on `session`, journals the upstream
/// task's id as `step` (taking it), and follows the task to its end.
pub(crate) async fn call(
    session: &Taken<'_>,
    flight: &mut Flight,
    tool: &str,
    arguments: &JsonObject,
    step: &mut Option<String>,
) -> Result<Round, String> {
    let params = json!({"name": tool, "arguments": arguments, "task": {"ttl": TTL_MS}});
    let handle = session
        .peer()
        .send_cancellable_request(
            request("tools/call", params),
            PeerRequestOptions::no_options(),
        )
        .await
        .map_err(|e| e.to_string())?;
    let mut pending = Pending::new(session, Some(handle.id.clone()));
    let answer = flight
        .wait(handle.await_response(), std::future::pending())
        .await;
    pending.id = None;
    let created = match &answer {
        Ok(result) => as_json(result),
        Err(_) => return call::answered(tool, answer),
    };
    let task = &created["task"];
    let Some(id) = task.get("taskId").and_then(Value::as_str) else {
        // An upstream that ran the call as it was answers it at once.
        return call::answered(tool, answer);
    };
    pending.task = Some(id.to_owned());
    if let Err(failed) = journal_id(step, id).await {
        return Ok(failed);
    }
    if let Some(message) = task.get("statusMessage").and_then(Value::as_str) {
        durable::status(message);
    }
    follow(
        session,
        flight,
        pending,
        tool,
        interval(task, "pollInterval", POLL),
    )
    .await
}

/// Follows the upstream task `pending` holds to its end: `tasks/result`
/// in flight (the questions the task asks come while it waits), its status
/// read beside it.
async fn follow(
    session: &Taken<'_>,
    flight: &mut Flight,
    mut pending: Pending,
    tool: &str,
    every: Duration,
) -> Result<Round, String> {
    let id = pending.task.clone().unwrap_or_default();
    let handle = session
        .peer()
        .send_cancellable_request(
            request("tasks/result", json!({ "taskId": id })),
            PeerRequestOptions::no_options(),
        )
        .await
        .map_err(|e| e.to_string())?;
    pending.id = Some(handle.id.clone());
    let answer = flight
        .wait(
            handle.await_response(),
            statuses(session.peer().clone(), id, every),
        )
        .await;
    pending.id = None;
    pending.task = None;
    call::answered(tool, answer)
}

/// Reads the upstream task's status every `every` (or as its
/// `pollInterval` says), and shows each new `statusMessage` as the task's.
async fn statuses(peer: Peer<RoleClient>, id: String, mut every: Duration) {
    let mut shown: Option<String> = None;
    loop {
        if let Ok(result) = peer
            .send_request(request("tasks/get", json!({ "taskId": id })))
            .await
        {
            let task = as_json(&result);
            every = interval(&task, "pollInterval", POLL);
            show_status(&task, &mut shown);
        }
        tokio::time::sleep(every).await;
    }
}

/// Journals the upstream task's id as `step` (taking it); what the call
/// comes to when it cannot be.
async fn journal_id(step: &mut Option<String>, id: &str) -> Result<(), Round> {
    let journaled = id.to_owned();
    let step = step.take().unwrap_or_default();
    checkpoint(step, move || async move { Ok(journaled) })
        .await
        .map(drop)
        .map_err(|e| {
            Round::Done(Err(mcp_tasks_runtime::tool::RpcError::internal(
                e.to_string(),
            )))
        })
}

/// Follows the 2026-07-28 task the upstream answered a call with
/// (`created`): journals its id as `step` (taking it), then reads it until
/// it ends.
pub(crate) async fn adopt(
    session: &Taken<'_>,
    flight: &mut Flight,
    tool: &str,
    created: &ServerResult,
    step: &mut Option<String>,
) -> Result<Round, String> {
    let created = as_json(created);
    let Some(id) = created.get("taskId").and_then(Value::as_str) else {
        return Err("the upstream's task has no id".to_owned());
    };
    let mut pending = Pending::new(session, None);
    pending.task = Some(id.to_owned());
    if let Err(failed) = journal_id(step, id).await {
        return Ok(failed);
    }
    poll(
        session,
        flight,
        pending,
        tool,
        interval(&created, "pollIntervalMs", POLL),
    )
    .await
}

/// Reads the 2026-07-28 upstream task `pending` holds (`tasks/get`) until
/// it ends, asking its questions as the task's own and answering them
/// upstream (`tasks/update`).
async fn poll(
    session: &Taken<'_>,
    flight: &mut Flight,
    mut pending: Pending,
    tool: &str,
    mut every: Duration,
) -> Result<Round, String> {
    let id = pending.task.clone().unwrap_or_default();
    let mut shown: Option<String> = None;
    loop {
        let task = session
            .peer()
            .send_request(request("tasks/get", json!({ "taskId": id })))
            .await
            .map_err(|e| e.to_string())?;
        let task = as_json(&task);
        every = interval(&task, "pollIntervalMs", every);
        show_status(&task, &mut shown);
        let done = match task.get("status").and_then(Value::as_str) {
            Some("completed") => match task.get("result") {
                Some(Value::Object(result)) => Ok(call::tool_result(result.clone())),
                _ => Err(mcp_tasks_runtime::tool::RpcError::internal(format!(
                    "the upstream's task of `{tool}` completed without a result"
                ))),
            },
            Some("failed") => Err(match serde_json::from_value(task["error"].clone()) {
                Ok(error) => call::rpc_error(error),
                Err(_) => mcp_tasks_runtime::tool::RpcError::internal(format!(
                    "the upstream's task of `{tool}` failed without saying why"
                )),
            }),
            Some("cancelled") => Err(mcp_tasks_runtime::tool::RpcError::internal(format!(
                "the upstream cancelled its task of `{tool}`"
            ))),
            Some("input_required") => {
                let requests = task
                    .get("inputRequests")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                let responses = match call::answers(tool, requests).await {
                    Ok(responses) => responses,
                    Err(e) => return Ok(Round::Done(Err(e))),
                };
                session
                    .peer()
                    .send_request(request(
                        "tasks/update",
                        json!({ "taskId": id, "inputResponses": responses }),
                    ))
                    .await
                    .map_err(|e| e.to_string())?;
                continue;
            }
            _ => {
                flight
                    .wait(tokio::time::sleep(every), std::future::pending())
                    .await;
                continue;
            }
        };
        pending.task = None;
        return Ok(Round::Done(done));
    }
}

/// Follows again, after the run that made it stopped, the upstream task
/// `id`: what the call came to, or `None` when the upstream no longer has
/// that task (the restart rule then applies).
pub(crate) async fn follow_again(inner: &Inner, tool: &str, id: &str) -> Option<Round> {
    let (events_to, events) = tokio::sync::mpsc::unbounded_channel();
    let session = inner.upstream.take(Some(events_to)).await.ok()?;
    let task = session
        .peer()
        .send_request(request("tasks/get", json!({ "taskId": id })))
        .await;
    let task = match task {
        Ok(task) => as_json(&task),
        Err(ServiceError::McpError(e)) => {
            tracing::info!(%id, error = %e.message, "the upstream no longer has the task");
            return None;
        }
        Err(_) => return None,
    };
    let mut flight = Flight::new(tool, events);
    let mut pending = Pending::new(&session, None);
    pending.task = Some(id.to_owned());
    if !spoken(session.peer()) {
        // 2026-07-28: read until it ends, its questions asked anew (the
        // journal answers those already answered).
        return poll(
            &session,
            &mut flight,
            pending,
            tool,
            interval(&task, "pollIntervalMs", POLL),
        )
        .await
        .ok();
    }
    durable::status(format!(
        "following `{tool}`'s upstream task again after the gateway stopped"
    ));
    follow(
        &session,
        &mut flight,
        pending,
        tool,
        interval(&task, "pollInterval", POLL),
    )
    .await
    .ok()
}
