//! The journaled steps: [`checkpoint`], [`step`], [`now`], [`uuid`] and
//! [`sleep`], with [`status`] and [`cancelled`] beside them.

use std::{
    fmt,
    future::{Future, poll_fn},
    task::Poll,
    time::{Duration, SystemTime},
};

use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};
use tracing::Instrument;

use super::{
    context::{InFlight, Live, Replay, Slot, TaskCtx, forever},
    scope::{
        current, current_step, hold_while_probing, nested, now_ms, parkable, probing, race, slot,
        unnested,
    },
    unfinished::Unfinished,
};
use crate::{
    error::{RpcError, ToolError},
    journal::{JournalEntry, StepKind},
};

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
/// once; it runs again only if its run stopped before the record landed: the
/// process died, or this instance lost the task's lease (paused past it, say)
/// and another took the task over. A run that lost its lease drops `f`'s
/// future at its next `.await`, so a paused instance that wakes does not go
/// on with the step. [`step_key`] names the step for the services it calls,
/// the same on every attempt. Code between steps re-runs on every replay, so
/// keep it cheap and free of side effects.
///
/// Inside `f`, other steps are not journaled on their own: the checkpoint's
/// value covers them (a replay never runs `f`, so they could not replay).
/// [`status`] works there; questions ([`ask_user`](crate::ask_user) and friends) return
/// [`AskError::NoTask`](crate::question::AskError::NoTask), since a step cannot wait for the user halfway. A
/// cancel that arrives while `f` runs takes effect once its value is recorded.
///
/// It must be awaited to the end by the fn's own future. Dropped unfinished
/// while the fn goes on (the loser of a `tokio::select!`, a `timeout` that
/// elapsed, a checkpoint created and never awaited), it fails the task, in
/// every run and whatever order the branches were polled in: which branch
/// won is not journaled, so race inside one checkpoint instead, or race steps
/// with [`select`](crate::durable::select) or [`select_all`](crate::durable::select_all): both
/// journal the winner. A future handed to
/// `tokio::spawn` has left the task, and its checkpoints run unjournaled, as
/// they do outside any task; [`spawn`](crate::durable::spawn) runs a step in parallel
/// and journals it.
///
/// The closure returns `Result<T, ToolError>`, so `?` inside it works on any
/// error (see [`ToolError`]'s `From`) and `Ok(value)` needs no annotation. A
/// helper returning another error type fits as `|| async { Ok(helper().await?) }`.
///
/// ```
/// use mcp_tasks_runtime::{ToolError, checkpoint, task_tool};
///
/// #[task_tool]
/// async fn build(service: String) -> Result<String, ToolError> {
///     let manifest = checkpoint("read-manifest", || async {
///         let text = std::fs::read_to_string(format!("{service}.toml"))?;
///         Ok(text.lines().count())
///     })
///     .await?;
///     let id = checkpoint("build", || async { Ok(format!("{service}-{manifest}")) }).await?;
///     Ok(format!("built {id}"))
/// }
/// ```
pub fn checkpoint<F, Fut, T>(
    name: impl Into<String>,
    f: F,
) -> impl Future<Output = Result<T, ToolError>> + Send
where
    F: FnOnce() -> Fut + Send,
    Fut: StepFuture<Result<T, ToolError>>,
    T: StepValue + Send,
{
    journaled(name.into(), f)
}

/// What the closure of a [`checkpoint`] or a [`step`] returns: a `Send`
/// future of the step's value (`Result<T, ToolError>` for a checkpoint).
/// Every such future is one; the trait exists so that a closure that is not
/// `async` gets an error that says what to write.
#[diagnostic::on_unimplemented(
    message = "the closure given to `checkpoint` or `step` must be async: it returns `{Self}`, not a future of `{O}`",
    label = "write `|| async {{ ... }}` here",
    note = "a step runs its closure's future once and journals its value: `checkpoint(\"name\", || async {{ Ok(work().await?) }})`"
)]
pub trait StepFuture<O>: Future<Output = O> + Send {}

impl<O, F: Future<Output = O> + Send> StepFuture<O> for F {}

