//! Where tasks live: the [`Store`] trait and its implementations.
//!
//! A store is a small async trait: the engine keeps no task state that matters
//! in memory, so everything a task needs to resume (its row and its journal)
//! goes through these methods. Each method is atomic on its own.

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::error::{Result, RpcError};

mod error;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(feature = "testing")]
pub mod testing;

pub use crate::input::{FormRequest, InputCapabilities, InputRequest, UrlRequest};
pub use crate::journal::{JournalEntry, PendingInput, StepKind, TIMED_OUT};
pub use error::StoreError;
pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresStore, PostgresStoreBuilder};
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteStore, SqliteStoreBuilder, Synchronous};

/// A task's status, as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskStatus {
    /// Running, runnable, or sleeping on a durable timer.
    Working,
    /// Parked until the client answers `inputRequests`.
    InputRequired,
    /// Finished with a result (which may be a tool error, `isError: true`).
    Completed,
    /// Finished with a JSON-RPC error.
    Failed,
    /// Cancelled before it finished.
    Cancelled,
}

impl TaskStatus {
    /// Whether the status is final: `completed`, `failed` or `cancelled`.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::InputRequired => "input_required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Every status, in lifecycle order.
    pub const ALL: [Self; 5] = [
        Self::Working,
        Self::InputRequired,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
    ];

    /// Parses a wire name (the inverse of [`TaskStatus::as_str`]).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == s)
    }
}

/// A task's row.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRecord {
    /// The task id (128 bits from the OS CSPRNG, hex).
    pub id: String,
    /// The tool it runs.
    pub tool: String,
    /// The call's arguments.
    pub arguments: Map<String, Value>,
    /// What the creating request's client can answer (gates questions).
    pub client_capabilities: InputCapabilities,
    /// Who created it, when the transport knows (tasks are invisible to others).
    pub principal: Option<String>,
    /// Current status.
    pub status: TaskStatus,
    /// Human-readable progress or reason.
    pub status_message: Option<String>,
    /// Creation time, Unix milliseconds.
    pub created_at_ms: i64,
    /// Last change, Unix milliseconds.
    pub updated_at_ms: i64,
    /// TTL from creation; `None` keeps the task until deleted.
    pub ttl_ms: Option<u64>,
    /// Suggested poll interval.
    pub poll_interval_ms: Option<u64>,
    /// Outstanding input requests (status `input_required`).
    pub pending: Vec<PendingInput>,
    /// When a sleeping task is due to run again or, for a parked task, when
    /// the first of its outstanding questions times out (the earliest
    /// [`PendingInput::deadline_ms`]), Unix milliseconds.
    pub wake_at_ms: Option<i64>,
    /// A cancel was requested while the task was running.
    pub cancel_requested: bool,
    /// The `CallToolResult` (status `completed`).
    pub result: Option<Map<String, Value>>,
    /// The JSON-RPC error (status `failed`).
    pub error: Option<RpcError>,
    /// How many changes the task has seen: 0 when created, one more on every
    /// change [`TaskRecord::apply`] or [`TaskRecord::answer`] makes. Orders
    /// the notifications of concurrent changes.
    pub version: u64,
    /// The instance running the task, while one holds it (see
    /// [`Store::claim`]). Parked, sleeping and finished tasks hold none.
    pub lease: Option<Lease>,
    /// The fencing token: one more at every claim. A run's writes carry the
    /// token it claimed with, and a store refuses them once another claim
    /// has taken the task.
    pub fence: u64,
}

/// An instance's hold on a task it runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The instance.
    pub owner: String,
    /// Until when, Unix milliseconds; the instance renews it while it runs
    /// the task. Once it has passed, another instance may claim the task.
    pub expires_at_ms: i64,
}

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

impl TaskRecord {
    /// A new `working` task of `tool`, created at `now_ms`, with no
    /// arguments, no TTL and no poll interval: set the fields you need.
    pub fn new(id: impl Into<String>, tool: impl Into<String>, now_ms: i64) -> Self {
        Self {
            id: id.into(),
            tool: tool.into(),
            arguments: Map::new(),
            client_capabilities: InputCapabilities::NONE,
            principal: None,
            status: TaskStatus::Working,
            status_message: Some("The task is in progress.".into()),
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            ttl_ms: None,
            poll_interval_ms: None,
            pending: Vec::new(),
            wake_at_ms: None,
            cancel_requested: false,
            result: None,
            error: None,
            version: 0,
            lease: None,
            fence: 0,
        }
    }

