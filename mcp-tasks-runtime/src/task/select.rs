//! Deterministic races of journaled steps: [`select`] and [`select_all`].
//!
//! A race takes a journal position of its own and records there which branch
//! won. Before it starts anything it *probes* its branches: a branch whose
//! step is already decided in the journal (an answered question, a timer
//! that has fired, a recorded checkpoint) is found without starting the live
//! steps of the others. So the first run that sees a winner journals it, and
//! every replay takes the same branch, whatever order things finish in on
//! the replaying instance.

use std::{
    future::{Future, poll_fn},
    pin::Pin,
    sync::{Arc, atomic::Ordering},
    task::{Context, Poll},
};

use futures::future::{Either, FutureExt};
use serde_json::json;
use tracing::Instrument;

use super::{
    context::{InFlight, Live, Replay, Slot, TaskCtx, forever},
    scope::{
        Branch, branch_timed_out, drop_losers, poll_branch, probing, race as outer_race, slot,
    },
    steps::step_span,
    unfinished::Unfinished,
};
use crate::{error::RpcError, journal::StepKind};

/// Races two journaled futures and returns the first to finish, as
/// [`Either::Left`] or [`Either::Right`]; the other is dropped. Unlike
/// `tokio::select!`, the winner is journaled: a replay (after a question was
/// answered, a durable timer fired, or a restart) takes the same branch.
///
/// [`#[task_tool]`](crate::task_tool) refuses `tokio::select!` and
/// `futures::select!` written in a tool's body at compile time. In a helper
/// the body calls they are not seen: there only the run-time check applies,
/// which fails the task when a journaled step (a checkpoint, a question, a
/// durable sleep) that a losing branch started is dropped unfinished; a race
/// of tokio timers or plain futures is caught by neither.
///
/// Each branch is one journaled step: a [question](crate::ask_user) (with
/// or without a [deadline](crate::question::Question::timeout)), a durable
/// [`sleep`](crate::durable::sleep), a [`checkpoint`](crate::checkpoint) or another
/// `select`, or an `async` block that starts one such step at once and then
/// only computes with its value. A branch that reaches a second step, or
/// starts its step only after it first waited, fails the task with a message
/// saying so: where that step lands in the journal would depend on how far
/// the branch got before the race was decided, which a replay cannot repeat.
/// Put what follows after the `select`.
///
/// How the branches meet:
///
/// - **Questions** raced against each other are asked together; the first
///   answer ends the race, and the other questions leave `inputRequests` (a
///   late answer to one is ignored). A `select` nested in another's branch
///   belongs to the outer race: an answer to one of its questions ends
///   both, and withdraws every other question of the nest.
/// - **A question and a durable `sleep`**: the question is withdrawn when the
///   timer fires, and the sleep wins (a question's own
///   [`timeout`](crate::question::Question::timeout) that comes first still wins as
///   [`AskError::TimedOut`](crate::question::AskError::TimedOut)). The task parks
///   holding no worker either way, and this holds across restarts.
/// - **A checkpoint** runs to its end once started: work in this process is
///   not interrupted by a question (questions reach the client when the task
///   parks). A checkpoint listed after a question or a timer waits for them;
///   one listed before runs first, and wins unless a branch before it was
///   already decided. A checkpoint listed after another step does not start
///   while that step is on its way to the journal (a checkpoint's value, a
///   question's deadline): the branch listed first decides, however fast
///   the store answers. Race pieces of work against each other inside one
///   checkpoint (`tokio::select!` there), and let long work check
///   [`cancelled`](crate::durable::cancelled).
/// - When several branches are decided at once (a replay finding two
///   answers), the first in order wins, except that a question that timed
///   out loses to any other branch decided at the same time.
///
/// Outside a task (a unit test) and inside a checkpoint's closure, it polls
/// the branches in order and returns the first to finish, journaling nothing.
///
/// # What the runtime catches, and what only the macro does
///
/// A replay takes the path the first run took only if the fn's choices come
/// from the journal. **The runtime** catches a journaled step (a
/// [`checkpoint`](crate::checkpoint) or [`step`](crate::durable::step), a question, a
/// durable [`sleep`](crate::durable::sleep), [`now`](crate::durable::now), [`uuid`](crate::durable::uuid),
/// a `select`) that the fn's own code drops before it finished while the fn
/// goes on: the loser of a `tokio::select!`, a step under
/// `tokio::time::timeout` that elapsed, a step created and never awaited.
/// The task fails with a message naming `select`/`select_all`. The verdict
/// is the same in every run, whatever order the branches are polled in:
/// checkpoints and questions count from when they are created, durable
/// sleeps from their first poll, and a checkpoint polled beside a waiting
/// question runs before the run parks, so that race is decided, and fails,
/// in the first run. A live checkpoint lets the futures polled beside it go
/// first, once, so that a branch the journal already decided ends a race
/// before the checkpoint's closure starts; a run that must fail journals
/// nothing more. A race of questions only, or of a question and a durable
/// sleep, fails once an answer comes or the timer fires: until then the run
/// parks on both, as `join!` would.
///
/// **The macro's compile-time check** covers what the runtime cannot see:
/// tokio's timers (`tokio::time::sleep`, `timeout`, `interval`) and
/// `tokio::spawn` in the fn's body, threads, clocks (`SystemTime::now`,
/// `Instant::now`) and random numbers. A tokio timer raced against a
/// question, in particular, is decided by the clock, not the journal: when
/// the question parks the run first, the timer is gone with the run and
/// nothing notices; when the timer fires first (a question with a deadline
/// journals it before parking, so a slow store gives a short timer time to
/// win), the question is dropped unfinished and the task fails. Use
/// [`Question::timeout`](crate::question::Question::timeout), the journaled
/// [`sleep`](crate::durable::sleep), [`spawn`](crate::durable::spawn), [`now`](crate::durable::now) and
/// [`uuid`](crate::durable::uuid). Inside a checkpoint's closure all of these are
/// fine: a replay never runs it. Helpers the fn calls are not read by the
/// macro, so neither guard sees a tokio timer inside one.
///
/// ```
/// use std::time::Duration;
///
/// use mcp_tasks_runtime::{Elicit, ToolError, ask_user, durable::{self, Either}, task_tool};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema, Elicit)]
/// struct Approve {
///     /// Roll out now?
///     approve: bool,
/// }
///
/// #[task_tool]
/// async fn deploy() -> Result<String, ToolError> {
///     // Roll out when approved, or on our own after a quiet hour.
///     match durable::select(
///         ask_user::<Approve>("Roll out now?"),
///         durable::sleep(Duration::from_secs(3600)),
///     )
///     .await
///     {
///         Either::Left(Ok(Approve { approve: false })) => Ok("held back".into()),
///         Either::Left(Ok(_)) => Ok("rolled out on approval".into()),
///         Either::Left(Err(e)) => Err(ToolError::new(e.to_string())),
///         Either::Right(()) => Ok("rolled out after an hour without objection".into()),
///     }
/// }
/// ```
pub fn select<A, B>(a: A, b: B) -> impl Future<Output = Either<A::Output, B::Output>> + Send
where
    A: Future + Send,
    B: Future + Send,
    A::Output: Send,
    B::Output: Send,
{
    let branches = vec![
        Either::Left(a.map(Either::Left as fn(A::Output) -> Either<A::Output, B::Output>)),
        Either::Right(b.map(Either::Right as fn(B::Output) -> Either<A::Output, B::Output>)),
    ];
    race(slot(StepKind::Select, "select".to_owned()), branches).map(|(_, out)| out)
}