/// A value a step journals: the `Ok` value of a [`checkpoint`], the value
/// of a [`step`] or of a [`spawn`](crate::durable::spawn)ed step. It is written to
/// the journal as JSON and read back from it on replay, so it must be
/// `serde::Serialize` and `serde::de::DeserializeOwned`; every such type is
/// a `StepValue`. The trait exists so that a value that is not gets an
/// error that says why, rather than serde's generic one.
#[diagnostic::on_unimplemented(
    message = "a step's value is journaled as JSON: `{Self}` must implement `serde::Serialize` and `serde::Deserialize`",
    label = "this step's value is `{Self}`",
    note = "the value a `checkpoint`, `step` or `spawn` returns is recorded before it is returned and read back on replay: derive `Serialize, Deserialize` for `{Self}`, or return a value that has them (an id, a summary) and keep the rest out of the step"
)]
pub trait StepValue: Serialize + DeserializeOwned {}

#[diagnostic::do_not_recommend]
impl<T: Serialize + DeserializeOwned> StepValue for T {}

/// [`checkpoint`] for any error type: what [`step`] runs on.
fn journaled<F, Fut, T, E>(name: String, f: F) -> impl Future<Output = Result<T, E>> + Send
where
    F: FnOnce() -> Fut + Send,
    Fut: Future<Output = Result<T, E>> + Send,
    T: Serialize + DeserializeOwned + Send,
    E: Send,
{
    let slot = slot(StepKind::Checkpoint, name.clone());
    // Armed from here: dropped unfinished, even before its first poll, the
    // checkpoint fails the run.
    let unfinished = Unfinished::of(&slot, || format!("checkpoint `{name}`"));
    async move {
        let out = match slot {
            Slot::Outside | Slot::Nested => f().await,
            Slot::Diverged => forever().await,
            Slot::Replay(step) => {
                let what = format!("checkpoint `{name}`");
                Ok(step.decode(StepKind::Checkpoint, &name, &what).await)
            }
            Slot::Live(step) => live_checkpoint(step, f).await,
        };
        if let Some(unfinished) = unfinished {
            unfinished.done();
        }
        out
    }
}