    /// Whether a run of the task may start at `now_ms`: it is `working`, and
    /// not asleep on a timer that has yet to fire.
    pub fn runnable(&self, now_ms: i64) -> bool {
        self.status == TaskStatus::Working && self.wake_at_ms.is_none_or(|at| at <= now_ms)
    }

    /// Whether an instance may claim the task at `now_ms`: it is runnable,
    /// and no live lease holds it.
    pub fn claimable(&self, now_ms: i64) -> bool {
        self.runnable(now_ms)
            && self
                .lease
                .as_ref()
                .is_none_or(|l| l.expires_at_ms <= now_ms)
    }

    /// Claims the task for `owner` until `until_ms`, when it is claimable at
    /// `now_ms` (or `owner` already holds it): the fence moves on, so writes
    /// under any earlier claim are refused from now on. Returns whether it
    /// claimed.
    ///
    /// ```
    /// use mcp_tasks_runtime::store::TaskRecord;
    ///
    /// let mut task = TaskRecord::new("t1", "deploy", 1_000);
    /// assert!(task.claim("a", 1_000, 31_000));
    /// assert!(!task.claim("b", 2_000, 32_000), "a's lease is live");
    /// assert!(task.claim("b", 31_000, 61_000), "a's lease ran out");
    /// assert_eq!((task.lease.unwrap().owner.as_str(), task.fence), ("b", 2));
    /// ```
    pub fn claim(&mut self, owner: &str, now_ms: i64, until_ms: i64) -> bool {
        let held = self
            .lease
            .as_ref()
            .is_some_and(|l| l.owner == owner && l.expires_at_ms > now_ms);
        if !(self.claimable(now_ms) || held && self.runnable(now_ms)) {
            return false;
        }
        self.lease = Some(Lease {
            owner: owner.to_owned(),
            expires_at_ms: until_ms,
        });
        self.fence += 1;
        true
    }

    /// [`TaskRecord::apply`] for a writer holding `fence` (`None`: a writer
    /// outside any run, such as a cancel request): refused when the task's
    /// fence has moved on.
    pub fn apply_fenced(&mut self, change: Transition, now_ms: i64, fence: Option<u64>) -> bool {
        if fence.is_some_and(|f| f != self.fence) {
            return false;
        }
        self.apply(change, now_ms)
    }

    /// When the task expires, Unix milliseconds.
    pub fn expires_at_ms(&self) -> Option<i64> {
        self.ttl_ms.map(|ttl| {
            self.created_at_ms
                .saturating_add(i64::try_from(ttl).unwrap_or(i64::MAX))
        })
    }
}

/// A state change of a non-terminal task. Every change is refused (returns
/// `None`) when the task is already terminal: terminal states never change.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    /// Sets `statusMessage`.
    StatusMessage(String),
    /// Parks the task in `input_required` with these requests (or ends it
    /// `cancelled` when a cancel was requested meanwhile); `wake_at_ms`
    /// becomes the earliest of their deadlines, when they have any (see
    /// [`TaskRecord::time_out`]).
    Park(Vec<PendingInput>),
    /// Keeps the task `working`, asleep until this time.
    Sleep {
        /// Unix milliseconds.
        wake_at_ms: i64,
    },
    /// Marks a running task for cancellation (a parked task ends `cancelled` at once).
    RequestCancel,
    /// Ends the task `completed` with this `CallToolResult`.
    Complete(Map<String, Value>),
    /// Ends the task `failed` with this JSON-RPC error.
    Fail(RpcError),
    /// Ends the task `cancelled`.
    Cancel,
}

/// What [`Store::answer`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    /// The task after the answer.
    pub record: TaskRecord,
    /// How many responses matched outstanding keys and were journaled (for
    /// [`Store::time_out`]: how many questions timed out).
    pub accepted: usize,
    /// Whether the task became runnable (no request is outstanding any more).
    pub runnable: bool,
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

    /// How many unfinished (`working` or `input_required`) tasks
    /// `principal` has (`None`: the tasks created without one). The engine
    /// reads it before creating a task, for its per-principal cap
    /// ([`Limits::max_unfinished_per_principal`](crate::Limits::max_unfinished_per_principal)).
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
    /// when the store can tell (Postgres: `LISTEN`/`NOTIFY`). The engine
    /// uses them to run a task as soon as it becomes claimable anywhere and
    /// to hear of a cancel request made through another instance. `None`
    /// (the default): the store has no feed, and engines find each other's
    /// work by their periodic scan alone.
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
    /// end).
    Changed(String),
    /// Changes may have gone unannounced (the feed lost its connection):
    /// look for claimable tasks again.
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
}

