//! Ownership across instances: this instance renews the leases of the tasks
//! it runs, stops the runs whose lease it lost, and looks for tasks that no
//! live lease holds (after an instance died, or when a timer fell due on
//! another one) to claim them. Every task sharing the store runs on exactly
//! one instance at a time: a claim moves the task's fence on, and the store
//! refuses the writes of any earlier claim.
//!
//! The renewal extends every lease this instance holds, in one write, and
//! so also the lease of a task whose run here gave up on a store error (its
//! claim landed but the answer was lost, or a write kept failing past the
//! retries). Such a run marks its task given up (`Watch::give_up`); once
//! the store answers a renewal again, each task given up and not booked
//! here is run again (claimed anew: an instance may claim what it holds).
//! Only a run's own failure marks a task, so a run just created or claimed
//! here, and not yet registered, is never taken for one given up; and the
//! claim is the store's atomic step, so on a fleet the task runs here only
//! if this instance still holds it or no live lease does.

use std::{
    collections::HashMap,
    sync::{Arc, Weak, atomic::Ordering},
    time::Duration,
};

use tokio::sync::broadcast;

use super::{Inner, runner::Start};
use crate::store::Change;

/// How many claimable tasks one scan reads.
const SCAN_PAGE: usize = 256;

/// Starts the renewing and the scanning, and follows the store's change
/// feed when it has one.
pub(super) fn start(inner: &Arc<Inner>) {
    tokio::spawn(renew_loop(Arc::downgrade(inner)));
    tokio::spawn(scan_loop(Arc::downgrade(inner)));
    if let Some(changes) = inner.store.changes() {
        tokio::spawn(feed_loop(Arc::downgrade(inner), changes));
    }
}

/// Acts on the changes other instances make, as the store announces them:
/// a task that became claimable is run here if a worker is free, and a
/// change to a task running or watched here reaches its run and watchers
/// (a cancel request made through another instance, say, or an expiry that
/// another instance purged). When the store cannot say what changed
/// ([`Change::Missed`]), this instance looks again at the claimable tasks,
/// at every task followed here that runs elsewhere, and at the versions of
/// the tasks running here, once for all the announcements waiting: each
/// such pass costs a read per task followed, and one for those running.
async fn feed_loop(inner: Weak<Inner>, mut changes: broadcast::Receiver<Change>) {
    use broadcast::error::{RecvError, TryRecvError};
    loop {
        let mut next = Some(changes.recv().await);
        let Some(this) = inner.upgrade() else { return };
        let mut missed = false;
        while let Some(change) = next {
            match change {
                Ok(Change::Runnable(id)) => {
                    let free = this.permits.available_permits() > 0;
                    if free && !this.shutting_down.load(Ordering::SeqCst) {
                        this.spawn(id, Start::Resume);
                    }
                }
                Ok(Change::Changed(id)) => {
                    if this.watch.watched(&id) {
                        refresh(&this, &id).await;
                    }
                }
                Ok(_) | Err(RecvError::Lagged(_)) => missed = true,
                Err(RecvError::Closed) => return,
            }
            next = match changes.try_recv() {
                Ok(change) => Some(Ok(change)),
                Err(TryRecvError::Lagged(n)) => Some(Err(RecvError::Lagged(n))),
                Err(TryRecvError::Closed) => Some(Err(RecvError::Closed)),
                Err(TryRecvError::Empty) => None,
            };
        }
        if missed {
            scan(&this).await;
            for id in this.watch.followed_elsewhere() {
                refresh(&this, &id).await;
            }
            catch_up(&this).await;
        }
    }
}

/// Hands each run here whose task another instance changed (a cancel
/// request, say) the stored record, from one read of the versions, so that
/// it stops at its next step rather than at the next lease renewal.
async fn catch_up(inner: &Inner) {
    let running = inner.watch.running_versions();
    if running.is_empty() {
        return;
    }
    let ids: Vec<String> = running.iter().map(|(id, _)| id.clone()).collect();
    let stored = match inner.store.versions(&ids).await {
        Ok(stored) => stored.into_iter().collect::<HashMap<String, u64>>(),
        Err(e) => {
            tracing::warn!(error = %crate::id::Redacted(&e), "could not read the versions of the tasks running here");
            return;
        }
    };
    for (id, known) in running {
        if stored.get(&id).is_none_or(|version| *version > known) {
            refresh(inner, &id).await;
        }
    }
}

