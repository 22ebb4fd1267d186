//! How a run's context drives the task's fn ([`TaskCtx::drive`]) and how
//! the run ends ([`Exit`]).

use std::{
    future::{Future, poll_fn},
    panic::AssertUnwindSafe,
    sync::{Arc, atomic::Ordering},
    task::Poll,
};

use futures::FutureExt;
use tokio::sync::watch;

use crate::{
    error::RpcError,
    journal::PendingInput,
    store::TaskRecord,
    tool::{ToolFuture, ToolOutcome},
};

use super::{context::TaskCtx, scope::in_scope};

/// How a run ended: the fn returned, or it stopped early and why.
#[derive(Debug)]
pub(crate) enum Exit {
    /// The fn returned.
    Done(ToolOutcome),
    /// Waiting for answers to these questions.
    Park(Vec<PendingInput>),
    /// Asleep until this time (Unix ms).
    Sleep(i64),
    /// The run must end `failed` with this error.
    Fail(RpcError),
    /// A cancel was requested.
    Cancelled,
    /// The task ended elsewhere (cancelled while queued, expired).
    Ended,
    /// The run no longer holds the task: it stops without a word.
    Lost,
    /// A replay check reached the end of the journal: the next step would
    /// run live (see [`TaskCtx::check`]).
    Replayed,
}

impl Exit {
    /// How the run ended, in a word (for traces).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Done(Ok(_)) => "done",
            Self::Done(Err(_)) | Self::Fail(_) => "failed",
            Self::Park(_) => "parked",
            Self::Sleep(_) => "asleep",
            Self::Cancelled => "cancelled",
            Self::Ended => "ended elsewhere",
            Self::Lost => "lost its lease",
            Self::Replayed => "replayed its journal",
        }
    }
}

impl TaskCtx {
    /// Polls the fn's future inside this context until it returns or must
    /// stop. A panic in the fn ends it like an internal error.
    pub(crate) async fn drive(self: &Arc<Self>, fut: ToolFuture) -> Exit {
        let fut = in_scope(
            Some((self.clone(), None)),
            AssertUnwindSafe(fut).catch_unwind(),
        );
        let mut fut = std::pin::pin!(fut);
        let mut driving = std::pin::pin!(poll_fn(|cx| {
            self.waker.register(cx.waker());
            match fut.as_mut().poll(cx) {
                Poll::Ready(Ok(_)) if self.flags.withdrawn.load(Ordering::SeqCst) => {
                    Poll::Ready(Exit::Cancelled)
                }
                // The fn returned after the run lost its task (a step's work
                // dropped for a lapsed lease hands the fn an error it may
                // return): that end is not the task's, whose holder replays it.
                Poll::Ready(Ok(_)) if self.flags.lost.load(Ordering::SeqCst) => {
                    Poll::Ready(Exit::Lost)
                }
                Poll::Ready(Ok(outcome)) => Poll::Ready(Exit::Done(outcome)),
                Poll::Ready(Err(panic)) => Poll::Ready(Exit::Done(Err(panicked(&*panic)))),
                Poll::Pending => self.exit().map_or(Poll::Pending, Poll::Ready),
            }
        }));
        // A change to the stored task (a cancel request, its end) wakes the
        // run so that it can stop; an inline call has none until it becomes
        // a task.
        let mut changes = self.record().cloned();
        let mut inline = changes.is_none();
        let exit = loop {
            // `biased`: the run's own progress first, the same order every
            // time (a deterministic simulation replays it step for step).
            tokio::select! {
                biased;
                exit = &mut driving => break exit,
                changed = changed(changes.as_mut()) => if !changed { changes = None },
                () = self.became(), if inline => {
                    inline = false;
                    changes = self.record().cloned();
                }
            }
        };
        // The fn's future is dropped on return: steps it leaves unfinished
        // are dropped by the runner, not abandoned by the fn.
        self.flags.exiting.store(true, Ordering::SeqCst);
        exit
    }

    /// What the runner should do now that the fn is pending: `None` to keep
    /// polling, or why it stops.
    fn exit(&self) -> Option<Exit> {
        let mut s = self.lock();
        // A run that no longer holds its task stops even mid-step: the step's
        // work must not go on, and its value could not be recorded.
        if self.usurped() {
            return Some(Exit::Lost);
        }
        if s.inflight > 0 && !self.flags.halted.load(Ordering::SeqCst) {
            return None;
        }
        if self.ended() {
            return Some(Exit::Ended);
        }
        if self.lost() {
            return Some(Exit::Lost);
        }
        if let Some(e) = &s.failed {
            return Some(Exit::Fail(e.clone()));
        }
        if self.cancel_requested() {
            return Some(Exit::Cancelled);
        }
        if s.reached.is_some() {
            return Some(Exit::Replayed);
        }
        // A question asked in flight keeps the run going: what it waits for
        // runs on, and would be lost if the run parked or slept.
        if s.asking > 0 {
            return None;
        }
        // A question and a timer at once: park; the replay after the answer
        // sleeps again on the journaled deadline. A question raced against
        // a timer (in one `select`, or a nest of them) times out when the timer fires, which
        // ends the race; the replay finds the timer's branch decided.
        if !s.pending.is_empty() {
            let mut pending = std::mem::take(&mut s.pending);
            for p in &mut pending {
                let raced = s
                    .timers
                    .iter()
                    .filter(|t| t.race.is_some() && t.race == p.race)
                    .map(|t| t.at)
                    .min();
                if let Some(at) = raced {
                    p.deadline_ms = Some(p.deadline_ms.map_or(at, |own| own.min(at)));
                }
            }
            return Some(Exit::Park(pending));
        }
        let at = s.wake_at();
        s.timers.clear();
        at.map(Exit::Sleep)
    }
}

/// Waits for the next change of the stored task; `false` once no more can
/// come (or there is no stored task: an inline call).
async fn changed(record: Option<&mut watch::Receiver<TaskRecord>>) -> bool {
    match record {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// The error a panicking fn ends with.
fn panicked(panic: &(dyn std::any::Any + Send)) -> RpcError {
    RpcError::internal(format!("{PANICKED}: {}", panic_message(panic)))
}

/// How the error of a panicking fn begins.
pub(crate) const PANICKED: &str = "the tool panicked";

/// A panic's message, when its payload is a string.
pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-string payload".into())
}