/// The state machine every store follows. A store applies these in memory to
/// the row it holds (under its lock, or inside its transaction) and writes the
/// result back; it keeps no rules of its own.
impl TaskRecord {
    /// Applies `change` in memory. Returns whether anything changed; a
    /// terminal task never changes, and a change that changes nothing (the
    /// same status message twice, a second cancel request) returns `false`.
    ///
    /// ```
    /// use mcp_tasks_runtime::store::{TaskRecord, TaskStatus, Transition};
    ///
    /// let mut task = TaskRecord::new("t1", "deploy", 1_000);
    /// assert!(task.apply(Transition::RequestCancel, 1_001));
    /// assert!(task.cancel_requested && task.status == TaskStatus::Working);
    /// assert!(task.apply(Transition::Cancel, 1_002));
    /// assert_eq!(task.status, TaskStatus::Cancelled);
    /// assert!(!task.apply(Transition::Cancel, 1_003), "terminal states are final");
    /// assert_eq!(task.version, 2);
    /// ```
    pub fn apply(&mut self, change: Transition, now_ms: i64) -> bool {
        if self.status.is_terminal() {
            return false;
        }
        match change {
            Transition::StatusMessage(msg) => {
                if self.status_message.as_deref() == Some(&msg) {
                    return false;
                }
                self.status_message = Some(msg);
            }
            Transition::Park(pending) => {
                if self.cancel_requested {
                    self.finish(TaskStatus::Cancelled, None, None);
                } else {
                    self.status = TaskStatus::InputRequired;
                    self.wake_at_ms = next_deadline(&pending);
                    self.pending = pending;
                    self.lease = None;
                }
            }
            Transition::Sleep { wake_at_ms } => {
                if self.cancel_requested {
                    self.finish(TaskStatus::Cancelled, None, None);
                } else {
                    self.status = TaskStatus::Working;
                    self.wake_at_ms = Some(wake_at_ms);
                    self.lease = None;
                }
            }
            Transition::RequestCancel => {
                // Parked, or asleep on a durable timer that has not fired yet:
                // nothing runs, so the task ends at once. (A task whose timer
                // fired may be running again; it is asked to stop.)
                let asleep = self.wake_at_ms.is_some_and(|at| at > now_ms);
                if self.status == TaskStatus::InputRequired || asleep {
                    self.finish(TaskStatus::Cancelled, None, None);
                } else if self.cancel_requested {
                    return false;
                } else {
                    self.cancel_requested = true;
                }
            }
            Transition::Complete(result) => self.finish(TaskStatus::Completed, Some(result), None),
            Transition::Fail(error) => self.finish(TaskStatus::Failed, None, Some(error)),
            Transition::Cancel => self.finish(TaskStatus::Cancelled, None, None),
        }
        self.touch(now_ms);
        true
    }

    fn finish(
        &mut self,
        status: TaskStatus,
        result: Option<Map<String, Value>>,
        error: Option<RpcError>,
    ) {
        self.status = status;
        self.status_message = Some(match (&error, status) {
            (Some(e), _) => e.message.clone(),
            (None, TaskStatus::Cancelled) => "The task was cancelled.".into(),
            (None, _) => "The task completed.".into(),
        });
        self.result = result;
        self.error = error;
        self.pending.clear();
        self.wake_at_ms = None;
        self.lease = None;
    }

    fn touch(&mut self, now_ms: i64) {
        self.updated_at_ms = now_ms.max(self.updated_at_ms);
        self.version += 1;
    }

    /// Applies answers in memory: each response whose key is outstanding
    /// (and which is a JSON object, as every MCP answer is) is taken off the
    /// outstanding set and returned as the journal entry to write; the rest
    /// are ignored. Returns the entries and whether the task became runnable
    /// (status `working` again: nothing is left outstanding). `wake_at_ms`
    /// follows the deadlines of the questions left (none: `None`).
    pub fn answer(
        &mut self,
        responses: Map<String, Value>,
        now_ms: i64,
    ) -> (Vec<JournalEntry>, bool) {
        let mut entries = Vec::new();
        if self.status != TaskStatus::InputRequired {
            return (entries, false);
        }
        for (key, value) in responses {
            if !value.is_object() {
                continue;
            }
            if let Some(i) = self.pending.iter().position(|p| p.key == key) {
                let p = self.pending.remove(i);
                entries.push(JournalEntry {
                    position: p.position,
                    kind: p.kind,
                    name: p.name,
                    value,
                });
            }
        }
        self.settle(entries, now_ms)
    }

