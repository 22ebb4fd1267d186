//! The engine's two clocks: durable timers (tasks asleep in [`sleep`], and
//! the deadlines of questions asked with [`Question::timeout`]) and the TTL
//! sweeper. Both are loops that sleep until their next deadline or until
//! they are woken, and both hold the engine weakly, so dropping the last
//! [`Engine`](super::Engine) ends them. The timers here are what this
//! process knows of; the periodic scan finds the rest in the store (timers
//! set before a restart, or by another instance).
//!
//! [`sleep`]: crate::durable::sleep
//! [`Question::timeout`]: crate::question::Question::timeout

use std::{
    collections::BTreeSet,
    sync::{
        Arc, Mutex, PoisonError, Weak,
        atomic::{AtomicI64, Ordering},
    },
    time::Duration,
};

use tokio::sync::Notify;

use super::{Inner, runner::Start};
use crate::{
    clock,
    error::RpcError,
    store::{PURGE_BATCH, TaskRecord, TaskStatus, Transition},
};

/// How long a loop with nothing to do sleeps before looking again.
const IDLE: Duration = Duration::from_secs(60);

/// What a timer does when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    /// Runs a sleeping task again.
    Run,
    /// Times out a parked task's questions whose deadline has passed.
    Deadline,
}

/// Sleeping tasks by wake time, parked ones by their next question
/// deadline, and the sweeper's schedule.
#[derive(Debug)]
pub(super) struct Timers {
    due: Mutex<BTreeSet<(i64, String, Due)>>,
    timer_wake: Notify,
    sweep_wake: Notify,
    /// When the sweeper runs next (Unix ms; `i64::MIN` until it first runs).
    sweep_at: AtomicI64,
    /// The earliest expiry among tasks created since the sweeper last asked
    /// the store for its own.
    new_expiry: AtomicI64,
    /// The engine's clock.
    clock: Arc<clock::Clock>,
}

impl Timers {
    pub(super) fn new(clock: Arc<clock::Clock>) -> Self {
        Self {
            clock,
            due: Mutex::default(),
            timer_wake: Notify::new(),
            sweep_wake: Notify::new(),
            sweep_at: AtomicI64::new(i64::MIN),
            new_expiry: AtomicI64::new(i64::MAX),
        }
    }

    /// Wakes both loops, to look at their deadlines again (the clock moved).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(super) fn rouse(&self) {
        self.timer_wake.notify_one();
        self.sweep_wake.notify_one();
    }
}

impl Timers {
    fn insert(&self, at: i64, id: &str, due: Due) {
        self.due
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((at, id.to_owned(), due));
        self.timer_wake.notify_one();
    }

    /// Sets the timer a stored task needs, if any: a sleeping task runs
    /// again at its wake time, and a parked one has its questions timed out
    /// at the earliest deadline.
    pub(super) fn follow(&self, record: &TaskRecord) {
        match (record.status, record.wake_at_ms) {
            (TaskStatus::Working, Some(at)) => self.insert(at, &record.id, Due::Run),
            (TaskStatus::InputRequired, Some(at)) => self.insert(at, &record.id, Due::Deadline),
            _ => {}
        }
    }

    /// A task that expires at `at` was just stored: wake the sweeper only if
    /// it would otherwise run too late (not on every create: each sweep costs
    /// the store two queries).
    pub(super) fn expires(&self, at: Option<i64>) {
        let Some(at) = at else { return };
        self.new_expiry.fetch_min(at, Ordering::SeqCst);
        if at < self.sweep_at.load(Ordering::SeqCst) {
            self.sweep_wake.notify_one();
        }
    }

    /// Takes the first timer if it is due; otherwise says how long to wait.
    fn next_due(&self) -> Result<(String, Due), Option<Duration>> {
        let mut due = self.due.lock().unwrap_or_else(PoisonError::into_inner);
        let now = self.clock.now_ms();
        match due.first() {
            Some((at, ..)) if *at <= now => Ok(due
                .pop_first()
                .map(|(_, id, due)| (id, due))
                .unwrap_or((String::new(), Due::Run))),
            Some((at, ..)) => Err(Some(millis(at - now))),
            None => Err(None),
        }
    }
}

