//! One upstream call, run as a task: its rounds (an upstream that answers
//! `InputRequiredResult` is asked again with the client's answers), the
//! questions relayed, and the restart rule.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use futures::{StreamExt, stream::FuturesUnordered};
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
    upstream::{Event, Spender},
};

/// How many `InputRequiredResult` rounds one call may take.
const MAX_ROUNDS: u32 = 32;

/// What one round of the call came to.
enum Round {
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
        if !live {
            // A replay: the round's answer is journaled, or the call was in
            // flight when the run stopped (a restart, a lost lease).
            let known = checkpoint(answered, || async { Ok(Value::Null) })
                .await
                .map_err(|e| RpcError::internal(e.to_string()))?;
            if let Value::Object(asked) = known {
                return Ok(Round::Asked(asked));
            }
            if !inner.repeats(tool) {
                return Err(not_repeated(tool));
            }
            durable::status(format!(
                "calling `{tool}` again: the gateway stopped while it ran upstream, and it is safe to repeat"
            ));
            continue;
        }
        match call(inner, tool, arguments, again).await {
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
async fn answers(tool: &str, requests: JsonObject) -> Result<JsonObject, RpcError> {
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
/// failed before an answer came.
async fn call(
    inner: &Arc<Inner>,
    tool: &str,
    arguments: &JsonObject,
    again: Option<&(JsonObject, Option<String>)>,
) -> Result<Round, String> {
    let lost = |e: &dyn std::fmt::Display| e.to_string();
    let (events_to, mut events) = mpsc::unbounded_channel();
    let session = inner
        .upstream
        .take(Some(events_to))
        .await
        .map_err(|e| lost(&e))?;
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
    let mut pending = Pending {
        peer: handle.peer.clone(),
        id: Some(handle.id.clone()),
        session: session.spender(),
    };
    let response = handle.await_response();
    tokio::pin!(response);
    // Questions the upstream asks while the call runs, each waiting for
    // the client's answer with the call still in flight.
    let mut asking = FuturesUnordered::new();
    let answer = loop {
        tokio::select! {
            answer = &mut response => break answer,
            Some(event) = events.recv() => match event {
                Event::Progress(step) => durable::status(progress_line(&step)),
                Event::Ask(request, reply) => asking.push(relay(tool, request, reply)),
            },
            Some(()) = asking.next(), if !asking.is_empty() => {}
        }
    };
    pending.id = None;
    drop(session);
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
        Err(ServiceError::McpError(e)) => {
            let error = RpcError::new(i64::from(e.code.0), e.message);
            Round::Done(Err(match e.data {
                Some(data) => error.with_data(data),
                None => error,
            }))
        }
        Err(e) => return Err(lost(&e)),
    })
}

/// Asks the call's client a question the upstream sent while the call
/// runs, and hands its answer back upstream.
async fn relay(tool: &str, request: Value, reply: oneshot::Sender<Result<Value, McpError>>) {
    let method = request["method"].as_str().unwrap_or("?").to_owned();
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
fn tool_result(mut result: JsonObject) -> JsonObject {
    result.remove("resultType");
    if let Some(Value::Object(meta)) = result.get_mut("_meta") {
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
    session: Spender,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        self.session.spend();
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
