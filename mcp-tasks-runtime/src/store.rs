//! Where tasks live: the [`Store`] trait and its implementations.
//!
//! A store is a small async trait: the engine keeps no task state that matters
//! in memory, so everything a task needs to resume (its row and its journal)
//! goes through these methods. Each method is atomic on its own. What a
//! task's row holds, and the state machine every store applies to it, are
//! in `record`.
//!
//! What the MCP server keeps besides tasks (spent `requestState`s, the
//! sessions of 2025-11-25 clients) is front-door state, the
//! [`FrontDoorStore`] trait. The stores of this crate keep both.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::error::Result;

pub(crate) mod error;
mod front_door;
mod listing;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
mod record;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(all(feature = "testing", feature = "postgres"))]
pub mod testing;

pub use crate::journal::{JournalEntry, PendingInput, StepKind, TIMED_OUT};
pub use error::StoreError;
pub use front_door::{FrontDoorStore, SESSION_TTL};
pub use listing::{ListCursor, PageFrom, TaskCounts, TaskFilter, TaskSummary};
pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresStore, PostgresStoreBuilder, PostgresTls};
pub use record::{Answered, Lease, TaskRecord, TaskStatus, Transition};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use sql::SchemaVersions;
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteStore, SqliteStoreBuilder, Synchronous};

/// What [`Store::append`] did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Appended {
    /// The entry is journaled.
    Recorded,
    /// The position already held an entry, which is kept and returned: the
    /// run goes on with the stored value.
    Kept(JournalEntry),
    /// The writer's claim is stale (another instance claimed the task since,
    /// or the task is gone): nothing was written, and the run must stop.
    Fenced,
}

/// How many expired tasks the engine's sweep asks
/// [`Store::purge_expired`] to delete at a time: a purge of many tasks is
/// many short transactions, with other writes between them, not one long
/// one that holds every create back until it ends.
pub const PURGE_BATCH: usize = 500;