/// A checkpoint reached for the first time: runs `f` and records its `Ok`.
async fn live_checkpoint<F, Fut, T, E>(
    Live {
        ctx,
        position,
        name,
    }: Live,
    f: F,
) -> Result<T, E>
where
    F: FnOnce() -> Fut + Send,
    Fut: Future<Output = Result<T, E>> + Send,
    T: Serialize + DeserializeOwned + Send,
{
    hold_while_probing().await;
    // A branch of a `select` waits for the questions and timers before it
    // (they reach the client when the run parks); elsewhere, a checkpoint
    // polled beside a waiting question or timer (`join!`, `tokio::select!`)
    // runs before the run parks, so that the run gets as far in every
    // order its branches are polled in.
    let in_race = race().is_some();
    if in_race {
        // A step of an earlier branch may be on its way to the journal (a
        // checkpoint's value, a question's deadline): until it lands, what
        // it becomes (the winner, a waiting question) is not known, and a
        // checkpoint started now would win or lose by how fast the store
        // answers. Wait for it, so the branch listed first decides (and
        // while the race probes again: a branch before this one ended as a
        // question that timed out, which wins unless another branch was
        // already decided).
        poll_fn(|_| {
            if ctx.busy() || probing() {
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
        .await;
    }
    if ctx.stopping() || (in_race && ctx.suspending()) {
        forever().await;
    }
    let guard = InFlight::enter(&ctx);
    if !in_race {
        // Its siblings go first, once: one the journal already decided (a
        // replayed answer) finishes now, and if that ends a `tokio::select!`
        // this checkpoint is dropped before its closure ever starts.
        yield_once().await;
        if ctx.stopping() {
            drop(guard);
            forever().await;
        }
        ctx.flush_staged().await;
    }
    // Steps inside the closure are covered by this checkpoint.
    let span = step_span(position, StepKind::Checkpoint, &name, false);
    let began = crate::metrics::began();
    let work = nested(&ctx, position, f());
    let Some(out) = ctx.while_held(position, work).instrument(span).await else {
        // This instance lost the task: the step is left to the one that
        // holds it now.
        drop(guard);
        forever().await
    };
    crate::metrics::step(&ctx.run.info.tool, began);
    let what = format!("checkpoint `{name}`");
    match journal_ok(&ctx, guard, position, name, &what, out).await {
        Ok(out) => out,
        // The run fails.
        Err(_) => forever().await,
    }
}

/// Returns `Pending` once (waking its task at once), then `Ready`: the
/// futures polled beside this one get a turn first.
async fn yield_once() {
    let mut yielded = false;
    poll_fn(|cx| {
        if yielded {
            Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await;
}

/// Journals the `Ok` value of a live checkpoint (or spawned step) as JSON
/// at `position` (an `Err` is not journaled), then lets its `guard` go. The
/// run goes on with `out` once it is stored, or with the value another run
/// stored there first; `Err(why)` when the run fails instead (the value did
/// not serialize, or the stored one no longer decodes).
pub(super) async fn journal_ok<T: Serialize + DeserializeOwned, E>(
    ctx: &TaskCtx,
    guard: InFlight,
    position: u32,
    name: String,
    what: &str,
    out: Result<T, E>,
) -> Result<Result<T, E>, String> {
    let Ok(v) = &out else {
        return Ok(out);
    };
    let value = serde_json::to_value(v).map_err(|e| {
        let why = format!("{what} returned a value that does not serialize: {e}");
        ctx.fail(RpcError::internal(why.clone()));
        why
    })?;
    let stored = ctx
        .record_value(position, StepKind::Checkpoint, name, value.clone())
        .await;
    let kept = if stored == value {
        Ok(out)
    } else {
        ctx.decode_or_fail(stored, what)
            .map(Ok)
            .ok_or_else(|| format!("{what} no longer decodes"))
    };
    drop(guard);
    kept
}

/// A step's span, a child of its run's: the journal position, what it is,
/// and whether it replayed (its value came from the journal) or ran.
pub(super) fn step_span(
    position: u32,
    kind: StepKind,
    name: &str,
    replayed: bool,
) -> tracing::Span {
    tracing::debug_span!("step", position, kind = kind.as_str(), name, replayed)
}

/// A journaled value as `T`; when it no longer decodes, the run fails and
/// this never returns.
impl Replay {
    /// The recorded value, decoded (`what` names it if it no longer
    /// decodes), the step's span marked as replayed.
    pub(super) async fn decode<T: DeserializeOwned>(
        self,
        kind: StepKind,
        name: &str,
        what: &str,
    ) -> T {
        step_span(self.position, kind, name, true).in_scope(|| ());
        decoded(&self.ctx, self.value, what).await
    }
}

async fn decoded<T: DeserializeOwned>(ctx: &TaskCtx, value: Value, what: &str) -> T {
    match ctx.decode_or_fail(value, what) {
        Some(v) => v,
        None => forever().await,
    }
}

/// Runs an infallible step once and journals its value: [`checkpoint`] for work
/// that cannot fail.
///
/// ```
/// use mcp_tasks_runtime::{durable, task_tool};
///
/// #[task_tool]
/// async fn count() -> String {
///     let n: u64 = durable::step("count", || async { 42 }).await;
///     n.to_string()
/// }
/// ```
pub fn step<F, Fut, T>(name: impl Into<String>, f: F) -> impl Future<Output = T> + Send
where
    F: FnOnce() -> Fut + Send,
    Fut: StepFuture<T>,
    T: StepValue + Send,
{
    let fut = journaled(name.into(), move || async move {
        Ok::<T, std::convert::Infallible>(f().await)
    });
    async move {
        match fut.await {
            Ok(v) => v,
            Err(never) => match never {},
        }
    }
}

/// The idempotency key of a journaled step: its task and its journal
/// position, the same on every instance and in every run of the task.
///
/// A step's effect runs at least once: again when the process died (or
/// lost the task's lease) after the effect and before the value was
/// journaled. Hand this key to the service the step calls (an
/// `Idempotency-Key` header, a unique column) and the service can tell the
/// second attempt from a new request. It shows as `{task_id}:{position}`.
///
/// The key contains the task's id, which is a bearer secret on a server
/// with no authentication: hash it first when the service is not trusted
/// with it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StepKey {
    task_id: String,
    position: u32,
}

impl StepKey {
    /// The task's id.
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// The step's journal position.
    pub fn position(&self) -> u32 {
        self.position
    }
}

impl fmt::Display for StepKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.task_id, self.position)
    }
}

/// The [`StepKey`] of the step whose closure is running: inside a
/// [`checkpoint`]'s, a [`step`]'s or a [`spawn`](crate::durable::spawn)ed step's
/// closure (and in what it calls), the key of that step; `None` elsewhere
/// (in the fn between steps, in a unit test of the fn, or in a call
/// answered inline, without a task).
///
/// ```
/// use mcp_tasks_runtime::{ToolError, checkpoint, durable, task_tool};
///
/// #[task_tool]
/// async fn charge(cents: u64) -> Result<String, ToolError> {
///     checkpoint("charge", || async {
///         // The same key on every attempt of this step, on any instance.
///         let key = durable::step_key().map(|k| k.to_string()).unwrap_or_default();
///         Ok(format!("charged {cents} with idempotency key {key}"))
///     })
///     .await
/// }
/// ```
pub fn step_key() -> Option<StepKey> {
    current_step().map(|(task_id, position)| StepKey { task_id, position })
}

/// Sets the task's `statusMessage`, the progress line clients show.
///
/// Updates are written in order and coalesced. While the task replays its
/// journal (after an answer, a durable sleep or a restart) the messages of
/// steps it has already passed are not shown again; outside a task this does
/// nothing.
///
/// The line lasts while the task works. When the task ends, its
/// `statusMessage` is replaced by the end's own: "The task completed."
/// (for a tool error, `isError: true`, too), "The task was cancelled.", or
/// a failure's error message. Put what the user must keep in the result,
/// not in the last `status` line.
pub fn status(message: impl Into<String>) {
    if let Some(ctx) = current()
        && let Some(r) = ctx.recorder()
        && !ctx.replaying()
    {
        r.status(ctx.task_id(), message.into());
    }
}

/// Whether the client asked to cancel this task.
///
/// Cancellation also takes effect on its own at the task's next await point
/// outside a checkpoint; poll this in long loops that should stop early or tidy
/// up first.
pub fn cancelled() -> bool {
    current().is_some_and(|ctx| ctx.cancel_requested())
}

/// The current time, journaled: a replay sees the same instant.
pub async fn now() -> SystemTime {
    let ms: i64 = step_kind(StepKind::Now, "now", || json!(now_ms())).await;
    crate::clock::system_time(ms)
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
    recorded(slot(kind, name.to_owned()), kind, name, name, make).await
}

/// The value at `slot`: `make()` recorded the first time the run gets
/// there, the recorded value on replay (`what` names it if it no longer
/// decodes). Outside a run, or inside a checkpoint's closure, `make()` is
/// used as it is, unrecorded.
pub(super) async fn recorded<T: DeserializeOwned>(
    slot: Slot,
    kind: StepKind,
    name: &str,
    what: &str,
    make: impl FnOnce() -> Value,
) -> T {
    match slot {
        Slot::Outside | Slot::Nested => {
            serde_json::from_value(make()).expect("made by this module")
        }
        Slot::Diverged => forever().await,
        Slot::Replay(step) => step.decode(kind, name, what).await,
        Slot::Live(Live {
            ctx,
            position,
            name,
        }) => {
            let unfinished = Unfinished::new(&ctx, Some(position), what.to_owned());
            hold_while_probing().await;
            let span = step_span(position, kind, &name, false);
            let guard = InFlight::enter(&ctx);
            let value = ctx
                .record_value(position, kind, name, make())
                .instrument(span)
                .await;
            drop(guard);
            unfinished.done();
            decoded(&ctx, value, what).await
        }
    }
}

/// A durable sleep: the deadline is journaled, and the task wakes when it
/// passes, across crashes and restarts.
///
/// A short sleep (by default up to 1 s:
/// [`EngineBuilder::sleep_in_process_up_to`](crate::engine::EngineBuilder::sleep_in_process_up_to))
/// journals its deadline and waits in the run, which goes on at the
/// deadline. A longer one parks the task without holding a worker; the task
/// runs again from its journal once the deadline passes. After a crash
/// either one waits out only what is left of it.
///
/// Use it instead of `tokio::time::sleep`, `interval` or `std::thread::sleep`:
/// a replay would wait those out again, and a task parked on a question never
/// sees a tokio timer fire. [`#[task_tool]`](crate::task_tool) refuses them
/// in a tool's body at compile time; in a helper the body calls they are not
/// seen, neither then nor at run time (a tokio timer never reaches the
/// journal), so call such a helper inside a [`checkpoint`].
///
/// It takes its journal position when first polled. Dropped unfinished
/// while the fn goes on (the loser of a `tokio::select!`), even before its
/// first poll, it fails the task; race it with [`select`](crate::durable::select).
pub fn sleep(duration: Duration) -> impl Future<Output = ()> + Send {
    let unfinished = unnested().map(|ctx| Unfinished::new(&ctx, None, "a durable `sleep`".into()));
    async move {
        durable_sleep(duration).await;
        if let Some(unfinished) = unfinished {
            unfinished.done();
        }
    }
}

/// Whether a sleep with `remaining` ms to go waits in the run rather than
/// parking the task: it is short enough, and no `select` races it (a race's
/// timers decide it when the run parks).
fn waits_in_process(ctx: &TaskCtx, remaining: i64) -> bool {
    remaining <= ctx.run.sleep_in_process_ms && race().is_none()
}

/// What awaiting a [`sleep`] does.
async fn durable_sleep(duration: Duration) {
    let span = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
    let slot = slot(StepKind::Sleep, "sleep".to_owned());
    // A live sleep in a task's run that parks: its deadline is journaled by
    // the write that puts the task to sleep, one write instead of two.
    if let Slot::Live(Live {
        ctx,
        position,
        name,
    }) = &slot
        && span > 0
        && !waits_in_process(ctx, span)
    {
        hold_while_probing().await;
        let deadline = now_ms().saturating_add(span);
        let entry = JournalEntry {
            position: *position,
            kind: StepKind::Sleep,
            name: name.clone(),
            value: json!(deadline),
        };
        if ctx.stage_sleep(entry, deadline, race()) {
            step_span(*position, StepKind::Sleep, name, false).in_scope(|| ());
            let _unfinished = Unfinished::new(ctx, Some(*position), "a durable `sleep`".into());
            forever().await
        }
    }
    let position = slot.at().map(|(_, position)| position);
    let deadline: i64 = recorded(slot, StepKind::Sleep, "sleep", "sleep", || {
        json!(now_ms().saturating_add(span))
    })
    .await;
    loop {
        let remaining = deadline - now_ms();
        if remaining <= 0 {
            return;
        }
        match parkable() {
            // A short sleep in a task's run, its deadline journaled: wait
            // here, on the engine's clock. The run stops here as at any await
            // point (a cancel, a drain, a lost lease), and a run of the task
            // after it waits out what is left.
            Some(ctx) if waits_in_process(&ctx, remaining) => {
                return ctx.run.clock.sleep_until(deadline).await;
            }
            // A task's run: park, holding no worker, until the deadline. A
            // sleep dropped while the fn goes on (a `select!` that another
            // branch won) would leave the run asleep on a timer nobody waits
            // for.
            Some(ctx) => {
                hold_while_probing().await;
                let _unfinished = Unfinished::new(&ctx, position, "a durable `sleep`".into());
                if let Some(position) = position {
                    ctx.sleep_until(position, deadline, race());
                }
                forever().await
            }
            // Outside a task, inside a checkpoint, or inline: wait here; an
            // inline call that becomes a task meanwhile sleeps as one.
            None => {
                let wait = Duration::from_millis(u64::try_from(remaining).unwrap_or(0));
                match unnested().filter(|ctx| ctx.hurry.is_some()) {
                    Some(ctx) => tokio::select! {
                        () = tokio::time::sleep(wait) => return,
                        () = ctx.became() => {}
                    },
                    None => return tokio::time::sleep(wait).await,
                }
            }
        }
    }
}
