//! Questions asked while the run goes on: [`ask_in_flight`].

use std::sync::Arc;

use serde_json::Value;

use super::{
    ask::AskError,
    context::{Recorder, TaskCtx, forever},
    scope::current,
};
use crate::{
    input::InputRequest,
    journal::{PendingInput, StepKind},
    store::Transition,
};

/// Asks the client `request` while the run goes on, and returns the
/// client's response as it came (for `elicitation/create`,
/// `{"action": "accept", "content": {…}}`; for `sampling/createMessage`, the
/// message; for `roots/list`, `{"roots": […]}`).
///
/// This is for code that waits on work it cannot stop and replay, which
/// itself needs an answer halfway: an upstream MCP server's call that sends
/// `elicitation/create` while it runs, say. [`ask_user`](crate::ask_user)
/// would park the task, which drops the fn and that work with it; this
/// keeps them. The task shows `input_required` with the question, under a
/// key of its own, while the run keeps its worker, its lease and every
/// future it awaits. The answer, given with `tasks/update` to any instance
/// sharing the store, reaches the run here, and the task is `working`
/// again.
///
/// What it does not do, by design:
///
/// - It is not journaled: a replay never sees it. A run that stops (a
///   restart, a lost lease) takes its questions away with it, and
///   the task runs again from its journal, on the first instance to claim
///   it, once the lease of the run that asked has lapsed.
/// - It has no deadline of its own: race it against a timer of the work
///   it serves (`tokio::time::timeout`), or drop it. Dropping the future
///   takes the question away.
/// - The run does not park while it waits: questions a fn asks with
///   [`ask_user`](crate::ask_user) at the same time are published once this
///   one is answered or dropped.
///
/// # Errors
///
/// [`AskError::NoTask`] outside a task's run (a plain call that runs inline,
/// without a task, included: it has no stored task to show the question
/// on); [`AskError::Unsupported`] when the calling client did not declare
/// the capability the question needs.
///
/// ```
/// use mcp_tasks_runtime::{
///     ToolError, durable,
///     question::{FormRequest, InputRequest},
///     task_tool,
/// };
///
/// #[task_tool]
/// async fn relay_question() -> Result<String, ToolError> {
///     let schema = serde_json::json!({
///         "type": "object",
///         "properties": {"region": {"type": "string"}},
///     });
///     let form = InputRequest::Form(FormRequest {
///         message: "Which region?".into(),
///         requested_schema: schema.as_object().cloned().unwrap_or_default(),
///     });
///     let answer = durable::ask_in_flight(form)
///         .await
///         .map_err(|e| ToolError::new(e.to_string()))?;
///     Ok(answer["content"]["region"].as_str().unwrap_or("none").to_owned())
/// }
/// ```
pub async fn ask_in_flight(request: InputRequest) -> Result<Value, AskError> {
    let ctx = current().ok_or(AskError::NoTask)?;
    // A call run inline within its window becomes its task now: the
    // question needs one to wait in.
    if ctx.recorder().is_none() && ctx.become_task_now() {
        ctx.became().await;
    }
    let (Some(recorder), Some(mut record), Some(&(_, fence))) =
        (ctx.recorder().cloned(), ctx.record().cloned(), ctx.holder())
    else {
        return Err(AskError::NoTask);
    };
    if !ctx.run.caps.allows(&request) {
        return Err(AskError::Unsupported(request.capability()));
    }
    if ctx.stopping() {
        forever().await;
    }
    let kind = match &request {
        InputRequest::Sample(_) => StepKind::Sample,
        InputRequest::ListRoots => StepKind::Roots,
        _ => StepKind::Ask,
    };
    let key = ctx.in_flight_key(kind, fence);
    let question = PendingInput {
        key: key.clone(),
        position: 0,
        kind,
        name: String::new(),
        request,
        deadline_ms: None,
        race: None,
        in_flight: true,
        answer: None,
    };
    let mut asking = Asking::enter(&ctx, recorder.clone(), key.clone());
    let task = ctx.task_id().to_owned();
    let Some(asked) = recorder
        .transition(&task, Transition::AskInFlight(vec![question]))
        .await
    else {
        // Refused: the task is ending, its cancel was requested, or the
        // run no longer holds it. The run stops; what it does then is the
        // runner's to say.
        asking.key = None;
        drop(asking);
        forever().await;
    };
    loop {
        // `Some(None)`: still waiting; `None`: gone from a record at least
        // as new as the one that asked it (the task ended, or another
        // instance took it over).
        let state = {
            let now = record.borrow_and_update();
            match now.pending.iter().find(|p| p.key == key) {
                Some(p) => Some(p.answer.clone()),
                None if now.version >= asked.version => None,
                None => Some(None),
            }
        };
        match state {
            Some(Some(answer)) => return Ok(answer),
            Some(None) => {}
            None => {
                asking.key = None;
                drop(asking);
                forever().await;
            }
        }
        if record.changed().await.is_err() {
            forever().await;
        }
    }
}

/// A question in flight as its run counts it: the run does not park or
/// sleep while one is asked, and the question is taken away when this is
/// dropped (answered or not).
struct Asking {
    ctx: Arc<TaskCtx>,
    recorder: Arc<dyn Recorder>,
    /// The question's key, while the stored task may hold it.
    key: Option<String>,
}

impl Asking {
    fn enter(ctx: &Arc<TaskCtx>, recorder: Arc<dyn Recorder>, key: String) -> Self {
        ctx.lock().asking += 1;
        Self {
            ctx: ctx.clone(),
            recorder,
            key: Some(key),
        }
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        if let Some(key) = self.key.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let withdrawn = self
                .recorder
                .transition(self.ctx.task_id(), Transition::Withdraw(vec![key]));
            runtime.spawn(withdrawn);
        }
        self.ctx.lock().asking -= 1;
        self.ctx.waker.wake();
    }
}
