//! Who hears of a task's changes in this process: its subscribers and its run.
//!
//! Every state change the engine makes goes through the store and then
//! through [`Watch::notify`], which hands the new record to whoever watches
//! the task. A run learns that its task was cancelled, expired or ended
//! elsewhere from these records and from nothing else: the store's record is
//! the one source of truth, and this is the one way it travels.
//!
//! A run *books* its task here before it reads the store, and a subscriber
//! registers before it reads. A change stored after that read is notified
//! after the booking, so it reaches them; a change stored before it is in what
//! they read. Records carry a version, so a late notification never replaces
//! a newer one.
//!
//! A run that gives up on a store error may leave its task leased to this
//! instance (a claim that landed with its answer lost, a write that kept
//! failing): the task is marked *given up* here until a run of it here
//! claims it again or learns that it is no longer this instance's (see
//! `lease::renew`, which starts that run).

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
};

use tokio::sync::watch;

use crate::store::TaskRecord;

/// The tasks watched in this process.
#[derive(Debug, Default)]
pub(super) struct Watch {
    tasks: Mutex<HashMap<String, Entry>>,
    /// The tasks whose last run here gave up on a store error.
    given_up: Mutex<HashSet<String>>,
}

/// A run's progress, as far as its watchers care.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum RunState {
    #[default]
    None,
    /// Claimed, waiting for a worker: nothing of the fn runs yet.
    Queued,
    /// Running the fn.
    Running,
}

#[derive(Debug, Default)]
struct Entry {
    /// The latest record seen, once anyone has read or been told one.
    latest: Option<watch::Sender<TaskRecord>>,
    /// Where this process's run of the task is.
    run: RunState,
    /// Subscribers between registering and reading the store.
    registering: usize,
    /// Set when the engine lets the task go (draining, shutting down): the
    /// run stops at its next step. Its lease, and the step in flight, stay
    /// bound by the lease's expiry as renewed.
    let_go: Arc<AtomicBool>,
}

impl Entry {
    fn idle(&self) -> bool {
        self.run == RunState::None
            && self.registering == 0
            && self
                .latest
                .as_ref()
                .is_none_or(|tx| tx.receiver_count() == 0)
    }

    /// Takes `record` unless it is older than what the entry holds; returns a
    /// receiver of the latest.
    fn offer(&mut self, record: &TaskRecord) -> watch::Receiver<TaskRecord> {
        match &self.latest {
            Some(tx) => {
                tx.send_if_modified(|cur| replace_if_newer(cur, record));
                tx.subscribe()
            }
            None => {
                let (tx, rx) = watch::channel(record.clone());
                self.latest = Some(tx);
                rx
            }
        }
    }
}

/// Puts `new` in place of `cur` unless it is not newer: terminal states are
/// final, and notifications of concurrent changes can arrive out of order.
/// A record is newer by its version, or, at the same version, by its fence
/// (a claim moves the fence, not the version).
///
/// A lease renewal moves no version: [`Watch::extend`] moves the expiry of
/// the record held here. A newer record read or written before that renewal
/// landed carries the older expiry, and it must not take the renewal back
/// (the run would find its lease lapsed while the store holds it), so the
/// same holder's lease keeps the later of the two expiries; a lease this
/// instance found lost ([`Watch::lapse`]) stays lost.
fn replace_if_newer(cur: &mut TaskRecord, new: &TaskRecord) -> bool {
    if (new.version, new.fence) <= (cur.version, cur.fence) || cur.status.is_terminal() {
        return false;
    }
    let kept = match (&cur.lease, &new.lease) {
        (Some(old), Some(next)) if new.fence == cur.fence && old.owner == next.owner => {
            if old.expires_at_ms == i64::MIN {
                Some(i64::MIN)
            } else {
                Some(old.expires_at_ms.max(next.expires_at_ms))
            }
        }
        _ => None,
    };
    *cur = new.clone();
    if let (Some(at), Some(lease)) = (kept, &mut cur.lease) {
        lease.expires_at_ms = at;
    }
    true
}