/// [`select`] over any number of futures of one type: returns the index of
/// the branch that won and its output. The same rules hold; the winner's
/// index is journaled.
///
/// # Panics
///
/// When `futures` is empty: a race needs a branch.
///
/// ```
/// use mcp_tasks_runtime::{Elicit, ToolError, ask_user, durable, task_tool};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema, Elicit)]
/// struct Sign {
///     /// Signed off?
///     ok: bool,
/// }
///
/// /// The first of the on-call engineers to sign off decides.
/// #[task_tool]
/// async fn release(engineers: Vec<String>) -> Result<String, ToolError> {
///     let asks = engineers
///         .iter()
///         .map(|who| ask_user::<Sign>(format!("{who}: sign off the release?")).key(who.as_str()));
///     let (i, answer) = durable::select_all(asks).await;
///     let Sign { ok } = answer.map_err(|e| ToolError::new(e.to_string()))?;
///     Ok(format!("{} said {}", engineers[i], if ok { "yes" } else { "no" }))
/// }
/// ```
pub fn select_all<I>(
    futures: I,
) -> impl Future<Output = (usize, <I::Item as Future>::Output)> + Send
where
    I: IntoIterator,
    I::Item: Future + Send,
    <I::Item as Future>::Output: Send,
{
    let branches: Vec<I::Item> = futures.into_iter().collect();
    assert!(
        !branches.is_empty(),
        "`select_all` needs at least one future"
    );
    race(slot(StepKind::Select, "select".to_owned()), branches)
}

