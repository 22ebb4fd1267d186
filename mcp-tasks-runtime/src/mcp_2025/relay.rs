//! Plain calls of task tools, relayed in their session: the task's
//! questions asked of the client, its status reported as progress, the
//! call's cancellation the task's (see the module's docs).

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use futures::{StreamExt, stream::FuturesUnordered};
use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{CallToolResponse, ErrorCode, ProgressNotificationParam, ProgressToken, ServerRequest},
    service::{PeerRequestOptions, RequestContext, RequestHandle, ServiceError},
};
use serde_json::{Map, Value, json};

use super::detached::{Detached, Remembered, SessionEnd, join_scope};
use crate::{
    Engine,
    engine::{Call, CallMode, CallOutcome},
    error::RpcError,
    input::InputRequest,
    journal::PendingInput,
    mcp::{tool_call::ToolCall, wire},
    store::{TaskRecord, TaskStatus},
    tool::TaskPolicy,
};

/// What a relay does when the call it serves is cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OnCancel {
    /// Cancel the task (a plain call: the task is the call).
    CancelTask,
    /// Leave the task alone (a request that only waits for it).
    Leave,
}

/// Follows the tasks of a session's calls, asking their questions of the
/// client in the session.
#[derive(Debug, Clone, Copy)]
pub(super) struct Relay<'a> {
    pub(super) engine: &'a Engine,
    pub(super) detached: &'a Arc<Detached>,
}

