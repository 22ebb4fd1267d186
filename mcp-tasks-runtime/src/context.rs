//! The task-local journal cursor behind [`checkpoint`], [`ask_user`], [`status`]
//! and friends.
//!
//! A tool fn runs inside a task context. Every journaled step takes the next
//! journal position when it is *called*. On a live run the step does its work
//! and records the value durably before returning it; on replay it returns the
//! recorded value without doing the work. A step that must wait (an unanswered
//! question, a durable timer) or must stop (cancellation, a diverged history)
//! *suspends* the fn: its future never completes, and the runner drops it as
//! soon as no checkpoint is in flight, then parks or ends the task. A parked
//! task therefore holds no future and no worker.
//!
//! Outside a task (a plain unit test of the fn) the steps run live and record
//! nothing; questions fail with [`AskError::NoTask`].

use std::{
    collections::BTreeMap,
    fmt,
    future::Future,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use futures::task::AtomicWaker;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};

use crate::{
    elicit::Elicit,
    error::RpcError,
    input::{FormRequest, InputCapabilities, InputRequest},
    journal::{JournalEntry, PendingInput, StepKind},
};

tokio::task_local! {
    static CTX: Scope;
}

/// What a task's code sees: its context, and whether it runs inside a
/// checkpoint's closure (where steps are not journaled: the checkpoint's value
/// covers them, and a replay never runs them).
#[derive(Clone)]
struct Scope {
    ctx: Arc<TaskCtx>,
    nested: bool,
}

/// Why a question to the client got no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AskError {
    /// The user declined (`action: "decline"`).
    #[error("the user declined the request")]
    Declined,
    /// The user dismissed the request (`action: "cancel"`).
    #[error("the user cancelled the request")]
    Cancelled,
    /// The answer did not fit the requested form.
    #[error("the answer does not fit the form: {0}")]
    InvalidAnswer(String),
    /// The calling client did not declare the capability (elicitation,
    /// sampling or roots) this question needs.
    #[error("the client does not support {0}")]
    Unsupported(&'static str),
    /// Called outside a running task (for example in a unit test of the fn).
    #[error("not running inside a task")]
    NoTask,
    /// The question itself is malformed (say, sampling params that are not
    /// a JSON object); it was not sent.
    #[error("the question is malformed: {0}")]
    InvalidRequest(String),
}

/// Why a run stopped before the fn returned.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Suspend {
    /// Waiting for answers to these requests.
    Park(Vec<PendingInput>),
    /// Sleeping until this time (Unix ms).
    Sleep(i64),
    /// The run must end `failed` with this error.
    Fail(RpcError),
}

/// Where live steps record their values.
pub(crate) trait Recorder: Send + Sync + 'static {
    /// Records `entry` durably; `Err` fails the task.
    fn record(
        &self,
        task_id: &str,
        entry: JournalEntry,
    ) -> futures::future::BoxFuture<'static, Result<(), RpcError>>;
    /// Sets the status message (ordered, best effort).
    fn status(&self, task_id: &str, message: String);
}

pub(crate) struct TaskCtx {
    pub(crate) task_id: String,
    recorder: Option<Arc<dyn Recorder>>,
    caps: InputCapabilities,
    cancel: AtomicBool,
    expired: AtomicBool,
    handoff: AtomicBool,
    pub(crate) waker: AtomicWaker,
    state: Mutex<State>,
}

impl fmt::Debug for TaskCtx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskCtx")
            .field("task_id", &self.task_id)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    next: u32,
    journal: BTreeMap<u32, JournalEntry>,
    /// Entries recorded by this run (for the inline mode's `requestState`).
    recorded: Vec<JournalEntry>,
    pending: Vec<PendingInput>,
    suspend: Option<Suspend>,
    inflight: usize,
    /// Keys handed out in this run (replayed questions included).
    keys: std::collections::HashSet<String>,
    /// Inline mode: the answers that came with the call, by key.
    inline_answers: serde_json::Map<String, Value>,
}