type Branches<F> = Vec<Option<Pin<Box<F>>>>;

async fn race<F>(slot: Slot, futures: Vec<F>) -> (usize, F::Output)
where
    F: Future + Send,
    F::Output: Send,
{
    let branches: Branches<F> = futures.into_iter().map(|f| Some(Box::pin(f))).collect();
    match slot {
        Slot::Outside | Slot::Nested => unjournaled(branches).await,
        Slot::Diverged => forever().await,
        Slot::Replay(step) => replay(step, branches).await,
        Slot::Live(step) => live(step, branches).await,
    }
}

/// Outside a task: the first branch to finish, in order.
async fn unjournaled<F: Future>(mut branches: Branches<F>) -> (usize, F::Output) {
    poll_fn(|cx| {
        for (i, b) in branches.iter_mut().enumerate() {
            if let Some(f) = b
                && let Poll::Ready(v) = f.as_mut().poll(cx)
            {
                *b = None;
                return Poll::Ready((i, v));
            }
        }
        Poll::Pending
    })
    .await
}

/// The branches as a race of the run's polls them.
struct Runner<F: Future> {
    ctx: Arc<TaskCtx>,
    branches: Branches<F>,
    info: Vec<Arc<Branch>>,
    /// A branch that ended as a question that timed out, kept while a step
    /// is on its way to the journal: another branch may be deciding at the
    /// same time (a nested `select` recording its winner), and it would win.
    held: Option<(usize, F::Output)>,
}

impl<F: Future> Runner<F> {
    fn new(ctx: Arc<TaskCtx>, position: u32, branches: Branches<F>) -> Self {
        // Nested in another race's branch, this race belongs to that one's
        // outermost race.
        let root = outer_race().unwrap_or(position);
        let info = branches
            .iter()
            .map(|_| Branch::new(position, root))
            .collect();
        Self {
            ctx,
            branches,
            info,
            held: None,
        }
    }

    /// Polls every branch still running, in order. Probing, each one only
    /// shows whether the journal already decided it (live steps start
    /// nothing), and all are polled, so that each takes its journal
    /// positions in the same order in every run. Returns the winner among
    /// those that finished: the first that is not a question that timed
    /// out, else the first, once no step of the run is in flight. Once a
    /// branch ended as a question that timed out, the others only probe
    /// (start nothing): they win only if the journal already decided them.
    fn pass(&mut self, probing: bool, cx: &mut Context<'_>) -> Option<(usize, F::Output)> {
        let mut won = None;
        let mut timed_out = self.held.take();
        for i in 0..self.branches.len() {
            let probing = probing || timed_out.is_some();
            let Poll::Ready(v) = self.poll_at(i, probing, cx) else {
                continue;
            };
            if self.info[i].timed_out.load(Ordering::SeqCst) {
                timed_out.get_or_insert((i, v));
            } else {
                won = Some((i, v));
                if !probing {
                    break;
                }
                // The others are still polled once, as they were in the run
                // that decided the race.
                for j in i + 1..self.branches.len() {
                    let _ = self.poll_at(j, true, cx);
                }
                break;
            }
        }
        if won.is_none() && timed_out.is_some() && self.ctx.busy() {
            self.held = timed_out;
            return None;
        }
        won.or(timed_out)
    }

