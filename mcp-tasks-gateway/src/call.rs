//! One upstream call, run as a task: its rounds (an upstream that answers
//! `InputRequiredResult` is asked again with the client's answers), the
//! questions relayed, and the restart rule.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use futures::{FutureExt, StreamExt, future::BoxFuture, stream::FuturesUnordered};
use mcp_tasks_runtime::{
    checkpoint, durable,
    question::{self, AskError, InputRequest},
    tool::{JsonObject, RpcError, ToolOutcome},
};
use rmcp::{
    ErrorData as McpError, RoleClient,
    model::{
        CallToolRequestParams, CancelledNotificationParam, ClientRequest,
        ProgressNotificationParam, Request, RequestId, ServerResult,
    },
    service::{Peer, PeerRequestOptions, ServiceError},
};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::{
    Inner,
    upstream::{Event, Spender, Taken},
    upstream_task,
};

/// How many `InputRequiredResult` rounds one call may take.
pub(crate) const MAX_ROUNDS: u32 = 32;

/// What one round of the call came to.
pub(crate) enum Round {
    /// The task ends with this.
    Done(ToolOutcome),
    /// The upstream asks these questions (its `InputRequiredResult`), and
    /// is to be called again with their answers.
    Asked(JsonObject),
}

/// Calls `tool` upstream with `arguments`, relaying the questions it asks,
/// and ends the task with what it answers, under the restart rule (see the
/// crate's docs).
pub(crate) async fn run(inner: Arc<Inner>, tool: String, arguments: JsonObject) -> ToolOutcome {
    let mut again: Option<(JsonObject, Option<String>)> = None;
    for round in 1..=MAX_ROUNDS {
        let asked = match one_round(&inner, &tool, &arguments, round, again.as_ref()).await? {
            Round::Done(outcome) => return outcome,
            Round::Asked(asked) => asked,
        };
        let state = asked
            .get("requestState")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let requests = asked
            .get("inputRequests")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        again = Some((answers(&tool, requests).await?, state));
    }
    Err(RpcError::internal(format!(
        "the upstream asked for input {MAX_ROUNDS} times in one call of `{tool}`: given up"
    )))
}