impl TaskCtx {
    /// A context replaying `journal`. With no recorder, live steps record into
    /// memory only (the inline mode, whose journal travels in `requestState`).
    pub(crate) fn new(
        task_id: String,
        journal: Vec<JournalEntry>,
        recorder: Option<Arc<dyn Recorder>>,
        caps: InputCapabilities,
        cancel_requested: bool,
    ) -> Arc<Self> {
        let journal = journal.into_iter().map(|e| (e.position, e)).collect();
        Arc::new(Self {
            task_id,
            recorder,
            caps,
            cancel: AtomicBool::new(cancel_requested),
            expired: AtomicBool::new(false),
            handoff: AtomicBool::new(false),
            waker: AtomicWaker::new(),
            state: Mutex::new(State {
                journal,
                ..State::default()
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `fut` with this context installed.
    pub(crate) async fn scope<F: Future>(self: &Arc<Self>, fut: F) -> F::Output {
        CTX.scope(
            Scope {
                ctx: self.clone(),
                nested: false,
            },
            fut,
        )
        .await
    }

    /// Asks the run to stop; takes effect once no checkpoint is in flight.
    pub(crate) fn request_cancel(&self) {
        self.cancel.store(true, Ordering::SeqCst);
        self.waker.wake();
    }

    pub(crate) fn cancel_requested(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }

    /// What the runner should do now that the fn is pending: `None` to keep
    /// polling, or the reason to stop.
    pub(crate) fn stop_reason(&self) -> Option<Stop> {
        let mut s = self.lock();
        if s.inflight > 0 {
            return None;
        }
        if self.expired.load(Ordering::SeqCst) {
            return Some(Stop::Expired);
        }
        if let Some(Suspend::Fail(e)) = &s.suspend {
            return Some(Stop::Suspend(Suspend::Fail(e.clone())));
        }
        if self.cancel_requested() {
            return Some(Stop::Cancelled);
        }
        if self.handoff.load(Ordering::SeqCst) {
            return Some(Stop::Handoff);
        }
        match s.suspend.take() {
            None => None,
            // A question and a timer at once: park; the replay after the
            // answer sleeps again on the journaled deadline.
            Some(Suspend::Park(_) | Suspend::Sleep(_)) if !s.pending.is_empty() => {
                Some(Stop::Suspend(Suspend::Park(std::mem::take(&mut s.pending))))
            }
            Some(other) => Some(Stop::Suspend(other)),
        }
    }

    /// The key of the question at `position`: `preferred` (or the kind and
    /// position), with the position appended when the task used it before.
    fn claim_key(&self, kind: StepKind, preferred: Option<&str>, position: u32) -> String {
        let mut s = self.lock();
        let key = match preferred {
            Some(k) if !s.keys.contains(k) => k.to_owned(),
            Some(k) => format!("{k}-{position}"),
            None => format!("{}-{position}", kind.as_str()),
        };
        s.keys.insert(key.clone());
        key
    }

    /// Takes the inline answer for `key`, if one came with the call and is a
    /// JSON object (anything else counts as missing: the question is asked again).
    fn take_inline_answer(&self, key: &str) -> Option<Value> {
        self.lock()
            .inline_answers
            .remove(key)
            .filter(Value::is_object)
    }

    /// Inline mode: supplies the answers that came with the call.
    pub(crate) fn set_inline_answers(&self, answers: serde_json::Map<String, Value>) {
        self.lock().inline_answers = answers;
    }

    /// Asks the run to stop at the next step boundary so that the task can
    /// carry on elsewhere from its journal (an inline call becoming a task).
    pub(crate) fn request_handoff(&self) {
        self.handoff.store(true, Ordering::SeqCst);
        self.waker.wake();
    }

    /// Stops the run because the task's TTL ran out.
    pub(crate) fn expire(&self) {
        self.expired.store(true, Ordering::SeqCst);
        self.waker.wake();
    }

    /// Entries recorded during this run.
    pub(crate) fn take_recorded(&self) -> Vec<JournalEntry> {
        std::mem::take(&mut self.lock().recorded)
    }

    fn suspend(&self, why: Suspend) {
        let mut s = self.lock();
        match (&s.suspend, why) {
            // A failure wins over everything else.
            (Some(Suspend::Fail(_)), _) => {}
            (_, Suspend::Park(mut p)) => {
                s.pending.append(&mut p);
                if !matches!(s.suspend, Some(Suspend::Sleep(_))) {
                    s.suspend = Some(Suspend::Park(Vec::new()));
                }
            }
            (Some(Suspend::Sleep(at)), Suspend::Sleep(new)) => {
                let at = (*at).min(new);
                s.suspend = Some(Suspend::Sleep(at));
            }
            (_, why) => s.suspend = Some(why),
        }
        drop(s);
        self.waker.wake();
    }

    fn suspending(&self) -> bool {
        self.lock().suspend.is_some()
            || self.cancel_requested()
            || self.handoff.load(Ordering::SeqCst)
    }

    /// Whether a new question must not be asked: the run is failing, being
    /// cancelled or handed off. A question already waiting (or a timer) does
    /// not stop it: questions asked together (`join!`) park together.
    fn stopping(&self) -> bool {
        matches!(self.lock().suspend, Some(Suspend::Fail(_)))
            || self.cancel_requested()
            || self.handoff.load(Ordering::SeqCst)
    }

    /// Takes the next position and looks it up in the journal.
    fn slot(self: &Arc<Self>, kind: StepKind, name: String) -> Slot {
        let mut s = self.lock();
        let position = s.next;
        s.next += 1;
        match s.journal.get(&position) {
            None => Slot::Live {
                ctx: self.clone(),
                position,
                name,
            },
            Some(e) if e.kind == kind && e.name == name => Slot::Replay {
                ctx: self.clone(),
                value: e.value.clone(),
                position,
            },
            Some(e) => {
                let error = RpcError::internal(format!(
                    "non-deterministic replay at journal position {position}: expected {} `{}`, found {} `{name}`",
                    e.kind.as_str(),
                    e.name,
                    kind.as_str(),
                ))
                .with_data(json!({
                    "position": position,
                    "expected": {"kind": e.kind.as_str(), "name": e.name},
                    "found": {"kind": kind.as_str(), "name": name},
                }));
                drop(s);
                self.suspend(Suspend::Fail(error));
                Slot::Diverged
            }
        }
    }

    async fn record(&self, entry: JournalEntry) -> Result<(), RpcError> {
        if let Some(r) = &self.recorder {
            r.record(&self.task_id, entry.clone()).await?;
        }
        let mut s = self.lock();
        s.recorded.push(entry.clone());
        s.journal.insert(entry.position, entry);
        Ok(())
    }

    /// Records a live step's value; on failure, fails the run and never returns.
    async fn record_or_fail(&self, position: u32, kind: StepKind, name: String, value: Value) {
        let entry = JournalEntry {
            position,
            kind,
            name,
            value,
        };
        if let Err(e) = self.record(entry).await {
            self.suspend(Suspend::Fail(e));
            forever().await;
        }
    }

    fn decode_or_fail<T: DeserializeOwned>(&self, value: Value, what: &str) -> Option<T> {
        match serde_json::from_value(value) {
            Ok(v) => Some(v),
            Err(e) => {
                self.suspend(Suspend::Fail(RpcError::internal(format!(
                    "the journaled value of {what} no longer decodes: {e}"
                ))));
                None
            }
        }
    }
}

/// How a run stopped early.
#[derive(Debug)]
pub(crate) enum Stop {
    Suspend(Suspend),
    Cancelled,
    Expired,
    /// Stopped at a step boundary to continue as a task.
    Handoff,
}

enum Slot {
    Outside,
    Live {
        ctx: Arc<TaskCtx>,
        position: u32,
        name: String,
    },
    Replay {
        ctx: Arc<TaskCtx>,
        value: Value,
        position: u32,
    },
    Diverged,
}

fn slot(kind: StepKind, name: String) -> Slot {
    CTX.try_with(|s| {
        if s.nested {
            Slot::Outside
        } else {
            s.ctx.slot(kind, name)
        }
    })
    .unwrap_or(Slot::Outside)
}

async fn forever() -> ! {
    std::future::pending::<()>().await;
    unreachable!("a pending future never completes")
}

/// Counts a live step as in flight, so the runner never drops the fn mid-step.
struct InFlight(Arc<TaskCtx>);

impl InFlight {
    fn enter(ctx: &Arc<TaskCtx>) -> Self {
        ctx.lock().inflight += 1;
        Self(ctx.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.lock().inflight -= 1;
        self.0.waker.wake();
    }
}

/// Runs a fallible step once and journals its `Ok` value.
///
/// The first time the task reaches this point, `f` runs; an `Ok` value is
/// recorded durably *before* it is returned, so the task's code never sees a
/// value that could be lost. When the task replays (after a restart, a crash,
/// or an answer to a question), the recorded value is returned and `f` does not
/// run. An `Err` is not recorded: the step did not complete, and a later replay
/// runs it again.
///
/// The step's effect runs at least once and its result is recorded exactly
/// once; it runs again only if the process died between `f` finishing and the
/// record landing. Code between steps re-runs on every replay, so keep it cheap
/// and free of side effects.
///
/// Inside `f`, other steps are not journaled on their own: the checkpoint's
/// value covers them (a replay never runs `f`, so they could not replay).
/// [`status`] works there; questions ([`ask_user`] and friends) return
/// [`AskError::NoTask`], since a step cannot wait for the user halfway. A
/// cancel that arrives while `f` runs takes effect once its value is recorded.
///
/// ```
/// use mcp_tasks_runtime::{ToolError, checkpoint, task_tool};
///
/// #[task_tool]
/// async fn build(service: String) -> Result<String, ToolError> {
///     let id = checkpoint("build", || async { Ok::<_, ToolError>(format!("{service}-42")) }).await?;
///     Ok(format!("built {id}"))
/// }
/// ```
pub fn checkpoint<F, Fut, T, E>(
    name: impl Into<String>,
    f: F,
) -> impl Future<Output = Result<T, E>> + Send
where
    F: FnOnce() -> Fut + Send,
    Fut: Future<Output = Result<T, E>> + Send,
    T: Serialize + DeserializeOwned + Send,
    E: Send,
{
    let name = name.into();
    let slot = slot(StepKind::Checkpoint, name.clone());
    async move {
        match slot {
            Slot::Outside => f().await,
            Slot::Diverged => forever().await,
            Slot::Replay { ctx, value, .. } => {
                match ctx.decode_or_fail(value, &format!("checkpoint `{name}`")) {
                    Some(v) => Ok(v),
                    None => forever().await,
                }
            }
            Slot::Live {
                ctx,
                position,
                name,
            } => {
                if ctx.suspending() {
                    forever().await;
                }
                let guard = InFlight::enter(&ctx);
                // Steps inside the closure are covered by this checkpoint.
                let out = CTX
                    .scope(
                        Scope {
                            ctx: ctx.clone(),
                            nested: true,
                        },
                        f(),
                    )
                    .await;
                if let Ok(v) = &out {
                    let value = match serde_json::to_value(v) {
                        Ok(value) => value,
                        Err(e) => {
                            ctx.suspend(Suspend::Fail(RpcError::internal(format!(
                                "checkpoint `{name}` returned a value that does not serialize: {e}"
                            ))));
                            drop(guard);
                            forever().await
                        }
                    };
                    ctx.record_or_fail(position, StepKind::Checkpoint, name, value)
                        .await;
                }
                drop(guard);
                out
            }
        }
    }
}

/// Runs an infallible step once and journals its value: [`checkpoint`] for work
/// that cannot fail.
///
/// ```
/// use mcp_tasks_runtime::{step, task_tool};
///
/// #[task_tool]
/// async fn count() -> String {
///     let n: u64 = step("count", || async { 42 }).await;
///     n.to_string()
/// }
/// ```
pub fn step<F, Fut, T>(name: impl Into<String>, f: F) -> impl Future<Output = T> + Send
where
    F: FnOnce() -> Fut + Send,
    Fut: Future<Output = T> + Send,
    T: Serialize + DeserializeOwned + Send,
{
    let fut = checkpoint(name, move || async move {
        Ok::<T, std::convert::Infallible>(f().await)
    });
    async move {
        match fut.await {
            Ok(v) => v,
            Err(never) => match never {},
        }
    }
}

/// Sets the task's `statusMessage`, the progress line clients show.
///
/// Updates are written in order and coalesced; outside a task this does nothing.
pub fn status(message: impl Into<String>) {
    let message = message.into();
    let _ = CTX.try_with(|Scope { ctx, .. }| {
        if let Some(r) = &ctx.recorder {
            r.status(&ctx.task_id, message);
        }
    });
}

/// Whether the client asked to cancel this task.
///
/// Cancellation also takes effect on its own at the task's next await point
/// outside a checkpoint; poll this in long loops that should stop early or tidy
/// up first.
pub fn cancelled() -> bool {
    CTX.try_with(|s| s.ctx.cancel_requested()).unwrap_or(false)
}

fn unix_ms() -> i64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The current time, journaled: a replay sees the same instant.
pub async fn now() -> SystemTime {
    let ms: i64 = step_kind(StepKind::Now, "now", || json!(unix_ms())).await;
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// A fresh random identifier (128 bits from the OS CSPRNG, hex), journaled: a
/// replay sees the same value.
pub async fn uuid() -> String {
    step_kind(StepKind::Uuid, "uuid", || json!(crate::id::random_hex())).await
}

async fn step_kind<T: DeserializeOwned>(
    kind: StepKind,
    name: &str,
    make: impl FnOnce() -> Value,
) -> T {
    match slot(kind, name.to_owned()) {
        Slot::Outside => serde_json::from_value(make()).expect("made by this module"),
        Slot::Diverged => forever().await,
        Slot::Replay { ctx, value, .. } => match ctx.decode_or_fail(value, name) {
            Some(v) => v,
            None => forever().await,
        },
        Slot::Live {
            ctx,
            position,
            name,
        } => {
            let guard = InFlight::enter(&ctx);
            let value = make();
            ctx.record_or_fail(position, kind, name, value.clone())
                .await;
            drop(guard);
            serde_json::from_value(value).expect("made by this module")
        }
    }
}

/// A durable sleep: the deadline is journaled and the task parks without
/// holding a worker; it wakes when the deadline passes, across restarts.
pub async fn sleep(duration: Duration) {
    let slot = slot(StepKind::Sleep, "sleep".to_owned());
    let deadline: i64 = match slot {
        Slot::Outside => {
            tokio::time::sleep(duration).await;
            return;
        }
        Slot::Diverged => forever().await,
        Slot::Replay { ctx, value, .. } => match ctx.decode_or_fail(value, "sleep") {
            Some(v) => v,
            None => forever().await,
        },
        Slot::Live {
            ctx,
            position,
            name,
        } => {
            let guard = InFlight::enter(&ctx);
            let at =
                unix_ms().saturating_add(i64::try_from(duration.as_millis()).unwrap_or(i64::MAX));
            ctx.record_or_fail(position, StepKind::Sleep, name, json!(at))
                .await;
            drop(guard);
            at
        }
    };
    let remaining = deadline - unix_ms();
    if remaining <= 0 {
        return;
    }
    let Ok(ctx) = CTX.try_with(|s| s.ctx.clone()) else {
        return;
    };
    if ctx.recorder.is_none() {
        // Inline (no task): nothing to park in, so wait here.
        tokio::time::sleep(Duration::from_millis(u64::try_from(remaining).unwrap_or(0))).await;
        return;
    }
    ctx.suspend(Suspend::Sleep(deadline));
    forever().await
}

/// A question to the client: built by [`ask_user`], [`confirm`], [`sample`]
/// and [`list_roots`], answered by `.await`.
///
/// It takes its journal position when it is created. [`Question::key`] names
/// its key in `inputRequests` (default: the step kind and position, such as
/// `ask-3`); a key used earlier in the same task gets the position appended,
/// so keys stay unique for the task's life.
#[must_use = "a question does nothing until it is awaited"]
pub struct Question<T> {
    slot: Slot,
    kind: StepKind,
    key: Option<String>,
    request: Result<InputRequest, String>,
    decode: fn(Value) -> Result<T, AskError>,
}

impl<T> fmt::Debug for Question<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Question")
            .field("kind", &self.kind)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl<T> Question<T> {
    fn new(
        kind: StepKind,
        name: String,
        request: Result<InputRequest, String>,
        decode: fn(Value) -> Result<T, AskError>,
    ) -> Self {
        Self {
            slot: slot(kind, name),
            kind,
            key: None,
            request,
            decode,
        }
    }

    /// Names the question's key in `inputRequests` (for clients or tests that
    /// expect a given key).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
}

impl<T: Send + 'static> std::future::IntoFuture for Question<T> {
    type Output = Result<T, AskError>;
    type IntoFuture = futures::future::BoxFuture<'static, Result<T, AskError>>;

    fn into_future(self) -> Self::IntoFuture {
        let Self {
            slot,
            kind,
            key,
            request,
            decode,
        } = self;
        Box::pin(async move {
            let request = request.map_err(AskError::InvalidRequest)?;
            let answer = match slot {
                Slot::Outside => return Err(AskError::NoTask),
                Slot::Diverged => forever().await,
                Slot::Replay {
                    ctx,
                    value,
                    position,
                } => {
                    ctx.claim_key(kind, key.as_deref(), position);
                    value
                }
                Slot::Live {
                    ctx,
                    position,
                    name,
                } => {
                    if ctx.stopping() {
                        forever().await;
                    }
                    if !ctx.caps.allows(&request) {
                        return Err(AskError::Unsupported(request.capability()));
                    }
                    let key = ctx.claim_key(kind, key.as_deref(), position);
                    match ctx.take_inline_answer(&key) {
                        Some(answer) => {
                            let guard = InFlight::enter(&ctx);
                            ctx.record_or_fail(position, kind, name, answer.clone())
                                .await;
                            drop(guard);
                            answer
                        }
                        None => {
                            ctx.suspend(Suspend::Park(vec![PendingInput {
                                key,
                                position,
                                kind,
                                name,
                                request,
                            }]));
                            forever().await
                        }
                    }
                }
            };
            decode(answer)
        })
    }
}

fn decode_elicit<T: Elicit>(answer: Value) -> Result<T, AskError> {
    match answer.get("action").and_then(Value::as_str) {
        Some("accept") => {
            T::from_content(answer.get("content").cloned().unwrap_or_else(|| json!({})))
                .map_err(AskError::InvalidAnswer)
        }
        Some("decline") => Err(AskError::Declined),
        Some("cancel") => Err(AskError::Cancelled),
        _ => Err(AskError::InvalidAnswer(
            "expected `action` to be `accept`, `decline` or `cancel`".into(),
        )),
    }
}

#[allow(clippy::unnecessary_wraps)]
fn decode_raw(answer: Value) -> Result<Value, AskError> {
    Ok(answer)
}

/// Asks the user to fill in the form `T` and waits for the answer.
///
/// The task parks in `input_required` with an `elicitation/create` request
/// (form mode, `requestedSchema` from `T`) under a key unique for the task's
/// life; it holds no worker while it waits. When the client answers with
/// `tasks/update`, the answer is journaled and the task replays to this point
/// and carries on. Decline and cancel come back as [`AskError`]s. A client
/// that did not declare `elicitation` gets no question:
/// [`AskError::Unsupported`] comes back at once.
///
/// ```
/// use mcp_tasks_runtime::{Elicit, ToolError, ask_user, task_tool};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema, Elicit)]
/// struct Name {
///     name: String,
/// }
///
/// #[task_tool]
/// async fn greet_asking() -> Result<String, ToolError> {
///     let Name { name } = ask_user("What is your name?").key("user_name").await?;
///     Ok(format!("Hello, {name}!"))
/// }
/// ```
pub fn ask_user<T: Elicit + Send + 'static>(message: impl Into<String>) -> Question<T> {
    let request = Ok(InputRequest::Form(FormRequest {
        message: message.into(),
        requested_schema: T::requested_schema(),
    }));
    Question::new(
        StepKind::Ask,
        short_type_name::<T>(),
        request,
        decode_elicit::<T>,
    )
}

/// Asks a yes/no question: `Ok(true)` when the user accepts and ticks the box.
pub fn confirm(message: impl Into<String>) -> Question<bool> {
    ask_user::<bool>(message)
}

/// Asks the client's model for a completion (`sampling/createMessage`), parking
/// the task like [`ask_user`]. `params` are the request's params (a JSON
/// object; anything else comes back as [`AskError::InvalidRequest`]); the
/// result is the client's `CreateMessageResult`.
pub fn sample(params: Value) -> Question<Value> {
    Question::new(
        StepKind::Sample,
        "sample".to_owned(),
        match params {
            Value::Object(params) => Ok(InputRequest::Sample(params)),
            other => Err(format!(
                "sampling params must be a JSON object, not {other}"
            )),
        },
        decode_raw,
    )
}

/// Asks the client for its roots (`roots/list`), parking the task like
/// [`ask_user`]. Returns the client's `ListRootsResult`.
pub fn list_roots() -> Question<Value> {
    Question::new(
        StepKind::Roots,
        "roots".to_owned(),
        Ok(InputRequest::ListRoots),
        decode_raw,
    )
}

fn short_type_name<T>() -> String {
    let full = std::any::type_name::<T>();
    // `a::b::C<d::E>` -> `C<E>`: stable across module moves.
    let mut out = String::new();
    let mut seg = String::new();
    for ch in full.chars() {
        match ch {
            ':' => seg.clear(),
            '<' | '>' | ',' | ' ' | '(' | ')' | '[' | ']' | ';' | '&' => {
                out.push_str(&seg);
                seg.clear();
                out.push(ch);
            }
            c => seg.push(c),
        }
    }
    out.push_str(&seg);
    out
}

#[cfg(test)]
mod tests {
    use super::short_type_name;

    #[test]
    fn short_names() {
        assert_eq!(short_type_name::<String>(), "String");
        assert_eq!(
            short_type_name::<Option<std::string::String>>(),
            "Option<String>"
        );
        assert_eq!(short_type_name::<bool>(), "bool");
    }
}