impl Relay<'_> {
    /// A plain `tools/call` of a task tool.
    pub(super) async fn call(
        &self,
        call: ToolCall,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = &call.name;
        let policy = self
            .engine
            .registry()
            .get(name)
            .map(|t| t.descriptor().policy());
        if policy == Some(TaskPolicy::Required) {
            return Err(McpError::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!(
                    "tool `{name}` must run as a task: call it with `params.task` (MCP 2025-11-25 tasks)"
                ),
                None,
            ));
        }
        let principal = call.principal.clone();
        let scope = join_scope(principal.as_deref(), cx);
        // Only a digest of the call is kept (see `Detached`).
        let key = scope
            .as_ref()
            .map(|s| self.detached.digest(&call.binding(Some(&s.tag()))));
        if let (Some(scope), Some(key)) = (&scope, key)
            && let Some(id) = self.detached.get(key)
            && let Ok(task) = self.engine.get(&id, principal.as_deref()).await
            && !task.status.is_terminal()
        {
            let remembered = Remembered::new(self.detached, key, &id, scope, self.engine, cx);
            return self.relay_call(remembered, &id, principal, cx).await;
        }
        let mode = match policy {
            Some(TaskPolicy::Forbidden) => CallMode::Inline,
            _ => CallMode::Task,
        };
        let call = call.engine_call(mode);
        let outcome = match self.engine.call(call.clone()).await {
            Ok(outcome) => outcome,
            Err(e) => return wire::refused_call(&e),
        };
        match outcome {
            CallOutcome::Task(record) => {
                let remembered = match (&scope, key) {
                    (Some(scope), Some(key)) => {
                        self.detached.insert(key, record.id.clone());
                        Some(Remembered::new(
                            self.detached,
                            key,
                            &record.id,
                            scope,
                            self.engine,
                            cx,
                        ))
                    }
                    _ => None,
                };
                self.relay_call(remembered, &record.id, principal, cx).await
            }
            outcome => self.inline_rounds(call, outcome, cx).await,
        }
    }

    /// Relays the call's task to its end; the call is forgotten when the
    /// relay ends (see [`Remembered`]).
    async fn relay_call(
        &self,
        remembered: impl Into<Option<Remembered>>,
        id: &str,
        principal: Option<String>,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let _remembered = remembered.into();
        let record = self
            .relay(id, principal.as_deref(), cx, OnCancel::CancelTask, None)
            .await?;
        legacy_result(&record)
    }

    /// A `forbidden` tool: inline rounds, each round's questions asked of
    /// the client live.
    async fn inline_rounds(
        &self,
        call: Call,
        mut outcome: CallOutcome,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        loop {
            match outcome {
                CallOutcome::InputRequired { requests, journal } => {
                    let mut answers = Map::new();
                    for p in &requests {
                        // A question with a deadline is waited on until
                        // then; the next round finds it timed out.
                        if let Some(answer) = ask(cx, p, None, None).await? {
                            answers.insert(p.key.clone(), answer);
                        }
                    }
                    let next = call.clone().resume(journal, answers);
                    outcome = self.engine.call(next).await?;
                }
                CallOutcome::Finished(result) => return wire::call_result(result),
                CallOutcome::Task(record) => return legacy_result(&record),
            }
        }
    }

    /// Follows task `id` until it ends: asks its questions of the client,
    /// reports its status as progress, and acts on the call's cancellation.
    /// `related` tags each question with the task (SEP-1686).
    pub(super) async fn relay(
        &self,
        id: &str,
        principal: Option<&str>,
        cx: &RequestContext<RoleServer>,
        on_cancel: OnCancel,
        related: Option<&str>,
    ) -> Result<TaskRecord, McpError> {
        let engine = self.engine;
        // Declared before the receivers, so dropped after them.
        let _forget = ForgetWatch(engine, id);
        let mut rx = engine.subscribe(id, principal).await?;
        let mut progress = Progress::new(cx);
        let mut session = SessionEnd::of(cx);
        let session_closed = async {
            match &mut session {
                Some(end) => end.closed().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(session_closed);
        let mut asking = FuturesUnordered::new();
        let mut asked: HashSet<String> = HashSet::new();
        // Questions whose answer was refused (it did not fit the form), with
        // why: asked again, the reason before the question.
        let mut refused: HashMap<String, String> = HashMap::new();
        loop {
            let record = rx.borrow_and_update().clone();
            if record.status.is_terminal() {
                return Ok(record);
            }
            if record.status == TaskStatus::InputRequired {
                for p in record.pending.iter().filter(|p| p.is_open()) {
                    if asked.insert(p.key.clone()) {
                        let mut p = p.clone();
                        if let Some(why) = refused.remove(&p.key) {
                            p.request.prefix_message(&why);
                        }
                        let record = rx.clone();
                        asking.push(async move {
                            (p.key.clone(), ask(cx, &p, related, Some(record)).await)
                        });
                    }
                }
            }
            progress.report(cx, record.status_message.as_deref()).await;
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        // The watch ended (the task was purged): read what is left.
                        let last = engine.get(id, principal).await?;
                        return Ok(last);
                    }
                }
                Some((key, answer)) = asking.next() => {
                    // A question that left `inputRequests` meanwhile (it
                    // timed out, or was answered through `tasks/update`):
                    // what the client made of it no longer matters.
                    let outstanding = rx.borrow().pending.iter().any(|p| p.key == key && p.is_open());
                    // `None`: its deadline passed, and the task's timer
                    // times it out.
                    if outstanding && let Some(answer) = answer? {
                        engine
                            .update(id, Map::from_iter([(key.clone(), answer)]), principal)
                            .await
                            ?;
                        // Still outstanding: the answer did not fit, and the
                        // status message says why. Ask again.
                        let now = rx.borrow();
                        if now.pending.iter().any(|p| p.key == key && p.is_open()) {
                            let why = now.status_message.clone().unwrap_or_default();
                            drop(now);
                            asked.remove(&key);
                            refused.insert(key, why);
                        }
                    }
                }
                () = &mut session_closed => {
                    // The session was closed: no one is left to answer, and
                    // the task carries on (or stays parked) under the engine.
                    return Err(McpError::new(ErrorCode::INVALID_REQUEST, "the session was closed", None));
                }
                () = cx.ct.cancelled() => {
                    // Fired by `notifications/cancelled`, or by the session
                    // ending: only the first cancels the task.
                    if on_cancel == OnCancel::CancelTask && !cx.peer.is_transport_closed() {
                        let _ = engine.cancel(id, principal).await;
                    }
                    return Err(McpError::new(ErrorCode::INVALID_REQUEST, "the request was cancelled", None));
                }
            }
        }
    }
}

/// Drops what the engine keeps for watching a task (its latest record,
/// arguments and questions included) once a relay of it ends, however it
/// ends: the task may stay parked for long after its session went away, and
/// nothing else would let go of it before the task's next change.
struct ForgetWatch<'a>(&'a Engine, &'a str);

impl Drop for ForgetWatch<'_> {
    fn drop(&mut self) {
        self.0.forget_watch(self.1);
    }
}

