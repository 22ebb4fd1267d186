//! A task's row ([`TaskRecord`]) and the state machine every store applies
//! to it in memory ([`Transition`], answers, time-outs, claims): stores keep
//! no rules of their own.

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::{JournalEntry, PendingInput};
use crate::error::RpcError;
use crate::input::InputCapabilities;

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

/// The wire name: `working`, `input_required`, `completed`, `failed` or
/// `cancelled`.
///
/// ```
/// use mcp_tasks_runtime::store::TaskStatus;
///
/// assert_eq!(TaskStatus::InputRequired.to_string(), "input_required");
/// ```
impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A task's row.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRecord {
    /// The task id (128 bits from the OS CSPRNG, hex).
    pub id: String,
    /// The tool it runs.
    pub tool: String,
    /// The version of the tool that created it
    /// ([`ToolDescriptor::version`](crate::tool::ToolDescriptor::version)):
    /// the code its journal was recorded by. Tasks stored before versions
    /// were recorded read back as version 1.
    pub tool_version: u32,
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
    /// [`Store::claim`](super::Store::claim)). Parked, sleeping and finished tasks hold none.
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

impl TaskRecord {
    /// A new `working` task of `tool`, created at `now_ms`, with no
    /// arguments, no TTL and no poll interval: set the fields you need.
    pub fn new(id: impl Into<String>, tool: impl Into<String>, now_ms: i64) -> Self {
        Self {
            id: id.into(),
            tool: tool.into(),
            tool_version: 1,
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

    /// Whether a run may give up the task (an instance that does not serve
    /// its version): the task is `working` and held by a lease.
    pub(crate) fn releasable(&self) -> bool {
        self.status == TaskStatus::Working && self.lease.is_some()
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
        // Answers to questions an earlier run asked in flight, which it
        // never took: nothing waits for them any more.
        self.pending.retain(|p| !p.in_flight);
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
    /// Gives up the lease of a `working` task without running it, so that
    /// another instance may claim it at once (one that serves the version
    /// of the tool the task was recorded by). Refused for a task that is
    /// not `working` or that no lease holds.
    Release,
    /// Adds questions asked while the run goes on
    /// ([`ask_in_flight`](crate::durable::ask_in_flight)): the task shows
    /// `input_required` with them and keeps its lease, and `wake_at_ms`
    /// becomes the lease's expiry, when [`Transition::Lapse`] looks again.
    /// Refused for a task no lease holds or whose cancel was requested.
    AskInFlight(Vec<PendingInput>),
    /// Answers questions asked in flight, by key: each answer (a JSON
    /// object) waits in [`PendingInput::answer`] for the run to take it, and
    /// the task is `working` again once no question is left open. Refused
    /// when no key names an open question asked in flight.
    AnswerInFlight(Map<String, Value>),
    /// Takes away the questions asked in flight with these keys (their run
    /// took the answers, or stopped waiting); the task is `working` again
    /// once no question is left open.
    Withdraw(Vec<String>),
    /// Takes away every question asked in flight once the lease of the run
    /// that asked them has lapsed at `now_ms` (the task is `working` again,
    /// and claimable); while that lease is live, moves `wake_at_ms` to its
    /// expiry instead, when the next look is due.
    Lapse,
}

/// What [`Store::answer`](super::Store::answer) did.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    /// The task after the answer.
    pub record: TaskRecord,
    /// How many responses matched outstanding keys and were journaled (for
    /// [`Store::time_out`](super::Store::time_out): how many questions timed out).
    pub accepted: usize,
    /// Whether the task became runnable (no request is outstanding any more).
    pub runnable: bool,
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
                    self.pending.retain(|p| !p.in_flight);
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
            Transition::Release => {
                if !self.releasable() {
                    return false;
                }
                self.lease = None;
                self.pending.retain(|p| !p.in_flight);
            }
            Transition::AskInFlight(questions) => {
                let Some(lease) = &self.lease else {
                    return false;
                };
                if self.cancel_requested || questions.is_empty() {
                    return false;
                }
                self.status = TaskStatus::InputRequired;
                self.wake_at_ms = Some(lease.expires_at_ms);
                self.pending
                    .extend(questions.into_iter().map(|q| PendingInput {
                        in_flight: true,
                        answer: None,
                        ..q
                    }));
            }
            Transition::AnswerInFlight(answers) => {
                let mut taken = false;
                for p in &mut self.pending {
                    if let Some(answer) = answers.get(&p.key)
                        && p.in_flight
                        && p.is_open()
                        && answer.is_object()
                    {
                        p.answer = Some(answer.clone());
                        taken = true;
                    }
                }
                if !taken {
                    return false;
                }
                self.reopen();
            }
            Transition::Withdraw(keys) => {
                let before = self.pending.len();
                self.pending
                    .retain(|p| !(p.in_flight && keys.contains(&p.key)));
                if self.pending.len() == before {
                    return false;
                }
                self.reopen();
            }
            Transition::Lapse => {
                if self.status != TaskStatus::InputRequired
                    || !self.pending.iter().any(|p| p.in_flight)
                {
                    return false;
                }
                match &self.lease {
                    Some(lease) if lease.expires_at_ms > now_ms => {
                        if self.wake_at_ms == Some(lease.expires_at_ms) {
                            return false;
                        }
                        self.wake_at_ms = Some(lease.expires_at_ms);
                    }
                    _ => {
                        self.pending.retain(|p| !p.in_flight);
                        self.reopen();
                    }
                }
            }
        }
        self.touch(now_ms);
        true
    }