/// Round `round` of the call: each attempt journals that it started before
/// it is sent, and the round's `InputRequiredResult` is journaled before its
/// questions are asked, so a replay takes the same path and calls the
/// upstream only where no answer of it is known.
async fn one_round(
    inner: &Arc<Inner>,
    tool: &str,
    arguments: &JsonObject,
    round: u32,
    again: Option<&(JsonObject, Option<String>)>,
) -> Result<Round, RpcError> {
    let mut lost_here = false;
    for attempt in 1u32.. {
        let live = mark(format!("upstream call started ({round}.{attempt})")).await?;
        let answered = format!("upstream answered ({round}.{attempt})");
        // The id of the task the call made upstream (a tool that runs only
        // as a task there), or that there is none.
        let task_step = format!("upstream task ({round}.{attempt})");
        if !live {
            // The upstream task the call made, followed again if the
            // upstream still has it.
            let known = checkpoint(task_step, || async { Ok(Value::Null) })
                .await
                .map_err(|e| RpcError::internal(e.to_string()))?;
            let gone = match known {
                Value::String(id) => match upstream_task::follow_again(inner, tool, &id).await {
                    Some(done) => return Ok(done),
                    None => Some(id),
                },
                _ => None,
            };
            // A replay: the round's answer is journaled, or the call was in
            // flight when the run stopped (a restart, a lost lease).
            let known = checkpoint(answered, || async { Ok(Value::Null) })
                .await
                .map_err(|e| RpcError::internal(e.to_string()))?;
            if let Value::Object(asked) = known {
                return Ok(Round::Asked(asked));
            }
            if !inner.repeats(tool) {
                let why = not_repeated(tool);
                return Err(match gone {
                    Some(id) => RpcError::internal(format!(
                        "{}; the upstream no longer has the task the call made there ({id})",
                        why.message
                    )),
                    None => why,
                });
            }
            durable::status(format!(
                "calling `{tool}` again: the gateway stopped while it ran upstream, and it is safe to repeat"
            ));
            continue;
        }
        match call(inner, tool, arguments, again, task_step).await {
            Ok(Round::Asked(asked)) => {
                let asked = checkpoint(answered, move || async move { Ok(asked) })
                    .await
                    .map_err(|e| RpcError::internal(e.to_string()))?;
                return Ok(Round::Asked(asked));
            }
            Ok(done) => return Ok(done),
            // A connection lost mid-call leaves it unknown whether the
            // upstream ran it, as a restart does: the same rule, once a run.
            Err(why) if !lost_here && inner.repeats(tool) => {
                lost_here = true;
                checkpoint(answered, || async { Ok(Value::Null) })
                    .await
                    .map_err(|e| RpcError::internal(e.to_string()))?;
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
    unreachable!("the attempts of a round end by returning")
}

/// Journals `name` as a step with no value: whether this run reached it
/// live (`false`: a replay found it journaled).
async fn mark(name: String) -> Result<bool, RpcError> {
    let live = Arc::new(AtomicBool::new(false));
    let marked = live.clone();
    checkpoint(name, move || async move {
        marked.store(true, Ordering::SeqCst);
        Ok(())
    })
    .await
    .map_err(|e| RpcError::internal(e.to_string()))?;
    Ok(live.load(Ordering::SeqCst))
}

/// Asks the client the questions of an `InputRequiredResult` (parking the
/// task until they are answered), under the upstream's own keys where the
/// task has not used them; their answers, by the upstream's keys.
pub(crate) async fn answers(tool: &str, requests: JsonObject) -> Result<JsonObject, RpcError> {
    let mut asked = Vec::new();
    for (key, request) in requests {
        let request: InputRequest = serde_json::from_value(request).map_err(|e| {
            RpcError::internal(format!(
                "the upstream asked `{key}` in a call of `{tool}` with a request that is not \
                 one: {e}"
            ))
        })?;
        asked.push(async move {
            let answer = question::ask(request).key(key.clone()).await;
            (key, answer)
        });
    }
    let mut answers = JsonObject::new();
    for (key, answer) in futures::future::join_all(asked).await {
        match answer {
            Ok(answer) => {
                answers.insert(key, answer);
            }
            Err(e) => return Err(unanswerable(tool, &key, &e)),
        }
    }
    Ok(answers)
}

fn unanswerable(tool: &str, key: &str, e: &AskError) -> RpcError {
    RpcError::internal(format!(
        "the upstream asked `{key}` in a call of `{tool}`, and it could not be asked: {e}"
    ))
}

/// One call of `tool` upstream: what it came to, or why the connection
/// failed before an answer came. Journals as `task_step` the id of the task
/// the call made upstream, or `null` when it made none (or it is unknown
/// whether it did) and the task goes on.
async fn call(
    inner: &Arc<Inner>,
    tool: &str,
    arguments: &JsonObject,
    again: Option<&(JsonObject, Option<String>)>,
    task_step: String,
) -> Result<Round, String> {
    let mut step = Some(task_step);
    let round = call_once(inner, tool, arguments, again, &mut step).await;
    // The call's end ends the task: nothing after it is replayed, and a
    // replay that finds no step here takes it as no task made upstream.
    if matches!(round, Ok(Round::Done(_))) {
        return round;
    }
    if let Some(step) = step
        && let Err(e) = checkpoint(step, || async { Ok(Value::Null) }).await
    {
        return Ok(Round::Done(Err(RpcError::internal(e.to_string()))));
    }
    round
}

/// [`call`], which takes `step` when it journals an upstream task's id.
async fn call_once(
    inner: &Arc<Inner>,
    tool: &str,
    arguments: &JsonObject,
    again: Option<&(JsonObject, Option<String>)>,
    step: &mut Option<String>,
) -> Result<Round, String> {
    let lost = |e: &dyn std::fmt::Display| e.to_string();
    let (events_to, events) = mpsc::unbounded_channel();
    let session = inner
        .upstream
        .take(Some(events_to))
        .await
        .map_err(|e| lost(&e))?;
    let mut flight = Flight::new(tool, events);
    let tasks = upstream_task::spoken(session.peer());
    if tasks && upstream_task::required(inner, tool) {
        return upstream_task::call(&session, &mut flight, tool, arguments, step).await;
    }
    let mut params = json!({"name": tool, "arguments": arguments});
    if let Some((responses, state)) = again {
        params["inputResponses"] = Value::Object(responses.clone());
        if let Some(state) = state {
            params["requestState"] = json!(state);
        }
    }
    let params: CallToolRequestParams = match serde_json::from_value(params) {
        Ok(params) => params,
        Err(e) => {
            let why = format!("the call to `{tool}` could not be built: {e}");
            return Ok(Round::Done(Err(RpcError::internal(why))));
        }
    };
    let request = ClientRequest::CallToolRequest(Request::new(params));
    let handle = session
        .peer()
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .map_err(|e| lost(&e))?;
    let mut pending = Pending::new(&session, Some(handle.id.clone()));
    let answer = flight
        .wait(handle.await_response(), std::future::pending())
        .await;
    pending.id = None;
    if tasks && upstream_task::refused(&answer) {
        // Refused without running: the tool runs only as a task upstream.
        return upstream_task::call(&session, &mut flight, tool, arguments, step).await;
    }
    if let Ok(created @ ServerResult::CreateTaskResult(_)) = &answer {
        // A 2026-07-28 upstream runs it as a task of its own.
        return upstream_task::adopt(&session, &mut flight, tool, created, step).await;
    }
    answered(tool, answer)
}

/// What the upstream's answer to a call (or to `tasks/result`, which
/// answers as the call would have) comes to.
pub(crate) fn answered(
    tool: &str,
    answer: Result<ServerResult, ServiceError>,
) -> Result<Round, String> {
    Ok(match answer {
        Ok(ServerResult::CallToolResult(result)) => {
            Round::Done(match serde_json::to_value(result) {
                Ok(Value::Object(result)) => Ok(tool_result(result)),
                _ => Err(RpcError::internal(format!(
                    "the upstream's result of `{tool}` does not serialize"
                ))),
            })
        }
        Ok(ServerResult::InputRequiredResult(asked)) => match serde_json::to_value(asked) {
            Ok(Value::Object(asked)) => Round::Asked(asked),
            _ => Round::Done(Err(RpcError::internal(format!(
                "the upstream's questions in a call of `{tool}` do not serialize"
            )))),
        },
        Ok(_) => Round::Done(Err(RpcError::internal(format!(
            "the upstream answered `{tool}` with something other than a CallToolResult"
        )))),
        Err(ServiceError::McpError(e)) => Round::Done(Err(rpc_error(e))),
        Err(e) => return Err(e.to_string()),
    })
}

/// The upstream's JSON-RPC error, as the task's.
pub(crate) fn rpc_error(e: McpError) -> RpcError {
    let error = RpcError::new(i64::from(e.code.0), e.message);
    match e.data {
        Some(data) => error.with_data(data),
        None => error,
    }
}

/// A call in flight on its session: what the upstream sends on it, and the
/// questions it asked that wait for the client's answer (the call still in
/// flight).
pub(crate) struct Flight {
    tool: String,
    events: mpsc::UnboundedReceiver<Event>,
    asking: FuturesUnordered<BoxFuture<'static, ()>>,
}

impl Flight {
    pub(crate) fn new(tool: &str, events: mpsc::UnboundedReceiver<Event>) -> Self {
        Self {
            tool: tool.to_owned(),
            events,
            asking: FuturesUnordered::new(),
        }
    }

    /// Waits for `response`, relaying meanwhile what the upstream sends
    /// for the call: its progress becomes the task's `statusMessage`, its
    /// questions are asked in flight. `beside` runs alongside until it
    /// ends. Questions still unanswered when `response` comes wait for the
    /// next `wait`, or are withdrawn with the flight.
    pub(crate) async fn wait<T>(
        &mut self,
        response: impl Future<Output = T>,
        beside: impl Future<Output = ()>,
    ) -> T {
        tokio::pin!(response);
        let beside = beside.fuse();
        tokio::pin!(beside);
        loop {
            tokio::select! {
                answer = &mut response => break answer,
                Some(event) = self.events.recv() => match event {
                    Event::Progress(step) => durable::status(progress_line(&step)),
                    // A task has no client to log to while it runs.
                    Event::Log(message) => tracing::debug!(?message, "the upstream logs"),
                    Event::Ask(request, reply) => {
                        self.asking.push(Box::pin(relay(self.tool.clone(), request, reply)));
                    }
                },
                Some(()) = self.asking.next(), if !self.asking.is_empty() => {}
                () = &mut beside => {}
            }
        }
    }
}

/// Asks the call's client a question the upstream sent while the call
/// runs, and hands its answer back upstream.
async fn relay(tool: String, mut request: Value, reply: oneshot::Sender<Result<Value, McpError>>) {
    let method = request["method"].as_str().unwrap_or("?").to_owned();
    // The upstream task it belongs to is the gateway's business, not the
    // client's (the client sees the gateway's task).
    if let Some(Value::Object(meta)) = request.pointer_mut("/params/_meta") {
        meta.remove(upstream_task::RELATED_TASK);
    }
    tracing::debug!(%method, "the upstream asks while the call runs");
    let answer = match serde_json::from_value::<InputRequest>(request) {
        Ok(request) => durable::ask_in_flight(request).await.map_err(|e| match e {
            AskError::Unsupported(_) | AskError::NoTask => McpError::invalid_request(
                format!(
                    "{method}: the gateway's client for this call of `{tool}` cannot answer it \
                     ({e})"
                ),
                None,
            ),
            e => McpError::internal_error(format!("{method}: {e}"), None),
        }),
        Err(e) => Err(McpError::invalid_params(
            format!("{method}: not a request the gateway can relay: {e}"),
            None,
        )),
    };
    tracing::debug!(%method, answered = answer.is_ok(), "relayed");
    let _ = reply.send(answer);
}

/// The upstream's `CallToolResult` without what belongs to its response
/// rather than to the tool (`resultType`, and the protocol's own keys in
/// `_meta`, such as the upstream's `serverInfo`): the gateway's response
/// carries its own.
pub(crate) fn tool_result(mut result: JsonObject) -> JsonObject {
    result.remove("resultType");
    strip_protocol_meta(&mut result);
    result
}

/// Removes the protocol's own keys from a result's `_meta` (the upstream's
/// `serverInfo`, say): the gateway's response carries its own.
pub(crate) fn strip_protocol_meta(result: &mut JsonObject) {
    if let Some(Value::Object(meta)) = result.get_mut("_meta") {
        meta.retain(|key, _| !key.starts_with("io.modelcontextprotocol/"));
        if meta.is_empty() {
            result.remove("_meta");
        }
    }
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

/// The upstream request in flight, and the upstream task the call made:
/// dropped before the call ended (the task was cancelled, or its run
/// stopped), it tells the upstream with `notifications/cancelled`, and
/// cancels the upstream task (`tasks/cancel`) when the client cancelled the
/// task. A run that stopped otherwise (a lost lease, a shutdown) leaves the
/// upstream task to the replay that follows it.
pub(crate) struct Pending {
    peer: Peer<RoleClient>,
    pub(crate) id: Option<RequestId>,
    pub(crate) task: Option<String>,
    session: Spender,
}

impl Pending {
    pub(crate) fn new(session: &Taken<'_>, id: Option<RequestId>) -> Self {
        Self {
            peer: session.peer().clone(),
            id,
            task: None,
            session: session.spender(),
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let request = self.id.take();
        let task = self.task.take().filter(|_| durable::cancelled());
        if request.is_none() && task.is_none() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.session.spend();
            return;
        };
        let peer = self.peer.clone();
        let farewell = runtime.spawn(async move {
            if let Some(task) = task {
                let _ = peer.send_request(upstream_task::cancel(&task)).await;
            }
            if let Some(id) = request {
                let cancelled = CancelledNotificationParam::new(
                    Some(id),
                    Some("the task was cancelled, or its run stopped".to_owned()),
                );
                let _ = peer.notify_cancelled(cancelled).await;
            }
        });
        self.session.spend_after(farewell);
    }
}
