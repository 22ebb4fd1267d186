//! Where tasks live: the [`Store`] trait and its implementations.
//!
//! A store is a small async trait: the engine keeps no task state that matters
//! in memory, so everything a task needs to resume (its row and its journal)
//! goes through these methods. Each method is atomic on its own. What a
//! task's row holds, and the state machine every store applies to it, are
//! in `record`.

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::error::Result;

mod error;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
mod record;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(feature = "testing")]
pub mod testing;

pub(crate) use crate::input::InputCapabilities;
pub use crate::journal::{JournalEntry, PendingInput, StepKind, TIMED_OUT};
pub use error::StoreError;
pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresStore, PostgresStoreBuilder};
pub use record::{Answered, Lease, TaskRecord, TaskStatus, Transition};
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

/// Durable storage for tasks and their journals.
///
/// Every method is atomic. `create` and `append` return only once the data is
/// durable (for stores that are durable at all). Implementations: [`MemoryStore`]
/// (tests), [`SqliteStore`] (the embedded default), and `PostgresStore`
/// (feature `postgres`: one database that several processes share).
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
    /// `until_ms`; returns those tasks' ids and versions. A task missing from
    /// the answer is no longer held: its run must stop.
    async fn renew(&self, owner: &str, now_ms: i64, until_ms: i64) -> Result<Vec<(String, u64)>>;

    /// Gives up every lease `owner` holds (an instance shutting down), so
    /// that another instance can claim those tasks at once.
    async fn release(&self, owner: &str) -> Result<()>;

    /// Up to `limit` tasks that are claimable at `now_ms`, the longest
    /// waiting first: what a free instance should run. Recovery after a
    /// restart and takeover after an instance dies both read this.
    async fn claimable(&self, now_ms: i64, limit: usize) -> Result<Vec<String>>;

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
    async fn overdue(&self, now_ms: i64, limit: usize) -> Result<Vec<String>>;

    /// Every task that is not terminal (for startup recovery).
    async fn unfinished(&self) -> Result<Vec<TaskRecord>>;

    /// Deletes every task (and its journal) whose TTL ran out by `now_ms`;
    /// returns the ids deleted. Also deletes the sessions untouched for
    /// [`SESSION_TTL`].
    async fn purge_expired(&self, now_ms: i64) -> Result<Vec<String>>;

    /// The earliest expiry among the stored tasks, Unix milliseconds.
    async fn next_expiry(&self) -> Result<Option<i64>>;

    /// A page of the tasks of `principal` (`None`: the tasks created without
    /// one), oldest first: at most `limit` tasks after `after` (the
    /// [`ListCursor`] of the last task of the previous page).
    async fn list(
        &self,
        principal: Option<&str>,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>>;

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
            let batch = self.list_all(after.as_ref(), 500).await?;
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
            let batch = self.list_all(after.as_ref(), 500).await?;
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
    async fn count_unfinished(&self, principal: Option<&str>) -> Result<usize>;

    /// Records that the single-use token `id` was spent, in one atomic
    /// step shared by every instance using the store; the record is kept
    /// until `expires_at_ms` (after which the token is refused for its age
    /// anyway). Returns `true` the first time, `false` when `id` was
    /// already spent. Deletes the records that expired by `now_ms`.
    ///
    /// The server spends each MRTR `requestState` here before resuming the
    /// call it carries, so that a state sent twice (in parallel, or to two
    /// instances) runs its steps once.
    async fn spend(&self, id: &str, expires_at_ms: i64, now_ms: i64) -> Result<bool>;

    /// Keeps the state of a protocol session (what a 2025-11-25 client said
    /// in `initialize`, as JSON) under `id`, so that the session survives a
    /// restart and can be served by any instance sharing the store.
    /// Replaces an earlier state. Sessions untouched for [`SESSION_TTL`] may
    /// be deleted by [`Store::purge_expired`].
    async fn put_session(&self, id: &str, state: Value, now_ms: i64) -> Result<()>;

    /// Reads a session's state.
    async fn get_session(&self, id: &str) -> Result<Option<Value>>;

    /// Forgets a session (the client ended it).
    async fn delete_session(&self, id: &str) -> Result<()>;

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

/// How long a protocol session a store keeps may go untouched before
/// [`Store::purge_expired`] deletes it: a week.
pub const SESSION_TTL: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// Where a page of [`Store::list`] starts: just after this task. Tasks are
/// listed by creation time, then id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListCursor {
    /// The task's creation time, Unix milliseconds.
    pub created_at_ms: i64,
    /// The task's id.
    pub id: String,
}

/// Where a page of [`Store::summaries`] starts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PageFrom {
    /// Just after this task: the next page.
    After(ListCursor),
    /// Just before this task: the previous page.
    Before(ListCursor),
}

