//! Where tasks live: the [`Store`] trait and its implementations.
//!
//! A store is a small async trait: the engine keeps no task state that matters
//! in memory, so everything a task needs to resume (its row and its journal)
//! goes through these methods. Each method is atomic on its own.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{
    error::Result,
    journal::{JournalEntry, PendingInput},
};

mod memory;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use memory::MemoryStore;
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteStore, SqliteStoreBuilder, Synchronous};

/// A task's status, as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "working" => Self::Working,
            "input_required" => Self::InputRequired,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            _ => return None,
        })
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
    /// The capabilities the creating request declared (gates input requests).
    pub client_capabilities: Value,
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
    pub error: Option<Map<String, Value>>,
}

impl TaskRecord {
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
    Fail(Map<String, Value>),
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
/// (tests) and [`SqliteStore`] (the embedded default).
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

/// Applies `change` to `record` in memory; shared by the stores so that the
/// state machine lives in one place. Returns whether anything changed.
pub(crate) fn apply(record: &mut TaskRecord, change: Transition, now_ms: i64) -> bool {
    if record.status.is_terminal() {
        return false;
    }
    match change {
        Transition::StatusMessage(msg) => {
            if record.status_message.as_deref() == Some(&msg) {
                return false;
            }
            record.status_message = Some(msg);
        }
        Transition::Park(pending) => {
            if record.cancel_requested {
                finish(record, TaskStatus::Cancelled, None, None);
            } else {
                record.status = TaskStatus::InputRequired;
                record.pending = pending;
                record.wake_at_ms = None;
            }
        }
        Transition::Sleep { wake_at_ms } => {
            if record.cancel_requested {
                finish(record, TaskStatus::Cancelled, None, None);
            } else {
                record.status = TaskStatus::Working;
                record.wake_at_ms = Some(wake_at_ms);
            }
        }
        Transition::RequestCancel => {
            // Parked, or asleep on a durable timer that has not fired yet:
            // nothing runs, so the task ends at once. (A task whose timer
            // fired may be running again; it is asked to stop.)
            let asleep = record.wake_at_ms.is_some_and(|at| at > now_ms);
            if record.status == TaskStatus::InputRequired || asleep {
                finish(record, TaskStatus::Cancelled, None, None);
            } else if record.cancel_requested {
                return false;
            } else {
                record.cancel_requested = true;
            }
        }
        Transition::Complete(result) => finish(record, TaskStatus::Completed, Some(result), None),
        Transition::Fail(error) => {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned);
            finish(record, TaskStatus::Failed, None, Some(error));
            if let Some(m) = message {
                record.status_message = Some(m);
            }
        }
        Transition::Cancel => finish(record, TaskStatus::Cancelled, None, None),
    }
    record.updated_at_ms = now_ms.max(record.updated_at_ms);
    true
}

fn finish(
    record: &mut TaskRecord,
    status: TaskStatus,
    result: Option<Map<String, Value>>,
    error: Option<Map<String, Value>>,
) {
    record.status = status;
    record.result = result;
    record.error = error;
    record.pending.clear();
    record.wake_at_ms = None;
    match status {
        TaskStatus::Cancelled => record.status_message = Some("The task was cancelled.".into()),
        TaskStatus::Completed => record.status_message = Some("The task completed.".into()),
        _ => {}
    }
}

/// Applies `responses` to `record` in memory: returns the journal entries to
/// write and the number accepted. Shared by the stores.
pub(crate) fn answer_in_memory(
    record: &mut TaskRecord,
    responses: Map<String, Value>,
    now_ms: i64,
) -> (Vec<JournalEntry>, bool) {
    let mut entries = Vec::new();
    if record.status != TaskStatus::InputRequired {
        return (entries, false);
    }
    for (key, value) in responses {
        // Every answer (ElicitResult, CreateMessageResult, ListRootsResult) is
        // an object; anything else is malformed and leaves the key outstanding.
        if !value.is_object() {
            continue;
        }
        if let Some(i) = record.pending.iter().position(|p| p.key == key) {
            let p = record.pending.remove(i);
            entries.push(JournalEntry {
                position: p.position,
                kind: p.kind,
                name: p.name,
                value,
            });
        }
    }
    let runnable = !entries.is_empty() && record.pending.is_empty();
    if runnable {
        record.status = TaskStatus::Working;
    }
    if !entries.is_empty() {
        record.updated_at_ms = now_ms.max(record.updated_at_ms);
    }
    (entries, runnable)
}
