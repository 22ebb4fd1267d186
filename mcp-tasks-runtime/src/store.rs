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

pub use crate::input::{FormRequest, InputCapabilities, InputRequest};
pub use crate::journal::{JournalEntry, PendingInput, StepKind};
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
    /// When a sleeping task is due to run again, Unix milliseconds.
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
        }
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
    /// `cancelled` when a cancel was requested meanwhile).
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
    /// How many responses matched outstanding keys and were journaled.
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
        let id = task.id.clone();
        self.create(task).await?;
        for entry in journal {
            self.append(&id, entry).await?;
        }
        Ok(())
    }

    /// Reads a task.
    async fn get(&self, id: &str) -> Result<Option<TaskRecord>>;

    /// Reads a task's journal, ordered by position.
    async fn journal(&self, id: &str) -> Result<Vec<JournalEntry>>;

    /// Appends a journal entry. An entry already at that position is kept and
    /// the call succeeds (a replayed step can't record twice).
    async fn append(&self, id: &str, entry: JournalEntry) -> Result<()>;

    /// Applies `change` unless the task is terminal or gone; returns the task
    /// after the change, or `None` when nothing changed.
    async fn transition(
        &self,
        id: &str,
        change: Transition,
        now_ms: i64,
    ) -> Result<Option<TaskRecord>>;

    /// Journals the responses whose keys are outstanding (others are ignored)
    /// and removes them from the outstanding set; the task becomes `working`
    /// again when nothing is left outstanding. `None` when the task is gone.
    async fn answer(
        &self,
        id: &str,
        responses: Map<String, Value>,
        now_ms: i64,
    ) -> Result<Option<Answered>>;

    /// Every task that is not terminal (for startup recovery).
    async fn unfinished(&self) -> Result<Vec<TaskRecord>>;

    /// Deletes every task (and its journal) whose TTL ran out by `now_ms`;
    /// returns the ids deleted.
    async fn purge_expired(&self, now_ms: i64) -> Result<Vec<String>>;

    /// The earliest expiry among the stored tasks, Unix milliseconds.
    async fn next_expiry(&self) -> Result<Option<i64>>;
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
                    self.pending = pending;
                    self.wake_at_ms = None;
                }
            }
            Transition::Sleep { wake_at_ms } => {
                if self.cancel_requested {
                    self.finish(TaskStatus::Cancelled, None, None);
                } else {
                    self.status = TaskStatus::Working;
                    self.wake_at_ms = Some(wake_at_ms);
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
    }

    fn touch(&mut self, now_ms: i64) {
        self.updated_at_ms = now_ms.max(self.updated_at_ms);
        self.version += 1;
    }

    /// Applies answers in memory: each response whose key is outstanding
    /// (and which is a JSON object, as every MCP answer is) is taken off the
    /// outstanding set and returned as the journal entry to write; the rest
    /// are ignored. Returns the entries and whether the task became runnable
    /// (status `working` again: nothing is left outstanding).
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
        let runnable = !entries.is_empty() && self.pending.is_empty();
        if runnable {
            self.status = TaskStatus::Working;
        }
        if !entries.is_empty() {
            self.touch(now_ms);
        }
        (entries, runnable)
    }
}
