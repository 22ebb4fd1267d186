//! One upstream call, run as a task's one step.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use mcp_tasks_runtime::{
    checkpoint, durable,
    tool::{JsonObject, RpcError, ToolOutcome},
};
use rmcp::{
    RoleClient,
    model::{
        CallToolRequestParams, CancelledNotificationParam, ClientRequest,
        ProgressNotificationParam, ProgressToken, Request, RequestId, ServerResult,
    },
    service::{Peer, PeerRequestOptions, ServiceError},
};
use tokio::sync::mpsc;

use crate::Inner;

/// Calls `tool` upstream with `arguments` and ends the task with what it
/// answers, under the restart rule (see the crate's docs).
pub(crate) async fn run(inner: Arc<Inner>, tool: String, arguments: JsonObject) -> ToolOutcome {
    // Journaled before the call is sent: a replay that finds it did not
    // send it, and cannot know whether the upstream ran it.
    let first = Arc::new(AtomicBool::new(false));
    let marked = first.clone();
    checkpoint("upstream call started", move || async move {
        marked.store(true, Ordering::SeqCst);
        Ok(())
    })
    .await
    .map_err(|e| RpcError::internal(e.to_string()))?;
    if !first.load(Ordering::SeqCst) {
        if !inner.repeats(&tool) {
            return Err(not_repeated(&tool));
        }
        durable::status(format!(
            "calling `{tool}` again: the gateway stopped while it ran upstream, and it is safe to repeat"
        ));
    }
    // A connection lost mid-call leaves it unknown whether the upstream ran
    // it, as a restart does: the same rule, once.
    let mut repeated = false;
    loop {
        match call(&inner, &tool, &arguments).await {
            Ok(outcome) => return outcome,
            Err(why) if !repeated && inner.repeats(&tool) => {
                repeated = true;
                durable::status(format!(
                    "calling `{tool}` again: the connection to the upstream was lost while it \
                     ran ({why}), and it is safe to repeat"
                ));
            }
            Err(why) => {
                return Err(RpcError::internal(format!(
                    "the connection to the upstream {} failed while `{tool}` ran: {why}; the \
                     call may or may not have run there",
                    inner.upstream.upstream()
                )));
            }
        }
    }
}

/// One call of `tool` upstream: the task's outcome, or why the connection
/// failed before an answer came.
async fn call(
    inner: &Arc<Inner>,
    tool: &str,
    arguments: &JsonObject,
) -> Result<ToolOutcome, String> {
    let lost = |e: &dyn std::fmt::Display| e.to_string();
    let peer = inner.upstream.peer().await.map_err(|e| lost(&e))?;
    let params: CallToolRequestParams = match serde_json::from_value(serde_json::json!({
        "name": tool,
        "arguments": arguments,
    })) {
        Ok(params) => params,
        Err(e) => {
            let why = format!("the call to `{tool}` could not be built: {e}");
            return Ok(Err(RpcError::internal(why)));
        }
    };
    let request = ClientRequest::CallToolRequest(Request::new(params));
    let handle = peer
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .map_err(|e| lost(&e))?;
    let (progress_to, mut progress) = mpsc::unbounded_channel();
    inner
        .upstream
        .relay
        .follow(handle.progress_token.clone(), progress_to);
    let mut pending = Pending {
        peer: handle.peer.clone(),
        id: Some(handle.id.clone()),
        token: handle.progress_token.clone(),
        inner: inner.clone(),
    };
    let response = handle.await_response();
    tokio::pin!(response);
    let answer = loop {
        tokio::select! {
            answer = &mut response => break answer,
            Some(step) = progress.recv() => durable::status(progress_line(&step)),
        }
    };
    pending.id = None;
    Ok(match answer {
        Ok(ServerResult::CallToolResult(result)) => match serde_json::to_value(result) {
            Ok(serde_json::Value::Object(result)) => Ok(tool_result(result)),
            _ => Err(RpcError::internal(format!(
                "the upstream's result of `{tool}` does not serialize"
            ))),
        },
        Ok(_) => Err(RpcError::internal(format!(
            "the upstream answered `{tool}` with something other than a CallToolResult"
        ))),
        Err(ServiceError::McpError(e)) => {
            let error = RpcError::new(i64::from(e.code.0), e.message);
            Err(match e.data {
                Some(data) => error.with_data(data),
                None => error,
            })
        }
        Err(e) => return Err(lost(&e)),
    })
}

/// The upstream's `CallToolResult` without what belongs to its response
/// rather than to the tool (`resultType`, and the protocol's own keys in
/// `_meta`, such as the upstream's `serverInfo`): the gateway's response
/// carries its own.
fn tool_result(mut result: JsonObject) -> JsonObject {
    result.remove("resultType");
    if let Some(serde_json::Value::Object(meta)) = result.get_mut("_meta") {
        meta.retain(|key, _| !key.starts_with("io.modelcontextprotocol/"));
        if meta.is_empty() {
            result.remove("_meta");
        }
    }
    result
}

/// The failure of a call that may have run upstream and is not repeated.
fn not_repeated(tool: &str) -> RpcError {
    RpcError::internal(format!(
        "the gateway stopped while `{tool}` ran upstream: the call may or may not have run \
         there, and it was not repeated because `{tool}` does not declare `idempotentHint: \
         true` and the gateway's operator did not list it as safe to repeat"
    ))
}

/// A task's `statusMessage` for one progress notification: `3/5: copying`.
fn progress_line(p: &ProgressNotificationParam) -> String {
    let count = match p.total {
        Some(total) => format!("{}/{}", p.progress, total),
        None => format!("{}", p.progress),
    };
    match &p.message {
        Some(message) => format!("{count}: {message}"),
        None => count,
    }
}

/// The upstream call in flight: dropped before its answer came (the task
/// was cancelled, or lost its lease), it tells the upstream with
/// `notifications/cancelled`.
struct Pending {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
    token: ProgressToken,
    inner: Arc<Inner>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.inner.upstream.relay.forget(&self.token);
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        let cancelled = CancelledNotificationParam::new(
            Some(id),
            Some("the task was cancelled, or its run stopped".to_owned()),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = peer.notify_cancelled(cancelled).await;
            });
        }
    }
}