fn millis(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// Starts both loops.
pub(super) fn start(inner: &Arc<Inner>) {
    tokio::spawn(timer_loop(Arc::downgrade(inner)));
    tokio::spawn(sweep_loop(Arc::downgrade(inner)));
}

/// Sleeps for `wait` (or [`IDLE`]) or until `wake` fires. A `notify_one`
/// that came before the wait is not lost: it left a permit.
async fn sleep_or_wake(wake: &Notify, wait: Option<Duration>) {
    // `biased`: the same order every time (either way the loop looks again).
    tokio::select! {
        biased;
        () = wake.notified() => {}
        () = tokio::time::sleep(wait.unwrap_or(IDLE)) => {}
    }
}

async fn timer_loop(inner: Weak<Inner>) {
    loop {
        let Some(this) = inner.upgrade() else { return };
        match this.timers.next_due() {
            Ok((id, Due::Run)) => {
                this.spawn(id, Start::Woken);
            }
            Ok((id, Due::Deadline)) => {
                tokio::spawn(async move { time_out(&this, &id).await });
            }
            Err(wait) => {
                let timers = this.timers.clone();
                drop(this);
                sleep_or_wake(&timers.timer_wake, wait).await;
            }
        }
    }
}

/// How many parked tasks with overdue questions one scan reads.
const OVERDUE_PAGE: usize = 256;

/// Times out the questions whose deadline has passed in every parked task
/// the store knows of (timers set before a restart, or on another
/// instance). Part of the engine's periodic scan, the first one at startup
/// included.
pub(super) async fn time_out_overdue(inner: &Arc<Inner>) {
    match inner
        .store
        .overdue(inner.clock.now_ms(), OVERDUE_PAGE)
        .await
    {
        Ok(ids) => {
            for id in ids {
                time_out(inner, &id).await;
            }
        }
        Err(e) => {
            tracing::warn!(error = %crate::id::Redacted(&e), "could not look for questions past their deadline")
        }
    }
}

/// Looks at the questions task `id` asked in flight: gone with the lease of
/// the run that asked them once it lapsed (the task then runs again, on the
/// first instance to claim it), else looked at again when it would lapse.
async fn lapse(inner: &Arc<Inner>, id: &str) {
    match inner.transition(id, Transition::Lapse, None).await {
        Ok(Some(record)) if record.status == TaskStatus::Working => {
            tracing::info!(task = %crate::id::task_ref(id), "questions asked in flight withdrawn: the run that asked them stopped");
            inner.spawn(id.to_owned(), Start::Resume);
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(task = %crate::id::task_ref(id), error = %crate::id::Redacted(&e), "could not look at questions asked in flight")
        }
    }
}

/// Times out task `id`'s questions whose deadline has passed, in one store
/// operation (the answer may have come first: then nothing changes); its
/// watchers hear of it, and it runs again once nothing is left
/// outstanding.
async fn time_out(inner: &Arc<Inner>, id: &str) {
    match inner.store.time_out(id, inner.clock.now_ms()).await {
        Ok(Some(timed_out)) => {
            if timed_out.accepted > 0 {
                tracing::debug!(task = %id, questions = timed_out.accepted, "questions timed out");
                inner.announce(&timed_out.record);
            }
            if timed_out.runnable {
                inner.spawn(id.to_owned(), Start::Woken);
            } else if timed_out.record.pending.iter().any(|p| p.in_flight) {
                lapse(inner, id).await;
            } else if timed_out
                .record
                .wake_at_ms
                .is_some_and(|at| at > inner.clock.now_ms())
            {
                // Questions with later deadlines are left.
                inner.timers.follow(&timed_out.record);
            }
        }
        Ok(None) => {}
        // The periodic scan tries again.
        Err(e) => {
            tracing::warn!(task = %crate::id::task_ref(id), error = %crate::id::Redacted(&e), "could not time out questions")
        }
    }
}

async fn sweep_loop(inner: Weak<Inner>) {
    loop {
        let Some(this) = inner.upgrade() else { return };
        // Tasks created from here on are either seen by `next_expiry` below
        // or leave their expiry in `new_expiry` (read after `sweep_at` is
        // set), or see the new `sweep_at` and wake the sweeper themselves.
        this.timers.new_expiry.store(i64::MAX, Ordering::SeqCst);
        sweep(&this).await;
        let next = this.store.next_expiry().await.ok().flatten();
        let now = this.clock.now_ms();
        let mut at = next.map_or(i64::MAX, |at| at.max(now)).min(now + 60_000);
        this.timers.sweep_at.store(at, Ordering::SeqCst);
        let created = this.timers.new_expiry.load(Ordering::SeqCst);
        if created < at {
            at = created.max(now);
            this.timers.sweep_at.store(at, Ordering::SeqCst);
        }
        let timers = this.timers.clone();
        drop(this);
        sleep_or_wake(&timers.sweep_wake, Some(millis(at - now))).await;
    }
}

/// What the watchers of a task purged at `now_ms` see last: the record they
/// had, ended `failed` ("Task expired").
pub(super) fn expired_end(last: &TaskRecord, now_ms: i64) -> TaskRecord {
    let mut end = last.clone();
    end.status = TaskStatus::Failed;
    end.status_message = Some("Task expired".into());
    end.error = Some(RpcError::internal("Task expired"));
    end.pending.clear();
    end.updated_at_ms = now_ms.max(end.updated_at_ms);
    end.version += 1;
    end
}

/// Purges the expired tasks, a batch at a time; their watchers see them end.
async fn sweep(inner: &Inner) {
    let now = inner.clock.now_ms();
    loop {
        match inner.store.purge_expired(now, PURGE_BATCH).await {
            Ok(ids) => {
                let full = ids.len() >= PURGE_BATCH;
                crate::metrics::expired(ids.len());
                for id in ids {
                    tracing::debug!(task = %id, "task expired and purged");
                    inner.watch.expired(&id, |last| expired_end(last, now));
                }
                if !full {
                    break;
                }
                // Let the writes that queued behind this batch go first.
                tokio::task::yield_now().await;
            }
            Err(e) => {
                tracing::warn!(error = %crate::id::Redacted(&e), "expiry sweep failed");
                break;
            }
        }
    }
    if let Err(e) = inner.front_door.purge_sessions(now).await {
        tracing::warn!(error = %crate::id::Redacted(&e), "session sweep failed");
    }
}