    /// Polls branch `i` if it is still running (probing or for real); one
    /// that finishes is taken out.
    fn poll_at(&mut self, i: usize, probing: bool, cx: &mut Context<'_>) -> Poll<F::Output> {
        let Some(f) = self.branches[i].as_mut() else {
            return Poll::Pending;
        };
        let poll = poll_branch(&self.ctx, &self.info[i], probing, f.as_mut(), cx);
        if poll.is_ready() {
            self.branches[i] = None;
        }
        poll
    }

    /// Drops the branches that lost: what they left for the run's end (a
    /// question, a timer) is taken back. When branch `k`, the winner, ended
    /// as a question that timed out, so did this race, as a branch of the
    /// race it is nested in (if any).
    fn finish(self, k: usize) {
        if self.info[k].timed_out.load(Ordering::SeqCst) {
            branch_timed_out();
        }
        drop_losers(self.branches);
    }
}

/// A race the journal has decided: the same branch wins.
async fn replay<F: Future>(step: Replay, branches: Branches<F>) -> (usize, F::Output) {
    let (n, position, value) = (branches.len(), step.position, &step.value);
    let Some(k) = value
        .as_u64()
        .and_then(|k| usize::try_from(k).ok())
        .filter(|k| *k < n)
    else {
        step.ctx.fail(
            RpcError::internal(format!(
                "non-deterministic replay at journal position {position}: the `select` \
                 recorded there chose branch {value}, and this one has {n}"
            ))
            .with_data(json!({"position": position, "recorded": value, "branches": n})),
        );
        forever().await
    };
    step_span(position, StepKind::Select, "select", true).in_scope(|| ());
    let mut runner = Runner::new(step.ctx, position, branches);
    let mut found = None;
    let mut probed = false;
    let out = poll_fn(|cx| {
        if !probed {
            probed = true;
            // Every branch takes its positions as it did in the run that
            // decided the race; the winner usually finishes here.
            for i in 0..n {
                if let Poll::Ready(v) = runner.poll_at(i, true, cx)
                    && i == k
                {
                    found = Some(v);
                }
            }
        }
        if let Some(v) = found.take() {
            return Poll::Ready(v);
        }
        if probing() {
            // Nested in a race that probes: only probe, as that race does.
            return Poll::Pending;
        }
        runner.poll_at(k, false, cx)
    })
    .await;
    runner.finish(k);
    (k, out)
}

/// A race met for the first time: probe, then run the branches until one
/// wins, and journal which.
async fn live<F: Future>(step: Live, branches: Branches<F>) -> (usize, F::Output) {
    let Live {
        ctx,
        position,
        name,
    } = step;
    let unfinished = Unfinished::new(&ctx, Some(position), "a `select`".into());
    let mut runner = Runner::new(ctx.clone(), position, branches);
    let mut probed = false;
    let (k, out) = poll_fn(|cx| {
        if !probed {
            probed = true;
            if let Some(won) = runner.pass(true, cx) {
                return Poll::Ready(won);
            }
        }
        if probing() {
            // Nested in a race that probes (a branch of another `select`):
            // nothing starts until that race polls for real, so that a step
            // listed after a waiting question waits for it here too.
            return Poll::Pending;
        }
        runner.pass(false, cx).map_or(Poll::Pending, Poll::Ready)
    })
    .await;
    runner.finish(k);
    let guard = InFlight::enter(&ctx);
    let span = step_span(position, StepKind::Select, &name, false);
    let stored = ctx
        .record_value(position, StepKind::Select, name, json!(k))
        .instrument(span)
        .await;
    drop(guard);
    unfinished.done();
    if stored != json!(k) {
        // Another run decided this race first, the other way.
        ctx.fail(
            RpcError::internal(format!(
                "the `select` at journal position {position} was decided as branch {stored} by \
                 another run while this one took branch {k}"
            ))
            .with_data(json!({"position": position, "recorded": stored, "taken": k})),
        );
        forever().await
    }
    (k, out)
}