impl Watch {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // Nothing panics while holding the lock.
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn given_up_lock(&self) -> MutexGuard<'_, HashSet<String>> {
        // Nothing panics while holding the lock.
        self.given_up.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A run of task `id` here gave up on a store error (or a call could
    /// not learn whether the task it created, leased to this instance, was
    /// stored): this instance may hold the task's lease with no run, and
    /// keep renewing it.
    pub(super) fn give_up(&self, id: &str) {
        self.given_up_lock().insert(id.to_owned());
    }

    /// A run of task `id` here got the store's answer to its claim: it runs
    /// the task, or the task is not this instance's to run.
    pub(super) fn taken_up(&self, id: &str) {
        self.given_up_lock().remove(id);
    }

    /// The tasks given up here ([`Watch::give_up`]) and not taken up since.
    pub(super) fn given_up(&self) -> Vec<String> {
        self.given_up_lock().iter().cloned().collect()
    }

    /// Hands a stored change to the task's watchers, if it has any.
    pub(super) fn notify(&self, record: &TaskRecord) {
        let mut tasks = self.lock();
        if let Some(entry) = tasks.get_mut(&record.id) {
            drop(entry.offer(record));
            if entry.idle() {
                tasks.remove(&record.id);
            }
        }
    }

    /// Books the task for a run in this process (queued for a worker).
    /// `false` when a run of it is already queued or under way here.
    pub(super) fn book(&self, id: &str) -> bool {
        let mut tasks = self.lock();
        let entry = tasks.entry(id.to_owned()).or_default();
        if entry.run != RunState::None {
            return false;
        }
        entry.run = RunState::Queued;
        true
    }

    /// Whether the task's fn is running in this process (a queued run has
    /// not started it).
    pub(super) fn running(&self, id: &str) -> bool {
        self.lock()
            .get(id)
            .is_some_and(|e| e.run == RunState::Running)
    }

    /// The booked run got its worker and its claim: its view of the task, from `read`
    /// (what it read from the store after claiming) and any change notified
    /// since.
    pub(super) fn attach(&self, read: &TaskRecord) -> watch::Receiver<TaskRecord> {
        let mut tasks = self.lock();
        let entry = tasks.entry(read.id.clone()).or_default();
        entry.run = RunState::Running;
        entry.let_go = Arc::default();
        entry.offer(read)
    }

    /// The flag [`Watch::lose`] sets for the run of task `id` attached here.
    pub(super) fn let_go(&self, id: &str) -> Arc<AtomicBool> {
        self.lock()
            .get(id)
            .map(|e| e.let_go.clone())
            .unwrap_or_default()
    }

    /// Ends the run's booking.
    pub(super) fn release(&self, id: &str) {
        let mut tasks = self.lock();
        if let Some(entry) = tasks.get_mut(id) {
            entry.run = RunState::None;
            if entry.idle() {
                tasks.remove(id);
            }
        }
    }

    /// Registers a subscriber that is about to read the task; call
    /// [`Watch::subscribed`] with what it read, or [`Watch::abandon`].
    pub(super) fn register(&self, id: &str) {
        self.lock().entry(id.to_owned()).or_default().registering += 1;
    }

    /// Completes [`Watch::register`].
    pub(super) fn subscribed(&self, read: &TaskRecord) -> watch::Receiver<TaskRecord> {
        let mut tasks = self.lock();
        let entry = tasks.entry(read.id.clone()).or_default();
        entry.registering = entry.registering.saturating_sub(1);
        let rx = entry.offer(read);
        if read.status.is_terminal() && entry.idle() {
            tasks.remove(&read.id);
        }
        rx
    }

    /// Undoes [`Watch::register`] (the read failed).
    pub(super) fn abandon(&self, id: &str) {
        let mut tasks = self.lock();
        if let Some(entry) = tasks.get_mut(id) {
            entry.registering = entry.registering.saturating_sub(1);
            if entry.idle() {
                tasks.remove(id);
            }
        }
    }

    /// Removes task `id`'s entry if no one uses it any more.
    #[cfg(feature = "server")]
    pub(super) fn prune(&self, id: &str) {
        let mut tasks = self.lock();
        if tasks.get(id).is_some_and(Entry::idle) {
            tasks.remove(id);
        }
    }

    /// How many tasks have an entry.
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether anyone here watches task `id` (a run or a subscriber).
    pub(super) fn watched(&self, id: &str) -> bool {
        self.lock().contains_key(id)
    }

    /// The tasks someone here follows (a listen stream, a waiting call)
    /// that do not run here: what another instance does to them reaches
    /// this process only through the store.
    pub(super) fn followed_elsewhere(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, e)| e.run == RunState::None)
            .filter(|(_, e)| {
                e.latest
                    .as_ref()
                    .is_some_and(|tx| tx.receiver_count() > 0 && !tx.borrow().status.is_terminal())
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The tasks running here, with the version each run knows.
    pub(super) fn running_versions(&self) -> Vec<(String, u64)> {
        self.lock()
            .iter()
            .filter(|(_, e)| e.run == RunState::Running)
            .filter_map(|(id, e)| Some((id.clone(), e.latest.as_ref()?.borrow().version)))
            .collect()
    }

    /// The run here holds task `id` until `until_ms` now (its lease was
    /// renewed).
    pub(super) fn extend(&self, id: &str, until_ms: i64) {
        if let Some(tx) = self.lock().get(id).and_then(|e| e.latest.as_ref()) {
            tx.send_if_modified(|r| match &mut r.lease {
                Some(lease) if lease.expires_at_ms < until_ms => {
                    lease.expires_at_ms = until_ms;
                    true
                }
                _ => false,
            });
        }
    }

    /// The engine lets task `id` go (draining, shutting down): its run stops
    /// at its next step, once the step in flight is journaled. The record
    /// keeps its lease, so a run paused past that lease (SIGSTOP, say) still
    /// finds it lapsed, and drops the step in flight rather than finish it
    /// unheld.
    pub(super) fn lose(&self, id: &str) {
        if let Some(entry) = self.lock().get(id) {
            entry.let_go.store(true, Ordering::SeqCst);
            // Wakes the run, which reads its standing again.
            if let Some(tx) = &entry.latest {
                tx.send_modify(|_| {});
            }
        }
    }

    /// The run here lost task `id` (the renewal found its lease held by no
    /// one here): its view of the record shows the lease lapsed, so it stops
    /// at once, even in the middle of a step.
    pub(super) fn lapse(&self, id: &str) {
        if let Some(tx) = self.lock().get(id).and_then(|e| e.latest.as_ref()) {
            tx.send_if_modified(|r| match &mut r.lease {
                Some(lease) => {
                    lease.expires_at_ms = i64::MIN;
                    true
                }
                None => false,
            });
        }
    }

    /// The task was purged: its watchers see it end `failed` ("Task
    /// expired"), and a run of it stops at its next step.
    pub(super) fn expired(&self, id: &str, expired: impl FnOnce(&TaskRecord) -> TaskRecord) {
        let mut tasks = self.lock();
        if let Some(entry) = tasks.get_mut(id) {
            if let Some(tx) = &entry.latest {
                let last = tx.borrow().clone();
                if !last.status.is_terminal() {
                    tx.send_replace(expired(&last));
                }
            }
            if entry.idle() {
                tasks.remove(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Lease;

    fn held(version: u64, fence: u64, owner: &str, expires_at_ms: i64) -> TaskRecord {
        let mut r = TaskRecord::new("t", "tool", 0);
        r.version = version;
        r.fence = fence;
        r.lease = Some(Lease {
            owner: owner.to_owned(),
            expires_at_ms,
        });
        r
    }

    fn expiry(r: &TaskRecord) -> i64 {
        r.lease.as_ref().map_or(0, |l| l.expires_at_ms)
    }

    #[test]
    fn a_newer_record_does_not_take_a_renewal_back() {
        let watch = Watch::default();
        let mut rx = watch.attach(&held(1, 1, "a", 1_000));
        watch.extend("t", 2_000);
        // A status write that landed before the renewal, notified after it.
        watch.notify(&held(2, 1, "a", 1_000));
        assert_eq!(rx.borrow_and_update().version, 2);
        assert_eq!(expiry(&rx.borrow()), 2_000);
        // A later write carries a later expiry, which it keeps.
        watch.notify(&held(3, 1, "a", 3_000));
        assert_eq!(expiry(&rx.borrow()), 3_000);
    }

    #[test]
    fn another_claim_or_a_lost_lease_is_taken_as_it_is() {
        let watch = Watch::default();
        let rx = watch.attach(&held(1, 1, "a", 5_000));
        // Another claim (a new fence) with an earlier expiry.
        watch.notify(&held(2, 2, "b", 4_000));
        assert_eq!(rx.borrow().lease.as_ref().unwrap().owner, "b");
        assert_eq!(expiry(&rx.borrow()), 4_000);

        let watch = Watch::default();
        let rx = watch.attach(&held(1, 1, "a", 5_000));
        watch.lapse("t");
        watch.notify(&held(2, 1, "a", 6_000));
        assert_eq!(
            expiry(&rx.borrow()),
            i64::MIN,
            "a lapsed lease stays lapsed"
        );
    }
}