/// Reads task `id` again and hands it to its watchers here; a task that is
/// gone was purged (its time to live ran out), and they see it end.
async fn refresh(inner: &Inner, id: &str) {
    match inner.store.get(id).await {
        Ok(Some(record)) => inner.watch.notify(&record),
        Ok(None) => {
            let now = inner.clock.now_ms();
            inner
                .watch
                .expired(id, |last| super::timers::expired_end(last, now));
        }
        Err(e) => tracing::warn!(
            task = %crate::id::task_ref(id),
            error = %crate::id::Redacted(&e),
            "could not read a task another instance changed"
        ),
    }
}

async fn renew_loop(inner: Weak<Inner>) {
    loop {
        let Some(this) = inner.upgrade() else { return };
        let every = this.config.lease / 3;
        renew(&this).await;
        drop(this);
        tokio::time::sleep(every).await;
    }
}

/// Renews this instance's leases; a run whose task is no longer held stops,
/// a run whose task changed elsewhere (a cancel request on another
/// instance) hears of it, and a task given up here runs again.
async fn renew(inner: &Arc<Inner>) {
    // The runs to check, from before the renewal: a run that starts after
    // it holds a lease the renewal could not have seen.
    let running = inner.watch.running_versions();
    let now = inner.clock.now_ms();
    let until = now.saturating_add(inner.config.lease_ms());
    let held = match inner.store.renew(&inner.config.owner, now, until).await {
        Ok(held) => held.into_iter().collect::<HashMap<String, u64>>(),
        Err(e) => {
            tracing::warn!(error = %crate::id::Redacted(&e), "could not renew leases");
            return;
        }
    };
    // The store answers again: run the tasks whose runs here gave up (a
    // draining instance leaves them, with the rest, to the next claim).
    if !inner.shutting_down.load(Ordering::SeqCst) {
        for id in inner.watch.given_up() {
            inner.spawn(id, Start::Retake);
        }
    }
    for (id, known) in running {
        match held.get(&id) {
            None => {
                tracing::warn!(task = %crate::id::task_ref(&id), "lease lost; the run here stops");
                inner.watch.lapse(&id);
            }
            Some(version) => {
                inner.watch.extend(&id, until);
                if *version > known {
                    refresh(inner, &id).await;
                }
            }
        }
    }
}

async fn scan_loop(inner: Weak<Inner>) {
    loop {
        let Some(this) = inner.upgrade() else { return };
        let pause = if this.shutting_down.load(Ordering::SeqCst) {
            this.config.scan
        } else {
            scan(&this).await
        };
        let wake = this.scan_wake.clone();
        drop(this);
        // `biased`: the same order every time (either way the loop scans).
        tokio::select! {
            biased;
            () = wake.notified() => {}
            () = tokio::time::sleep(pause) => {}
        }
    }
}

/// Times out the questions past their deadline, then starts a run of every
/// task no live lease holds (each claims it, or finds another instance was
/// first); returns how long to wait before the next scan: none when it found
/// new work and there may be more. While work is waiting beyond a full page,
/// each run that ends here wakes the next scan.
async fn scan(inner: &Arc<Inner>) -> Duration {
    super::timers::time_out_overdue(inner).await;
    let ids = match inner.store.claimable(inner.clock.now_ms(), SCAN_PAGE).await {
        Ok(ids) => ids,
        Err(e) => {
            tracing::warn!(error = %crate::id::Redacted(&e), "could not look for claimable tasks");
            return inner.config.scan;
        }
    };
    let full = ids.len() == SCAN_PAGE;
    inner.backlog.store(full, Ordering::SeqCst);
    let started = ids
        .into_iter()
        .filter(|id| inner.spawn(id.clone(), Start::Resume))
        .count();
    if full && started > 0 {
        Duration::ZERO
    } else {
        inner.config.scan
    }
}