/// Which tasks [`Store::summaries`] and [`Store::count_tasks`] cover; the
/// default covers every task.
///
/// ```
/// use mcp_tasks_runtime::store::{TaskFilter, TaskStatus};
///
/// // alice's parked tasks of one tool.
/// let filter = TaskFilter::default()
///     .principal(Some("alice"))
///     .tool("deploy")
///     .statuses([TaskStatus::InputRequired]);
/// assert_eq!(filter.statuses, [TaskStatus::InputRequired]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskFilter {
    /// `Some(Some(p))`: the tasks of `p`; `Some(None)`: those created
    /// without a principal; `None`: every caller's.
    pub principal: Option<Option<String>>,
    /// Only this tool's tasks.
    pub tool: Option<String>,
    /// Only tasks in one of these statuses; empty: any status.
    pub statuses: Vec<TaskStatus>,
}

impl TaskFilter {
    /// Only the tasks of `principal` (`None`: created without one).
    #[must_use]
    pub fn principal(mut self, principal: Option<&str>) -> Self {
        self.principal = Some(principal.map(str::to_owned));
        self
    }

    /// Only the tasks of `tool`.
    #[must_use]
    pub fn tool(mut self, tool: impl Into<String>) -> Self {
        self.tool = Some(tool.into());
        self
    }

    /// Only the tasks in one of `statuses`.
    #[must_use]
    pub fn statuses(mut self, statuses: impl IntoIterator<Item = TaskStatus>) -> Self {
        self.statuses = statuses.into_iter().collect();
        self
    }

    /// Whether the filter selects `task`.
    pub fn matches(&self, task: &TaskRecord) -> bool {
        self.principal
            .as_ref()
            .is_none_or(|p| p.as_deref() == task.principal.as_deref())
            && self.tool.as_ref().is_none_or(|t| *t == task.tool)
            && (self.statuses.is_empty() || self.statuses.contains(&task.status))
    }
}

/// A task as a list shows it: its row without the arguments, result,
/// error, questions and journal.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskSummary {
    /// The task's id.
    pub id: String,
    /// The tool it runs.
    pub tool: String,
    /// Who created it (`None`: created without a principal).
    pub principal: Option<String>,
    /// Its status.
    pub status: TaskStatus,
    /// Its status message.
    pub status_message: Option<String>,
    /// When it was created, Unix milliseconds.
    pub created_at_ms: i64,
    /// When it last changed, Unix milliseconds.
    pub updated_at_ms: i64,
    /// When its durable timer wakes it, if it sleeps on one.
    pub wake_at_ms: Option<i64>,
    /// Whether a cancel was requested.
    pub cancel_requested: bool,
}

impl TaskSummary {
    /// The summary of `task`.
    pub fn of(task: &TaskRecord) -> Self {
        Self {
            id: task.id.clone(),
            tool: task.tool.clone(),
            principal: task.principal.clone(),
            status: task.status,
            status_message: task.status_message.clone(),
            created_at_ms: task.created_at_ms,
            updated_at_ms: task.updated_at_ms,
            wake_at_ms: task.wake_at_ms,
            cancel_requested: task.cancel_requested,
        }
    }

    /// Whether it is `working` and asleep on a durable timer.
    pub fn is_asleep(&self) -> bool {
        self.status == TaskStatus::Working && self.wake_at_ms.is_some()
    }
}

/// What [`Store::count_tasks`] counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskCounts {
    /// Tasks per status, in [`TaskStatus::ALL`]'s order.
    pub by_status: [usize; 5],
    /// The `working` tasks asleep on a durable timer (counted in
    /// `working` too).
    pub asleep: usize,
}

impl TaskCounts {
    /// How many tasks are in `status`.
    pub fn of(&self, status: TaskStatus) -> usize {
        TaskStatus::ALL
            .iter()
            .position(|s| *s == status)
            .map_or(0, |i| self.by_status[i])
    }

    /// Every task counted.
    pub fn total(&self) -> usize {
        self.by_status.iter().sum()
    }

    /// Counts `n` more tasks in `status`, `waking` when they have a timer.
    pub fn add(&mut self, status: TaskStatus, waking: bool, n: usize) {
        if let Some(i) = TaskStatus::ALL.iter().position(|s| *s == status) {
            self.by_status[i] += n;
        }
        if status == TaskStatus::Working && waking {
            self.asleep += n;
        }
    }
}

impl ListCursor {
    /// The cursor just after `task`.
    pub fn after(task: &TaskRecord) -> Self {
        Self {
            created_at_ms: task.created_at_ms,
            id: task.id.clone(),
        }
    }

    /// Whether `task` comes after the cursor.
    pub fn precedes(&self, task: &TaskRecord) -> bool {
        (task.created_at_ms, task.id.as_str()) > (self.created_at_ms, self.id.as_str())
    }

    /// Whether this cursor's task comes before `other`'s.
    pub fn precedes_cursor(&self, other: &Self) -> bool {
        (self.created_at_ms, self.id.as_str()) < (other.created_at_ms, other.id.as_str())
    }
}