/// Durable storage for tasks and their journals.
///
/// Every method is atomic. `create` and `append` return only once the data is
/// durable (for stores that are durable at all). Implementations: [`MemoryStore`]
/// (tests), [`SqliteStore`] (the embedded default), and `PostgresStore`
/// (feature `postgres`: one database that several processes share).
///
/// A store of your own implements twelve methods: `create`, `get`,
/// `journal`, `append`, `transition`, `claim`, `renew`, `release`,
/// `answer`, `time_out`, `purge_expired` and `list_all`. The others are
/// provided, correct on top of those: the reads that look for tasks
/// (`claimable`, `overdue`, `unfinished`, `next_expiry`, `list`,
/// `count_unfinished`, ...) page through [`Store::list_all`]. That reads
/// every row, so a store with indexes should override them, as the stores of
/// this crate do. The contract kit checks a store:
/// `store_contract_tests!` (the crate `mcp-tasks-store-contract`).
///
/// What the MCP server keeps besides tasks (spent `requestState`s,
/// protocol sessions) is not task storage: it is [`FrontDoorStore`]'s,
/// which a task store may also implement ([`Store::front_door`]).
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// Inserts a new task. Fails, changing nothing, if a task with that id
    /// exists.
    async fn create(&self, task: TaskRecord) -> Result<()>;

    /// Inserts a new task together with the journal it starts from (a call
    /// that began inline and carries on as a task). The default inserts, then
    /// appends; stores that can should do it in one transaction.
    async fn create_with_journal(
        &self,
        task: TaskRecord,
        journal: Vec<JournalEntry>,
    ) -> Result<()> {
        let (id, fence) = (task.id.clone(), task.fence);
        self.create(task).await?;
        for entry in journal {
            self.append(&id, entry, fence).await?;
        }
        Ok(())
    }

    /// Reads a task.
    async fn get(&self, id: &str) -> Result<Option<TaskRecord>>;

    /// The stored version ([`TaskRecord::version`]) of each of the tasks
    /// `ids` that still exists, in any order; a task missing from the answer
    /// is gone. When the store cannot say which tasks changed
    /// ([`Change::Missed`]), the engine reads this for the tasks running
    /// here, to find those another instance changed (a cancel request, say);
    /// a `subscriptions/listen` reads it for the ids it names, so that
    /// unknown ones cost one read together.
    /// The provided method reads each task with [`Store::get`]; a store that
    /// can read them at once should.
    async fn versions(&self, ids: &[String]) -> Result<Vec<(String, u64)>> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(record) = self.get(id).await? {
                out.push((record.id, record.version));
            }
        }
        Ok(out)
    }

    /// Which of the tasks `ids` exist and are unfinished (`working` or
    /// `input_required`), in any order. The engine asks it when a client
    /// address reaches
    /// [`Limits::max_unfinished_per_address`](crate::engine::Limits::max_unfinished_per_address),
    /// for the tasks that address created. The provided method reads each
    /// task with [`Store::get`]; a store that can read them at once should.
    async fn unfinished_among(&self, ids: &[String]) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for id in ids {
            if let Some(record) = self.get(id).await?
                && !record.status.is_terminal()
            {
                out.push(record.id);
            }
        }
        Ok(out)
    }

    /// Reads a task's journal, ordered by position.
    async fn journal(&self, id: &str) -> Result<Vec<JournalEntry>>;

    /// Appends a journal entry for a run holding `fence`. An entry already
    /// at that position is kept ([`Appended::Kept`]); a stale fence, or a
    /// task that is gone, writes nothing ([`Appended::Fenced`]).
    async fn append(&self, id: &str, entry: JournalEntry, fence: u64) -> Result<Appended>;

    /// [`append`](Store::append), for an entry whose run does not go on
    /// the moment it is stored: a durable `sleep`'s deadline, which the run
    /// waits for anyway. Durable on return, as `append` is; a store that
    /// commits writes in batches may hold it back briefly, so that it shares
    /// a commit with another write ([`SqliteStore`] lingers up to 1 ms).
    /// The default is `append`.
    async fn append_unhurried(
        &self,
        id: &str,
        entry: JournalEntry,
        fence: u64,
    ) -> Result<Appended> {
        self.append(id, entry, fence).await
    }

    /// Applies `change` as [`TaskRecord::apply_fenced`] does, unless the task
    /// is gone; returns the task after the change, or `None` when nothing
    /// changed.
    async fn transition(
        &self,
        id: &str,
        change: Transition,
        now_ms: i64,
        fence: Option<u64>,
    ) -> Result<Option<TaskRecord>>;

    /// [`transition`](Store::transition) as the run holding `fence`, and
    /// journals `entries` in the same write: steps whose values the run did
    /// not wait to store on their own (a durable `sleep`'s deadline, written
    /// with the sleep it starts). When the change is refused nothing is
    /// written; an entry whose position is taken keeps the entry there.
    ///
    /// The default appends each entry, then applies the change: two writes
    /// or more, each safe alone. The stores of this crate make it one.
    async fn transition_journaled(
        &self,
        id: &str,
        entries: Vec<JournalEntry>,
        change: Transition,
        now_ms: i64,
        fence: u64,
    ) -> Result<Option<TaskRecord>> {
        for entry in entries {
            if let Appended::Fenced = self.append(id, entry, fence).await? {
                return Ok(None);
            }
        }
        self.transition(id, change, now_ms, Some(fence)).await
    }

    /// Claims the task for `owner` until `until_ms`, as [`TaskRecord::claim`]
    /// does, in one atomic step; returns the claimed task (with its new
    /// fence) and its journal, or `None` when it is not claimable (or gone).
    async fn claim(
        &self,
        id: &str,
        owner: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<Option<(TaskRecord, Vec<JournalEntry>)>>;

    /// Extends every lease `owner` holds that is still live at `now_ms` to
    /// `until_ms` (never shortens one: a renewal made before a claim of the
    /// same owner may land after it); returns those tasks' ids and versions. A task missing from
    /// the answer is no longer held: its run must stop.
    async fn renew(&self, owner: &str, now_ms: i64, until_ms: i64) -> Result<Vec<(String, u64)>>;

    /// Gives up every lease `owner` holds (an instance shutting down), so
    /// that another instance can claim those tasks at once.
    async fn release(&self, owner: &str) -> Result<()>;

    /// Up to `limit` tasks that are claimable at `now_ms`
    /// ([`TaskRecord::claimable`]), the longest waiting first: what a free
    /// instance should run. Recovery after a restart and takeover after an
    /// instance dies both read this.
    ///
    /// Provided: pages through [`Store::list_all`] (in creation order).
    async fn claimable(&self, now_ms: i64, limit: usize) -> Result<Vec<String>> {
        let mut ids = Vec::new();
        each_task(self, |task| {
            if ids.len() < limit && task.claimable(now_ms) {
                ids.push(task.id);
            }
            ids.len() < limit
        })
        .await?;
        Ok(ids)
    }

    /// Journals the responses whose keys are outstanding (others are ignored)
    /// and removes them from the outstanding set; the task becomes `working`
    /// again when nothing is left outstanding. `None` when the task is gone.
    async fn answer(
        &self,
        id: &str,
        responses: Map<String, Value>,
        now_ms: i64,
    ) -> Result<Option<Answered>>;

    /// Times out the questions of task `id` whose deadline has passed by
    /// `now_ms`, as [`TaskRecord::time_out`] does, in one atomic step: the
    /// [`TIMED_OUT`] marker is journaled at each one's position and its key
    /// leaves the outstanding set (the task becomes `working` again when
    /// nothing is left outstanding). A task with no question due changes
    /// nothing (`accepted: 0`). `None` when the task is gone.
    async fn time_out(&self, id: &str, now_ms: i64) -> Result<Option<Answered>>;

    /// Up to `limit` parked tasks with a question whose deadline has passed
    /// by `now_ms` ([`TaskRecord::overdue`]), the earliest deadline first:
    /// what [`Store::time_out`] should be called for. Recovery after a
    /// restart and the engine's periodic scan both read this.
    ///
    /// Provided: pages through [`Store::list_all`].
    async fn overdue(&self, now_ms: i64, limit: usize) -> Result<Vec<String>> {
        let mut due = Vec::new();
        each_task(self, |task| {
            if task.overdue(now_ms) {
                due.push((task.wake_at_ms, task.id));
            }
            true
        })
        .await?;
        due.sort();
        Ok(due.into_iter().take(limit).map(|(_, id)| id).collect())
    }

    /// Every task that is not terminal (for startup recovery).
    ///
    /// Provided: pages through [`Store::list_all`].
    async fn unfinished(&self) -> Result<Vec<TaskRecord>> {
        let mut open = Vec::new();
        each_task(self, |task| {
            if !task.status.is_terminal() {
                open.push(task);
            }
            true
        })
        .await?;
        Ok(open)
    }

    /// Deletes at most `limit` of the tasks (and their journals) whose TTL
    /// ran out by `now_ms`, those that expired first first; returns the ids
    /// deleted. The engine's sweep calls it again while a call deletes
    /// `limit` tasks, so that a purge of many tasks never holds the store's
    /// writes for long: a store should make one call one short transaction.
    async fn purge_expired(&self, now_ms: i64, limit: usize) -> Result<Vec<String>>;

    /// The earliest expiry among the stored tasks, Unix milliseconds.
    ///
    /// Provided: pages through [`Store::list_all`].
    async fn next_expiry(&self) -> Result<Option<i64>> {
        let mut first: Option<i64> = None;
        each_task(self, |task| {
            if let Some(at) = task.expires_at_ms() {
                first = Some(first.map_or(at, |f| f.min(at)));
            }
            true
        })
        .await?;
        Ok(first)
    }

    /// A page of the tasks of `principal` (`None`: the tasks created without
    /// one), oldest first: at most `limit` tasks after `after` (the
    /// [`ListCursor`] of the last task of the previous page).
    ///
    /// Provided: pages through [`Store::list_all`] from `after`.
    async fn list(
        &self,
        principal: Option<&str>,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>> {
        let mut page = Vec::new();
        let mut after = after.cloned();
        while page.len() < limit {
            let batch = self.list_all(after.as_ref(), PAGE).await?;
            let Some(last) = batch.last() else { break };
            after = Some(ListCursor::after(last));
            let mine = batch.into_iter();
            page.extend(mine.filter(|t| t.principal.as_deref() == principal));
        }
        page.truncate(limit);
        Ok(page)
    }

    /// A page of every task, whoever created it and whatever its status,
    /// oldest first: at most `limit` tasks after `after`, as
    /// [`Store::list`] pages. The operator's view (the admin page) reads
    /// it; the engine never does.
    async fn list_all(&self, after: Option<&ListCursor>, limit: usize) -> Result<Vec<TaskRecord>>;

    /// A page of the tasks `filter` selects, as a list shows them (without
    /// their arguments, results, questions or journals), oldest first: at
    /// most `limit` tasks after the [`PageFrom::After`] cursor, or the last
    /// `limit` before the [`PageFrom::Before`] one (`None`: from the
    /// oldest). The operator's view (the admin page) reads it.
    ///
    /// Provided: pages through [`Store::list_all`] and filters here, reading
    /// whole rows. The SQL stores override it with one query of the
    /// columns shown.
    async fn summaries(
        &self,
        filter: &TaskFilter,
        from: Option<&PageFrom>,
        limit: usize,
    ) -> Result<Vec<TaskSummary>> {
        let mut page = std::collections::VecDeque::new();
        let mut after = None;
        loop {
            let batch = self.list_all(after.as_ref(), PAGE).await?;
            let Some(last) = batch.last() else { break };
            let last = ListCursor::after(last);
            let past_end = matches!(from, Some(PageFrom::Before(c)) if !last.precedes_cursor(c));
            after = Some(last);
            for task in batch.iter().filter(|t| filter.matches(t)) {
                match from {
                    Some(PageFrom::Before(c)) if !ListCursor::after(task).precedes_cursor(c) => {}
                    Some(PageFrom::After(c)) if !c.precedes(task) => {}
                    _ => page.push_back(TaskSummary::of(task)),
                }
            }
            if matches!(from, Some(PageFrom::Before(_))) {
                while page.len() > limit {
                    page.pop_front();
                }
                if past_end {
                    break;
                }
            } else if page.len() >= limit {
                break;
            }
        }
        page.truncate(limit);
        Ok(page.into())
    }

    /// How many tasks `filter` selects, per status, and how many of the
    /// `working` ones are asleep on a durable timer: what the admin page's
    /// status chips and `/metrics`' gauges show.
    ///
    /// Provided: pages through [`Store::list_all`], reading whole rows. The
    /// SQL stores override it with one grouped `count(*)`.
    async fn count_tasks(&self, filter: &TaskFilter) -> Result<TaskCounts> {
        let mut counts = TaskCounts::default();
        let mut after = None;
        loop {
            let batch = self.list_all(after.as_ref(), PAGE).await?;
            let Some(last) = batch.last() else { break };
            after = Some(ListCursor::after(last));
            for task in batch.iter().filter(|t| filter.matches(t)) {
                counts.add(task.status, task.wake_at_ms.is_some(), 1);
            }
        }
        Ok(counts)
    }

    /// How many unfinished (`working` or `input_required`) tasks
    /// `principal` has (`None`: the tasks created without one). The engine
    /// reads it before creating a task, for its per-principal cap
    /// ([`Limits::max_unfinished_per_principal`](crate::engine::Limits::max_unfinished_per_principal)).
    ///
    /// Provided: [`Store::count_tasks`] of the principal's `working` and
    /// `input_required` tasks.
    async fn count_unfinished(&self, principal: Option<&str>) -> Result<usize> {
        let open = [TaskStatus::Working, TaskStatus::InputRequired];
        let filter = TaskFilter::default().principal(principal).statuses(open);
        Ok(self.count_tasks(&filter).await?.total())
    }

    /// The [`FrontDoorStore`] this store keeps too, if any: an engine built
    /// over the store keeps its front-door state (spent `requestState`s,
    /// protocol sessions) there, unless
    /// [`EngineBuilder::front_door`](crate::engine::EngineBuilder::front_door) names
    /// another. `None` (the default): the store keeps tasks only, and the
    /// engine keeps front-door state in memory (see [`FrontDoorStore`]).
    /// The stores of this crate return themselves; a store that wraps
    /// another can return the inner store's.
    fn front_door(self: Arc<Self>) -> Option<Arc<dyn FrontDoorStore>> {
        None
    }

    /// The changes every instance sharing the store makes, as they commit,
    /// when the store can tell (Postgres: `LISTEN`/`NOTIFY`, task by task;
    /// SQLite: that another process committed, every
    /// `SqliteStoreBuilder::poll_interval`). The engine uses
    /// them to run a task as soon as it becomes claimable anywhere, and to
    /// bring what it follows (listeners, waiting calls) up to date with what
    /// other instances did: a cancel request, an answer, an end, an expiry.
    /// `None` (the default): the store has no feed, and engines find each
    /// other's work by their periodic scan alone.
    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<Change>> {
        None
    }
}

/// A change announced by a store's [feed](Store::changes).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Change {
    /// The task is claimable: a free instance should run it.
    Runnable(String),
    /// The task changed otherwise (a cancel request, a status message, its
    /// end), or is gone (its time to live ran out).
    Changed(String),
    /// Changes may have gone unannounced (the feed lost its connection), or
    /// the store cannot say which tasks changed (SQLite): look again at the
    /// claimable tasks and at every task followed.
    Missed,
}

/// How many tasks the provided methods of [`Store`] read at a time.
const PAGE: usize = 500;

/// Hands every task of `store` to `keep`, oldest first, a page of
/// [`Store::list_all`] at a time, until `keep` returns `false`.
async fn each_task<S: Store + ?Sized>(
    store: &S,
    mut keep: impl FnMut(TaskRecord) -> bool + Send,
) -> Result<()> {
    let mut after = None;
    loop {
        let batch = store.list_all(after.as_ref(), PAGE).await?;
        let Some(last) = batch.last() else {
            return Ok(());
        };
        after = Some(ListCursor::after(last));
        for task in batch {
            if !keep(task) {
                return Ok(());
            }
        }
    }
}
