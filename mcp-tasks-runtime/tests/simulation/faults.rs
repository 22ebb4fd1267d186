//! A store that fails on purpose: it wraps a real store (memory or SQLite)
//! and, at chosen writes, fails them (before the write, or after it landed
//! with its acknowledgement lost), fails every write from one on (an outage
//! that lasts until the engine restarts), or never answers (the process
//! crashes there, before or after the write landed).
//!
//! Only the writes that move a task on are counted and faulted: `append`,
//! `transition`, `transition_journaled`, `claim`, `answer` and `time_out`.
//! The engine treats every store error as transient: it retries for as
//! long as a lease lasts, then gives the run up (the task is left for the
//! next claim). A failure that outlasts the retries is the permanent kind.

use std::{
    collections::BTreeMap,
    future::Future,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
};

use async_trait::async_trait;
use mcp_tasks_runtime::{
    Result,
    store::{
        Answered, Appended, Change, FrontDoorStore, JournalEntry, ListCursor, Store, StoreError,
        TaskRecord, Transition,
    },
};
use serde_json::{Map, Value};

/// When a fault strikes: the write lands first, or not at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Landing {
    Before,
    After,
}

/// The faults planned for one run, by the number of the counted write
/// (from 1, counted once the plan is armed).
#[derive(Debug, Clone, Default)]
pub(crate) struct Plan {
    /// Writes that fail: how many writes in a row fail from there, and
    /// whether the first of them lands.
    pub(crate) failures: BTreeMap<u32, (u32, Landing)>,
    /// The write from which every write fails until the engine restarts.
    pub(crate) outage: Option<u32>,
    /// The writes at which the process crashes.
    pub(crate) crashes: BTreeMap<u32, Landing>,
    /// Whether a failing `claim` may land (its answer lost).
    pub(crate) lost_claims: bool,
    /// Whether one run of failures may follow another at once (so that a
    /// write fails for longer than the engine retries it).
    pub(crate) chained: bool,
}

#[derive(Debug, Default)]
struct State {
    plan: Plan,
    armed: bool,
    writes: u32,
    /// Writes left to fail in the current run of failures.
    failing: u32,
    /// The last write that failed in a run of failures.
    last_failure: u32,
    in_outage: bool,
    crashed: bool,
    /// What struck, in order (for the report).
    log: Vec<String>,
}

/// The plan and what it did, shared by every store of one run.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    state: Mutex<State>,
    outage_hit: AtomicBool,
}

/// What to do with one write.
enum Verdict {
    Pass,
    Fail(Landing),
    Crash(Landing),
}

impl Faults {
    pub(crate) fn new(plan: Plan) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                plan,
                ..State::default()
            }),
            ..Self::default()
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts counting writes (once the task exists).
    pub(crate) fn arm(&self) {
        self.lock().armed = true;
    }

    /// Stops every fault (the reference's check after the end).
    pub(crate) fn disarm(&self) {
        self.lock().armed = false;
    }

    /// Whether a crash point was reached since the last restart.
    pub(crate) fn crashed(&self) -> bool {
        self.lock().crashed
    }

    /// Whether an outage began since the last restart.
    pub(crate) fn in_outage(&self) -> bool {
        self.outage_hit.load(Ordering::SeqCst)
    }

    /// The engine restarted: an outage ends, a crash is over.
    pub(crate) fn restarted(&self) {
        let mut s = self.lock();
        s.in_outage = false;
        s.crashed = false;
        s.failing = 0;
        self.outage_hit.store(false, Ordering::SeqCst);
    }

    /// What struck so far.
    pub(crate) fn log(&self) -> Vec<String> {
        self.lock().log.clone()
    }

    fn verdict(&self, what: &str) -> Verdict {
        let mut s = self.lock();
        if !s.armed {
            return Verdict::Pass;
        }
        if s.crashed {
            // The process is going down: nothing more gets through.
            return Verdict::Crash(Landing::Before);
        }
        s.writes += 1;
        let n = s.writes;
        if let Some(landing) = s.plan.crashes.remove(&n) {
            s.crashed = true;
            s.log
                .push(format!("write {n} ({what}): crash, {landing:?}"));
            return Verdict::Crash(landing);
        }
        if s.in_outage {
            return Verdict::Fail(Landing::Before);
        }
        if s.plan.outage == Some(n) {
            s.plan.outage = None;
            s.in_outage = true;
            self.outage_hit.store(true, Ordering::SeqCst);
            s.log.push(format!("write {n} ({what}): outage begins"));
            return Verdict::Fail(Landing::Before);
        }
        if !s.plan.chained {
            if s.failing > 0 {
                s.failing -= 1;
                s.last_failure = n;
                return Verdict::Fail(Landing::Before);
            }
            // A run of failures starts only well after the last one, so
            // that no write fails for longer than the engine retries it.
            if s.last_failure > 0 && n <= s.last_failure + 3 {
                s.plan.failures.remove(&n);
            }
        }
        if let Some((count, landing)) = s.plan.failures.remove(&n) {
            s.last_failure = n;
            s.failing = count.saturating_sub(1);
            s.log.push(format!(
                "write {n} ({what}): fails x{count}, first {landing:?}"
            ));
            // A claim that lands with its answer lost leaves the task held
            // by this instance with no run, until the engine runs it again.
            let landing = if what == "claim" && !s.plan.lost_claims {
                Landing::Before
            } else {
                landing
            };
            return Verdict::Fail(landing);
        }
        Verdict::Pass
    }
}