    /// A task waiting only on questions asked in flight that no longer
    /// wait is `working` again.
    fn reopen(&mut self) {
        if self.status == TaskStatus::InputRequired
            && !self.pending.iter().any(PendingInput::is_open)
        {
            self.status = TaskStatus::Working;
            self.wake_at_ms = None;
        }
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
            if let Some(i) = self
                .pending
                .iter()
                .position(|p| p.key == key && !p.in_flight)
            {
                let p = self.pending.remove(i);
                self.withdraw_race(p.race);
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
    /// its value the [`TIMED_OUT`](super::TIMED_OUT) marker, at the question's position. This
    /// is [`TaskRecord::answer`] with the marker as the answer, so whichever
    /// of the two comes first is journaled and the other finds the key gone.
    /// Returns the entries and whether the task became runnable (status
    /// `working` again: nothing is left outstanding); `wake_at_ms` moves on
    /// to the next deadline, if questions with one are left.
    ///
    /// ```
    /// use mcp_tasks_runtime::store::{PendingInput, StepKind, TIMED_OUT, TaskRecord, TaskStatus, Transition};
    /// use mcp_tasks_runtime::question::{FormRequest, InputRequest};
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
    ///     race: None,
    ///     in_flight: false,
    ///     answer: None,
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
        let mut raced = HashSet::new();
        for p in due {
            // One question of a race ends it: the first due in order is
            // journaled, and the others leave with it.
            if let Some(race) = p.race
                && !raced.insert(race)
            {
                continue;
            }
            self.withdraw_race(p.race);
            entries.push(JournalEntry {
                position: p.position,
                kind: p.kind,
                name: p.name,
                value: crate::journal::timed_out_value(),
            });
        }
        self.settle(entries, now_ms)
    }

    /// Takes the questions of `race` (a [`select`](crate::durable::select)'s journal
    /// position) off the outstanding set: one of them was answered or timed
    /// out, which ends the race. They get no journal entry; a late answer
    /// to one is ignored like one to any unknown key.
    fn withdraw_race(&mut self, race: Option<u32>) {
        if let Some(race) = race {
            self.pending.retain(|p| p.race != Some(race));
        }
    }

    /// After questions left the outstanding set as `entries`: the task runs
    /// again when none is left, else waits for the next deadline.
    fn settle(&mut self, entries: Vec<JournalEntry>, now_ms: i64) -> (Vec<JournalEntry>, bool) {
        if entries.is_empty() {
            return (entries, false);
        }
        let runnable = !self.pending.iter().any(PendingInput::is_open);
        if runnable {
            self.status = TaskStatus::Working;
        }
        self.wake_at_ms = next_deadline(&self.pending);
        self.touch(now_ms);
        (entries, runnable)
    }

    /// Whether an outstanding question's deadline has passed by `now_ms`:
    /// the task is due for [`Store::time_out`](super::Store::time_out).
    pub fn overdue(&self, now_ms: i64) -> bool {
        self.status == TaskStatus::InputRequired && self.wake_at_ms.is_some_and(|at| at <= now_ms)
    }
}

/// The earliest deadline among `pending`.
fn next_deadline(pending: &[PendingInput]) -> Option<i64> {
    pending.iter().filter_map(|p| p.deadline_ms).min()
}