/// Asks the client one question in the session and returns its answer as
/// the journal keeps it. A question with a deadline is waited on until just
/// after it, and a question of a task (`record`) until it leaves the task's
/// `inputRequests` (answered through `tasks/update`, timed out, or
/// withdrawn when another branch of its `select` won): then the request is
/// cancelled in the session (`notifications/cancelled`), so the client
/// stops showing it, and `None` comes back.
async fn ask(
    cx: &RequestContext<RoleServer>,
    question: &PendingInput,
    related: Option<&str>,
    record: Option<tokio::sync::watch::Receiver<TaskRecord>>,
) -> Result<Option<Value>, McpError> {
    let mut params = question.request.params();
    if let InputRequest::Url(_) = &question.request {
        // 2025-11-25 names each URL elicitation (`elicitationId`, unique
        // within the server); 2026-07-28 dropped the field.
        params.insert("elicitationId".into(), json!(crate::id::random_hex()));
    }
    if let Some(task) = related {
        params.insert(
            "_meta".into(),
            json!({"io.modelcontextprotocol/related-task": {"taskId": task}}),
        );
    }
    let request = json!({"method": question.request.method(), "params": params});
    let request: ServerRequest = serde_json::from_value(request).map_err(|e| {
        McpError::internal_error(
            format!(
                "question `{}` is not a valid MCP request: {e}",
                question.key
            ),
            None,
        )
    })?;
    // A millisecond past the deadline, so that what runs next finds it passed.
    let deadline = question.deadline_ms.map(|at| {
        let left = at.saturating_sub(crate::id::now_ms()).saturating_add(1);
        tokio::time::Instant::now() + Duration::from_millis(u64::try_from(left).unwrap_or(0))
    });
    let mut handle = match cx
        .peer
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
    {
        Ok(handle) => handle,
        Err(e) => return Err(asked_in_vain(question, &e)),
    };
    let key = question.key.clone();
    let withdrawn = async move {
        let Some(mut record) = record else {
            return std::future::pending().await;
        };
        loop {
            if !record
                .borrow_and_update()
                .pending
                .iter()
                .any(|p| p.key == key && p.is_open())
            {
                return;
            }
            if record.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    };
    let past_deadline = async move {
        match deadline {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    let why = tokio::select! {
        answer = &mut handle.rx => Err(answer.unwrap_or(Err(ServiceError::TransportClosed))),
        () = past_deadline => Ok(RequestHandle::<RoleServer>::REQUEST_TIMEOUT_REASON),
        () = withdrawn => Ok("the question was withdrawn"),
    };
    let answer = match why {
        Err(answer) => answer,
        Ok(reason) => {
            // Best effort: the session may be gone.
            let _ = handle.cancel(Some(reason.to_owned())).await;
            return Ok(None);
        }
    };
    // The handle's channel carries the client's answer or a transport or
    // peer error, never a timeout: the deadline is the `select!`'s above.
    let answer = answer.map_err(|e| asked_in_vain(question, &e))?;
    serde_json::to_value(answer)
        .map(Some)
        .map_err(|e| McpError::internal_error(format!("an unreadable answer: {e}"), None))
}

/// The error of a question the client did not answer.
fn asked_in_vain(question: &PendingInput, e: &ServiceError) -> McpError {
    McpError::internal_error(
        format!(
            "the client did not answer `{}` ({}): {e}",
            question.key,
            question.request.method()
        ),
        None,
    )
}

/// A finished task as a legacy `tools/call` result.
fn legacy_result(record: &TaskRecord) -> Result<CallToolResponse, McpError> {
    match record.status {
        TaskStatus::Completed => wire::call_result(Ok(record.result.clone().unwrap_or_default())),
        _ => Err(not_completed(record, |status| {
            format!("the call's task ended `{status}`")
        })),
    }
}

/// The error of a task that ended without completing: its own when it
/// failed, otherwise what `ended` says of its status.
pub(super) fn not_completed(record: &TaskRecord, ended: impl FnOnce(&str) -> String) -> McpError {
    match (record.status, &record.error) {
        (TaskStatus::Failed, Some(error)) => wire::rpc_error(error),
        (TaskStatus::Failed, None) => wire::rpc_error(&RpcError::internal("the task failed")),
        (status, _) => McpError::internal_error(ended(status.as_str()), None),
    }
}

/// `notifications/progress` for a call that asked for it: one step per new
/// status message.
struct Progress {
    token: Option<ProgressToken>,
    step: u32,
    last: Option<String>,
}

impl Progress {
    fn new(cx: &RequestContext<RoleServer>) -> Self {
        Self {
            token: cx.meta.get_progress_token(),
            step: 0,
            last: None,
        }
    }

    async fn report(&mut self, cx: &RequestContext<RoleServer>, message: Option<&str>) {
        let Some(token) = &self.token else { return };
        if message.is_none() || message == self.last.as_deref() {
            return;
        }
        self.last = message.map(str::to_owned);
        self.step += 1;
        let mut note = ProgressNotificationParam::new(token.clone(), f64::from(self.step));
        if let Some(m) = message {
            note = note.with_message(m);
        }
        let _ = cx.peer.notify_progress(note).await;
    }
}