/// A real store behind a [`Faults`] plan.
#[derive(Debug)]
pub(crate) struct FaultyStore {
    pub(crate) inner: Arc<dyn Store>,
    pub(crate) faults: Arc<Faults>,
}

fn injected(what: &str) -> mcp_tasks_runtime::Error {
    StoreError::new(format!("injected fault: could not {what}")).into()
}

impl FaultyStore {
    async fn gate<T>(&self, what: &str, write: impl Future<Output = Result<T>>) -> Result<T> {
        match self.faults.verdict(what) {
            Verdict::Pass => write.await,
            Verdict::Fail(Landing::Before) => Err(injected(what)),
            Verdict::Fail(Landing::After) => {
                let _ = write.await;
                Err(injected(what))
            }
            Verdict::Crash(landing) => {
                if landing == Landing::After {
                    let _ = write.await;
                }
                // The process dies here: this call never returns.
                std::future::pending().await
            }
        }
    }
}

#[async_trait]
impl Store for FaultyStore {
    async fn create(&self, task: TaskRecord) -> Result<()> {
        self.inner.create(task).await
    }

    async fn create_with_journal(
        &self,
        task: TaskRecord,
        journal: Vec<JournalEntry>,
    ) -> Result<()> {
        self.inner.create_with_journal(task, journal).await
    }

    async fn get(&self, id: &str) -> Result<Option<TaskRecord>> {
        self.inner.get(id).await
    }

    async fn versions(&self, ids: &[String]) -> Result<Vec<(String, u64)>> {
        self.inner.versions(ids).await
    }

    async fn journal(&self, id: &str) -> Result<Vec<JournalEntry>> {
        self.inner.journal(id).await
    }

    async fn append(&self, id: &str, entry: JournalEntry, fence: u64) -> Result<Appended> {
        self.gate("append", self.inner.append(id, entry, fence))
            .await
    }

    async fn transition(
        &self,
        id: &str,
        change: Transition,
        now_ms: i64,
        fence: Option<u64>,
    ) -> Result<Option<TaskRecord>> {
        self.gate(
            "transition",
            self.inner.transition(id, change, now_ms, fence),
        )
        .await
    }

    async fn transition_journaled(
        &self,
        id: &str,
        entries: Vec<JournalEntry>,
        change: Transition,
        now_ms: i64,
        fence: u64,
    ) -> Result<Option<TaskRecord>> {
        self.gate(
            "transition_journaled",
            self.inner
                .transition_journaled(id, entries, change, now_ms, fence),
        )
        .await
    }

    async fn claim(
        &self,
        id: &str,
        owner: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<Option<(TaskRecord, Vec<JournalEntry>)>> {
        self.gate("claim", self.inner.claim(id, owner, now_ms, until_ms))
            .await
    }

    async fn renew(&self, owner: &str, now_ms: i64, until_ms: i64) -> Result<Vec<(String, u64)>> {
        self.inner.renew(owner, now_ms, until_ms).await
    }

    async fn release(&self, owner: &str) -> Result<()> {
        self.inner.release(owner).await
    }

    async fn claimable(&self, now_ms: i64, limit: usize) -> Result<Vec<String>> {
        self.inner.claimable(now_ms, limit).await
    }

    async fn answer(
        &self,
        id: &str,
        responses: Map<String, Value>,
        now_ms: i64,
    ) -> Result<Option<Answered>> {
        self.gate("answer", self.inner.answer(id, responses, now_ms))
            .await
    }

    async fn time_out(&self, id: &str, now_ms: i64) -> Result<Option<Answered>> {
        self.gate("time_out", self.inner.time_out(id, now_ms)).await
    }

    async fn overdue(&self, now_ms: i64, limit: usize) -> Result<Vec<String>> {
        self.inner.overdue(now_ms, limit).await
    }

    async fn unfinished(&self) -> Result<Vec<TaskRecord>> {
        self.inner.unfinished().await
    }

    async fn purge_expired(&self, now_ms: i64, limit: usize) -> Result<Vec<String>> {
        self.inner.purge_expired(now_ms, limit).await
    }

    async fn next_expiry(&self) -> Result<Option<i64>> {
        self.inner.next_expiry().await
    }

    async fn list(
        &self,
        principal: Option<&str>,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>> {
        self.inner.list(principal, after, limit).await
    }

    async fn list_all(&self, after: Option<&ListCursor>, limit: usize) -> Result<Vec<TaskRecord>> {
        self.inner.list_all(after, limit).await
    }

    async fn count_unfinished(&self, principal: Option<&str>) -> Result<usize> {
        self.inner.count_unfinished(principal).await
    }

    fn front_door(self: std::sync::Arc<Self>) -> Option<std::sync::Arc<dyn FrontDoorStore>> {
        self.inner.clone().front_door()
    }

    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<Change>> {
        self.inner.changes()
    }
}
