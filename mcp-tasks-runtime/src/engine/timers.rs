//! The engine's two clocks: durable timers (tasks asleep in [`sleep`]) and the
//! TTL sweeper. Both are loops that sleep until their next deadline or until
//! they are woken, and both hold the engine weakly, so dropping the last
//! [`Engine`](super::Engine) ends them.
//!
//! [`sleep`]: crate::sleep

use std::{
    collections::BTreeSet,
    sync::{
        Arc, Mutex, PoisonError, Weak,
        atomic::{AtomicI64, Ordering},
    },
    time::Duration,
};

use tokio::sync::Notify;

use super::{Inner, run::Start};
use crate::{error::RpcError, id, store::TaskStatus};

/// How long a loop with nothing to do sleeps before looking again.
const IDLE: Duration = Duration::from_secs(60);

/// Sleeping tasks by wake time, and the sweeper's schedule.
#[derive(Debug)]
pub(super) struct Timers {
    due: Mutex<BTreeSet<(i64, String)>>,
    timer_wake: Notify,
    sweep_wake: Notify,
    /// When the sweeper runs next (Unix ms; `i64::MIN` until it first runs).
    sweep_at: AtomicI64,
    /// The earliest expiry among tasks created since the sweeper last asked
    /// the store for its own.
    new_expiry: AtomicI64,
}

impl Default for Timers {
    fn default() -> Self {
        Self {
            due: Mutex::default(),
            timer_wake: Notify::new(),
            sweep_wake: Notify::new(),
            sweep_at: AtomicI64::new(i64::MIN),
            new_expiry: AtomicI64::new(i64::MAX),
        }
    }
}

impl Timers {
    /// Runs task `id` again at `at` (Unix ms).
    pub(super) fn wake_at(&self, at: i64, id: &str) {
        self.due
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((at, id.to_owned()));
        self.timer_wake.notify_one();
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
    fn next_due(&self) -> Result<String, Option<Duration>> {
        let mut due = self.due.lock().unwrap_or_else(PoisonError::into_inner);
        let now = id::now_ms();
        match due.first() {
            Some((at, _)) if *at <= now => {
                Ok(due.pop_first().map(|(_, id)| id).unwrap_or_default())
            }
            Some((at, _)) => Err(Some(millis(at - now))),
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
    tokio::select! {
        () = wake.notified() => {}
        () = tokio::time::sleep(wait.unwrap_or(IDLE)) => {}
    }
}

async fn timer_loop(inner: Weak<Inner>) {
    loop {
        let Some(this) = inner.upgrade() else { return };
        match this.timers.next_due() {
            Ok(id) => {
                this.spawn(id, Start::Resume);
            }
            Err(wait) => {
                let timers = this.timers.clone();
                drop(this);
                sleep_or_wake(&timers.timer_wake, wait).await;
            }
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
        let now = id::now_ms();
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

/// Purges the expired tasks; their watchers see them end.
async fn sweep(inner: &Inner) {
    let now = id::now_ms();
    match inner.store.purge_expired(now).await {
        Ok(ids) => {
            for id in ids {
                tracing::debug!(task = %id, "task expired and purged");
                inner.watch.expired(&id, |last| {
                    let mut end = last.clone();
                    end.status = TaskStatus::Failed;
                    end.status_message = Some("Task expired".into());
                    end.error = Some(RpcError::internal("Task expired"));
                    end.pending.clear();
                    end.updated_at_ms = now.max(end.updated_at_ms);
                    end.version += 1;
                    end
                });
            }
        }
        Err(e) => tracing::warn!(error = %e, "expiry sweep failed"),
    }
}