    /// Times out, in memory, every outstanding question whose deadline
    /// ([`PendingInput::deadline_ms`]) has passed by `now_ms`: each is taken
    /// off the outstanding set and returned as the journal entry to write,
    /// its value the [`TIMED_OUT`] marker, at the question's position. This
    /// is [`TaskRecord::answer`] with the marker as the answer, so whichever
    /// of the two comes first is journaled and the other finds the key gone.
    /// Returns the entries and whether the task became runnable (status
    /// `working` again: nothing is left outstanding); `wake_at_ms` moves on
    /// to the next deadline, if questions with one are left.
    ///
    /// ```
    /// use mcp_tasks_runtime::store::{
    ///     FormRequest, InputRequest, PendingInput, StepKind, TIMED_OUT, TaskRecord, TaskStatus,
    ///     Transition,
    /// };
    ///
    /// let question = |key: &str, position, deadline_ms| PendingInput {
    ///     key: key.into(),
    ///     position,
    ///     kind: StepKind::Ask,
    ///     name: "Approve".into(),
    ///     request: InputRequest::Form(FormRequest {
    ///         message: "Roll out?".into(),
    ///         requested_schema: Default::default(),
    ///     }),
    ///     deadline_ms,
    /// };
    /// let mut task = TaskRecord::new("t1", "deploy", 1_000);
    /// task.apply(Transition::Park(vec![question("a", 3, Some(5_000)), question("b", 5, None)]), 1_000);
    /// assert_eq!(task.wake_at_ms, Some(5_000), "the parked task wakes at the deadline");
    ///
    /// let (entries, runnable) = task.time_out(4_999);
    /// assert!(entries.is_empty() && !runnable, "not yet");
    ///
    /// let (entries, runnable) = task.time_out(5_000);
    /// assert_eq!((entries[0].position, entries[0].value.as_str()), (3, Some(TIMED_OUT)));
    /// assert!(!runnable, "`b` is still outstanding");
    /// assert_eq!((task.pending.len(), task.wake_at_ms), (1, None));
    ///
    /// // A late answer to `a` is ignored, like one to any unknown key.
    /// let late = serde_json::json!({"a": {"action": "accept"}});
    /// assert!(task.answer(late.as_object().unwrap().clone(), 5_001).0.is_empty());
    /// let answer = serde_json::json!({"b": {"action": "decline"}});
    /// assert!(task.answer(answer.as_object().unwrap().clone(), 5_002).1);
    /// assert_eq!(task.status, TaskStatus::Working);
    /// ```
    pub fn time_out(&mut self, now_ms: i64) -> (Vec<JournalEntry>, bool) {
        let mut entries = Vec::new();
        if self.status != TaskStatus::InputRequired {
            return (entries, false);
        }
        let (due, left): (Vec<PendingInput>, _) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| p.deadline_ms.is_some_and(|at| at <= now_ms));
        self.pending = left;
        for p in due {
            entries.push(JournalEntry {
                position: p.position,
                kind: p.kind,
                name: p.name,
                value: crate::journal::timed_out_value(),
            });
        }
        self.settle(entries, now_ms)
    }

    /// After questions left the outstanding set as `entries`: the task runs
    /// again when none is left, else waits for the next deadline.
    fn settle(&mut self, entries: Vec<JournalEntry>, now_ms: i64) -> (Vec<JournalEntry>, bool) {
        if entries.is_empty() {
            return (entries, false);
        }
        let runnable = self.pending.is_empty();
        if runnable {
            self.status = TaskStatus::Working;
        }
        self.wake_at_ms = next_deadline(&self.pending);
        self.touch(now_ms);
        (entries, runnable)
    }

    /// Whether an outstanding question's deadline has passed by `now_ms`:
    /// the task is due for [`Store::time_out`].
    pub fn overdue(&self, now_ms: i64) -> bool {
        self.status == TaskStatus::InputRequired && self.wake_at_ms.is_some_and(|at| at <= now_ms)
    }
}

/// The earliest deadline among `pending`.
fn next_deadline(pending: &[PendingInput]) -> Option<i64> {
    pending.iter().filter_map(|p| p.deadline_ms).min()
}
