//! A run's standing: whether it may go on, and if not why. The answers come
//! from the task's record as the store last told it (a cancel request, the
//! end, another claim), from the lease as this instance measures it, and
//! from the run's own flags (a refused write, a failure); the
//! cursor in `replay` and the steps ask before they go on.

use std::{
    future::{Future, poll_fn},
    sync::atomic::Ordering,
    task::Poll,
};

use super::context::TaskCtx;

impl TaskCtx {
    /// Whether the runner is dropping the fn (so an unfinished step being
    /// dropped is no mistake of the fn's).
    pub(super) fn exiting(&self) -> bool {
        self.flags.exiting.load(Ordering::SeqCst)
    }

    /// Whether a cancel was requested (or the task ended elsewhere).
    pub(crate) fn cancel_requested(&self) -> bool {
        self.record().is_some_and(|r| {
            let r = r.borrow();
            r.cancel_requested || r.status.is_terminal()
        })
    }

    pub(super) fn ended(&self) -> bool {
        self.record()
            .is_some_and(|r| r.borrow().status.is_terminal())
    }

    /// Whether the run no longer holds its task: a write was refused, the
    /// record shows another claim (or none), or the engine let the task go.
    /// A lease past its expiry is lost too, even before anyone says so: a
    /// process that was stopped for longer than its lease must not start
    /// another step.
    pub(super) fn lost(&self) -> bool {
        self.let_go().is_some_and(|f| f.load(Ordering::SeqCst)) || self.gone(true)
    }

    /// Whether the run must stop even in the middle of a step: as
    /// [`lost`](Self::lost), except that an engine letting the task go
    /// (draining) lets the step in flight finish, for as long as its lease
    /// holds. A lease renewed by the engine never lapses while the instance
    /// runs.
    pub(super) fn usurped(&self) -> bool {
        self.gone(false)
    }

    /// A refused write, another claim, or a lapsed lease; `no_lease` is
    /// what a record without a lease counts as. A task that ended after
    /// another claim is not this run's either: its step in flight must not
    /// finish.
    fn gone(&self, no_lease: bool) -> bool {
        if self.flags.lost.load(Ordering::SeqCst) {
            return true;
        }
        let (Some(record), Some((owner, fence))) = (self.record(), self.holder()) else {
            return false;
        };
        let r = record.borrow();
        r.fence != *fence
            || (!r.status.is_terminal()
                && r.lease.as_ref().map_or(no_lease, |l| {
                    l.owner != *owner || l.expires_at_ms <= self.run.clock.now_ms()
                }))
    }

    /// Whether a step of the run is in flight (its value on its way to the
    /// journal, or its work running); the run is woken when none is left.
    pub(super) fn busy(&self) -> bool {
        self.lock().inflight > 0
    }

    /// Whether the run is about to stop, so a live checkpoint must not start.
    pub(super) fn suspending(&self) -> bool {
        {
            let s = self.lock();
            if !s.pending.is_empty() || !s.timers.is_empty() || s.failed.is_some() {
                return true;
            }
        }
        self.cancel_requested() || self.lost()
    }

    /// Whether a new question must not be asked, nor a live checkpoint
    /// started outside a `select`: the run is failing, being cancelled, or
    /// no longer holds its task. A question already waiting
    /// (or a timer) does not stop it: questions asked together (`join!`)
    /// park together, and a checkpoint polled beside a waiting question runs
    /// before the run parks.
    pub(super) fn stopping(&self) -> bool {
        self.lock().failed.is_some() || self.cancel_requested() || self.lost()
    }

    /// Polls `work`, a live step's work, for as long as the run holds its
    /// task. Before each poll it checks the lease as this instance measures
    /// it (renewed by the engine's lease renewal) and the stored claim: once
    /// the lease has run out unrenewed (the process was paused, say, by
    /// SIGSTOP, a long GC or a suspended laptop, or the store was out of
    /// reach) or another instance claimed the task, `work` is dropped
    /// without being polled again, and `None` comes back: the run ends
    /// without recording the step, which the instance that holds the task
    /// runs again.
    pub(super) async fn while_held<F: Future>(&self, position: u32, work: F) -> Option<F::Output> {
        let mut work = std::pin::pin!(Some(work));
        poll_fn(|cx| {
            if self.usurped() {
                work.set(None);
                self.flags.lost.store(true, Ordering::SeqCst);
                self.waker.wake();
                tracing::warn!(
                    task = %crate::id::task_ref(self.task_id()),
                    position,
                    "lease lost inside a step: its work is dropped unfinished"
                );
                return Poll::Ready(None);
            }
            match work.as_mut().as_pin_mut() {
                Some(w) => w.poll(cx).map(Some),
                None => Poll::Ready(None),
            }
        })
        .await
    }
}
