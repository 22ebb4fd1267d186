//! Where a task's code finds its run: the task-local scope every step
//! consults (the run's context, whether it is inside a checkpoint's closure
//! or a `select` branch, and whether that `select` is probing), and the
//! journal slot a step takes from it.

use std::{
    future::{Future, poll_fn},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::Poll,
};

use serde_json::json;

use super::{
    context::{Slot, TaskCtx},
    info::TaskInfo,
};
use crate::{error::RpcError, journal::StepKind};

tokio::task_local! {
    static CTX: Scope;
}

/// What a task's code sees: its context, and whether it runs inside a
/// checkpoint's closure (where steps are not journaled: the checkpoint's value
/// covers them, and a replay never runs them) or as a branch of a
/// [`select`](crate::durable::select).
#[derive(Clone)]
struct Scope {
    ctx: Arc<TaskCtx>,
    /// Inside the closure of the step at this journal position.
    step: Option<u32>,
    /// The `select` polling this code looks for a branch that is already
    /// decided: live steps wait, starting nothing (see [`hold_while_probing`]).
    probing: bool,
    branch: Option<Arc<Branch>>,
}

impl Scope {
    fn new(ctx: Arc<TaskCtx>, step: Option<u32>) -> Self {
        Self {
            ctx,
            step,
            probing: false,
            branch: None,
        }
    }
}

/// A branch of a [`select`](crate::durable::select) as its code runs: the race it
/// belongs to (its journal position) and the outermost race that race is a
/// branch of (itself when it is not nested), whether it has been polled
/// before and
/// whether it took its step (a branch is one journaled step, started on its
/// first poll, so that every run gives it the same position), and whether it
/// ended as a question that timed out (which loses to any other branch
/// decided at once).
#[derive(Debug)]
pub(super) struct Branch {
    pub(super) race: u32,
    /// The outermost `select` of the races this branch is nested in: a
    /// step decided anywhere in a nest of races decides every race of it.
    root: u32,
    pub(super) polled: AtomicBool,
    stepped: AtomicBool,
    pub(super) timed_out: AtomicBool,
}

impl Branch {
    /// A branch of the race at `race`, whose outermost race is `root`.
    pub(super) fn new(race: u32, root: u32) -> Arc<Self> {
        Arc::new(Self {
            race,
            root,
            polled: AtomicBool::new(false),
            stepped: AtomicBool::new(false),
            timed_out: AtomicBool::new(false),
        })
    }
}

/// Now, on the clock of the engine running this code (the system's outside
/// any run).
pub(super) fn now_ms() -> i64 {
    CTX.try_with(|s| s.ctx.run.clock.now_ms())
        .unwrap_or_else(|_| crate::clock::now_ms())
}

/// The context of the task running on this task-local, if any.
pub(super) fn current() -> Option<Arc<TaskCtx>> {
    CTX.try_with(|s| s.ctx.clone()).ok()
}

/// The context of the task running here if it can park (a task's run, not
/// an inline call, and not inside a checkpoint's closure).
pub(super) fn parkable() -> Option<Arc<TaskCtx>> {
    CTX.try_with(|s| (s.step.is_none() && s.ctx.recorder().is_some()).then(|| s.ctx.clone()))
        .ok()
        .flatten()
}

/// The context of the task running here, unless inside a step's closure
/// (where steps are not journaled on their own).
pub(super) fn unnested() -> Option<Arc<TaskCtx>> {
    CTX.try_with(|s| s.step.is_none().then(|| s.ctx.clone()))
        .ok()
        .flatten()
}

/// The context code runs in here (its task's, and the position of the step
/// whose closure it runs in, if any), to carry into a spawned future with
/// [`in_scope`].
pub(super) fn current_scope() -> Option<(Arc<TaskCtx>, Option<u32>)> {
    CTX.try_with(|s| (s.ctx.clone(), s.step)).ok()
}

/// Runs `f` in the context [`current_scope`] took (`None`: outside any task).
pub(super) async fn in_scope<F: Future>(
    scope: Option<(Arc<TaskCtx>, Option<u32>)>,
    f: F,
) -> F::Output {
    match scope {
        Some((ctx, step)) => CTX.scope(Scope::new(ctx, step), f).await,
        None => f.await,
    }
}

/// Runs `f` as the closure of the step at `position`: its steps are not
/// journaled, and [`step_key`](crate::durable::step_key) names that step.
pub(super) async fn nested<F: Future>(ctx: &Arc<TaskCtx>, position: u32, f: F) -> F::Output {
    CTX.scope(Scope::new(ctx.clone(), Some(position)), f).await
}

/// The task and journal position of the step whose closure runs here
/// (`None` outside one, and in a call answered without a task).
pub(super) fn current_step() -> Option<(String, u32)> {
    CTX.try_with(|s| {
        s.step
            .filter(|_| !s.ctx.task_id().is_empty())
            .map(|position| (s.ctx.task_id().to_owned(), position))
    })
    .ok()
    .flatten()
}

/// [`slot`] for a [`patched`](crate::durable::patched) marker; `None` when the
/// journal holds another step at the next position.
pub(super) fn marker_slot(name: String) -> Option<Slot> {
    CTX.try_with(|s| {
        if s.step.is_some() {
            Some(Slot::Nested)
        } else {
            s.ctx.marker_slot(name)
        }
    })
    .unwrap_or(Some(Slot::Outside))
}

pub(super) fn slot(kind: StepKind, name: String) -> Slot {
    take_slot(kind, name, true)
}

/// [`slot`] for the second position of a step that takes two (a
/// question's deadline): it does not count as a step of its own in a
/// `select`'s branch.
pub(super) fn second_slot(kind: StepKind, name: String) -> Slot {
    take_slot(kind, name, false)
}

fn take_slot(kind: StepKind, name: String, step: bool) -> Slot {
    CTX.try_with(|s| {
        if s.step.is_some() {
            return Slot::Nested;
        }
        if let Some(b) = &s.branch {
            let late = b.polled.load(Ordering::SeqCst);
            if late || (step && b.stepped.swap(true, Ordering::SeqCst)) {
                // Its position would depend on how far the branch got
                // before the race was decided, which a replay cannot repeat.
                let why = if late {
                    "after the branch first waited"
                } else {
                    "as a second step of the branch"
                };
                s.ctx.fail(
                    RpcError::internal(format!(
                        "{} `{name}` was reached by a branch of `select` {why}: each branch \
                         is one journaled step (a question, a sleep, a checkpoint or a \
                         `select`), started when the branch starts. Put the steps that follow \
                         after the `select`, or the work inside one `checkpoint`",
                        kind.as_str()
                    ))
                    .with_data(json!({"race": b.race, "step": name})),
                );
                return Slot::Diverged;
            }
        }
        s.ctx.slot(kind, name)
    })
    .unwrap_or(Slot::Outside)
}

/// Whether a `select` is looking for a branch already decided: a live step
/// must start nothing yet.
pub(super) fn probing() -> bool {
    CTX.try_with(|s| s.probing).unwrap_or(false)
}

/// The journal position of the outermost `select` whose branch runs here,
/// if any: a question or timer of a `select` nested in another's branch
/// belongs to the outer race too (its answer ends both), so the engine
/// withdraws the questions of the whole nest at once.
pub(super) fn race() -> Option<u32> {
    CTX.try_with(|s| s.branch.as_ref().map(|b| b.root))
        .ok()
        .flatten()
}

/// Says that the branch running here ended as a question that timed out.
pub(super) fn branch_timed_out() {
    let _ = CTX.try_with(|s| {
        if let Some(b) = &s.branch {
            b.timed_out.store(true, Ordering::SeqCst);
        }
    });
}

/// Waits while a `select` probes: it polls again at once, for real, if
/// nothing it probed was decided.
pub(super) async fn hold_while_probing() {
    poll_fn(|_| {
        if probing() {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
}

/// Polls a `select`'s branch in the run's context, as that branch.
pub(super) fn poll_branch<F: Future + ?Sized>(
    ctx: &Arc<TaskCtx>,
    branch: &Arc<Branch>,
    probing: bool,
    fut: std::pin::Pin<&mut F>,
    cx: &mut std::task::Context<'_>,
) -> Poll<F::Output> {
    let scope = Scope {
        ctx: ctx.clone(),
        step: None,
        probing,
        branch: Some(branch.clone()),
    };
    let poll = CTX.sync_scope(scope, || fut.poll(cx));
    branch.polled.store(true, Ordering::SeqCst);
    poll
}

thread_local! {
    /// Set while a `select` drops its losers: their steps take back what
    /// they left for the run's end, rather than fail the run.
    static WITHDRAWING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Drops `losers`, the branches of a decided `select`.
pub(super) fn drop_losers<T>(losers: T) {
    /// Clears the flag however the drop ends (a loser's drop may panic).
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            WITHDRAWING.with(|w| w.set(false));
        }
    }
    WITHDRAWING.with(|w| w.set(true));
    let _reset = Reset;
    drop(losers);
}

/// Whether a decided `select` is dropping its losers here (see
/// [`drop_losers`]).
pub(super) fn withdrawing() -> bool {
    WITHDRAWING.with(std::cell::Cell::get)
}

/// The task this code runs in: its id, tool, caller and lifetime; `None`
/// outside a tool's run (a unit test calling the fn directly).
///
/// It is not journaled and needs no journal position, so it may be called
/// anywhere in the fn, as often as needed.
///
/// ```
/// use mcp_tasks_runtime::{durable, task_tool};
///
/// /// Names the task it runs in.
/// #[task_tool]
/// async fn whoami() -> String {
///     match durable::task_info() {
///         Some(info) => format!("{} as {}", info.tool, info.principal.as_deref().unwrap_or("anyone")),
///         None => "not in a task".into(),
///     }
/// }
/// ```
pub fn task_info() -> Option<TaskInfo> {
    current().map(|ctx| ctx.info().clone())
}

/// Ends the current run `cancelled` once the fn returns (see
/// [`ToolError::cancelled`](crate::ToolError::cancelled)); `false` outside a run.
pub(crate) fn withdraw() -> bool {
    current().is_some_and(|ctx| {
        ctx.withdraw();
        true
    })
}
