//! The replay check before a deploy, and a task's journal as JSON.
//!
//! A deploy changes the code that unfinished tasks replay their journals
//! through. When the new code asks for another step at a recorded position
//! (steps reordered, renamed, added before others without
//! [`patched`](crate::durable::patched)), those tasks fail as non-deterministic once
//! they resume. [`check`] finds them first: it replays, with the current
//! build's tools, the journal of every unfinished task in a store, running
//! no step live, and says of each task whether it [`Verdict::Replays`],
//! where it [`Verdict::Diverges`], or whether the tool's version rules
//! refuse it ([`Verdict::RefusedByVersion`]). A server's `main` can run it
//! on a flag, before it starts its engine, and exit non-zero when the
//! [`Report`] did not pass:
//!
//! ```no_run
//! use mcp_tasks_runtime::{Engine, store::SqliteStore};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! if std::env::args().any(|a| a == "--check-replay") {
//!     // Read-only: the store is not migrated to this build's schema, so
//!     // the build running on it still starts on it if the check fails.
//!     let builder = Engine::builder(SqliteStore::open_read_only("tasks.db").await?);
//!     // Replays every unfinished task through this build's tools; starts
//!     // nothing and writes nothing.
//!     let report = builder.check_replay().await?;
//!     println!("{report}");
//!     std::process::exit(if report.passed() { 0 } else { 1 });
//! }
//! let engine = Engine::builder(SqliteStore::open("tasks.db").await?).start().await?;
//! # drop(engine);
//! # Ok(())
//! # }
//! ```
//!
//! # What the replay runs, and what it does not
//!
//! Each task's fn runs from its stored arguments, as a resume would, with
//! its journal as its history. Recorded steps return their recorded values
//! (a checkpoint's closure never runs, a question is never asked). The
//! first step the journal holds nothing for (where the resumed task would
//! go on live: the question it waits on, the step after its last) stops
//! the replay: the task replays. Nothing is written: no journal entry, no
//! status message, no change of status, no claim.
//!
//! Code *outside* steps runs, as it does on every replay (that is the
//! contract of a tool's fn: cheap and free of side effects between steps).
//! Work handed to `tokio::spawn` has left the task and runs as it would;
//! [`spawn`](crate::durable::spawn)'s work replays like a checkpoint's. A
//! [`select`](crate::durable::select) the journal holds replays its recorded winner;
//! one the task is still waiting in (no winner journaled) is where the
//! replay stops, so answers already journaled inside its branches are not
//! compared.
//!
//! The check reads the store only, page by page, so it can run beside the
//! servers of the old build. Open the store read-only for it
//! (`SqliteStore::open_read_only`, `PostgresStore::connect_read_only`): a
//! store opened to write is migrated to this build's schema as it opens,
//! and the old build then refuses it.

use std::{fmt, sync::Arc, time::Duration};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{
    clock::Clock,
    error::Result,
    input::InputCapabilities,
    journal::{JournalEntry, StepKind},
    store::{ListCursor, Store, TaskRecord},
    task::{Exit, Recorded, Recorder, Run, TaskCtx, TaskInfo},
    tool::Registry,
    tool::StateMap,
    tool::ToolDescriptor,
};

/// How many tasks [`check`] reads at once.
const PAGE: usize = 200;

/// How long one task's replay may take before the check gives up on it (a
/// fn whose code outside steps waits on something that never comes).
const BOUND: Duration = Duration::from_secs(30);

/// A task's journal as JSON: what the operator CLI (`tasks journal ID`)
/// and the admin page (`/tasks/{id}/journal.json`) export, and what
/// `testing::ToolTest::replay_journal`
/// replays, so that a recorded history becomes a regression test.
///
/// ```json
/// {
///   "taskId": "…",
///   "tool": "report",
///   "version": 1,
///   "status": "input_required",
///   "principal": null,
///   "createdAtMs": 1764748800000,
///   "arguments": {"team": "ops"},
///   "entries": [
///     {"position": 0, "kind": "checkpoint", "name": "fetch", "value": 3}
///   ]
/// }
/// ```
///
/// `kind` is a [`StepKind`] as stored (`checkpoint`, `ask`, `sample`,
/// `roots`, `now`, `uuid`, `sleep`, `select`, `patch`); `value` is the
/// recorded value (a question's: the client's answer). The questions a task
/// still waits on are not entries: they are not journaled until answered.
///
/// **An export holds secrets in clear**: the call's arguments, the users'
/// answers, and every checkpoint's value (API replies, tokens), as the
/// store does; and the task id, a bearer secret where no principal is
/// configured. Before sharing one or committing it as a test fixture, take
/// [`JournalExport::redacted`] (`tasks journal ID --redact`,
/// `/tasks/{id}/journal.json?redact=1`) and put back by hand only what the
/// replay needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JournalExport {
    /// The task's id.
    pub task_id: String,
    /// Its tool's name.
    pub tool: String,
    /// The version of the tool that created the task.
    pub version: u32,
    /// Its status when exported (`working`, `input_required`, …).
    pub status: String,
    /// Who created it (`None`: created without a principal).
    pub principal: Option<String>,
    /// When it was created, Unix milliseconds.
    pub created_at_ms: i64,
    /// The arguments it was called with.
    pub arguments: Map<String, Value>,
    /// Its journal, ordered by position.
    pub entries: Vec<JournalEntry>,
}

impl JournalExport {
    /// The export of `task` with its `journal` (as [`Store::journal`]
    /// reads it).
    pub fn new(task: &TaskRecord, journal: Vec<JournalEntry>) -> Self {
        Self {
            task_id: task.id.clone(),
            tool: task.tool.clone(),
            version: task.tool_version,
            status: task.status.as_str().to_owned(),
            principal: task.principal.clone(),
            created_at_ms: task.created_at_ms,
            arguments: task.arguments.clone(),
            entries: journal,
        }
    }

    /// This export without what callers, users and steps put in it, for
    /// sharing or for a test fixture: every string of the arguments and of
    /// the values of `checkpoint` and `roots` entries becomes
    /// `"<redacted>"` and every number `0` (object keys, array lengths,
    /// booleans and nulls are kept, so the shape is); of `ask` and `sample`
    /// entries (`{"action": …, "content": …}`, a completion), only
    /// `content` is, so the answer's action and the completion's role and
    /// model remain (and the `type` and `mimeType` of a completion's
    /// content blocks). The engine's own values (`now`, `uuid`, `sleep`,
    /// `select`, `patch`) are kept. The task id becomes 32 zeros and a
    /// principal `"<redacted>"`. Positions, kinds and names, the tool, its
    /// version, the status and the creation time are kept.
    ///
    /// What it can still be used for: reading the path a task took, and
    /// `testing::ToolTest::replay_journal`,
    /// which deserializes each value into the type the code asks for and
    /// runs on what the code does with it. Where a redacted value does not
    /// deserialize (an enum, a date, a number that must be positive) or
    /// leads the code down another branch, the replay fails or diverges:
    /// put a harmless value of the right type back in the JSON (or in the
    /// test: `export.entries[2].value = json!(…)`) before replaying.
    ///
    /// ```
    /// use mcp_tasks_runtime::replay::JournalExport;
    ///
    /// let export: JournalExport = serde_json::from_value(serde_json::json!({
    ///     "taskId": "5f2b3c9e0d4a4e6f8a1b2c3d4e5f6a7b", "tool": "deploy", "version": 1,
    ///     "status": "completed", "principal": "alice", "createdAtMs": 0,
    ///     "arguments": {"token": "s3cret", "replicas": 3},
    ///     "entries": [
    ///         {"position": 0, "kind": "checkpoint", "name": "login", "value": {"session": "abc"}},
    ///         {"position": 1, "kind": "ask", "name": "Approve",
    ///          "value": {"action": "accept", "content": {"approve": true, "note": "ok by me"}}},
    ///         {"position": 2, "kind": "sleep", "name": "sleep", "value": 1764748800000_i64},
    ///     ],
    /// }))
    /// .unwrap();
    /// let redacted = serde_json::to_value(export.redacted()).unwrap();
    /// assert_eq!(redacted["arguments"], serde_json::json!({"token": "<redacted>", "replicas": 0}));
    /// assert_eq!(redacted["entries"][0]["value"], serde_json::json!({"session": "<redacted>"}));
    /// assert_eq!(redacted["entries"][1]["value"]["action"], "accept");
    /// assert_eq!(redacted["entries"][1]["value"]["content"]["note"], "<redacted>");
    /// assert_eq!(redacted["entries"][2]["value"], 1764748800000_i64);
    /// assert_eq!(redacted["principal"], "<redacted>");
    /// ```
    #[must_use]
    pub fn redacted(mut self) -> Self {
        self.arguments.values_mut().for_each(redact);
        for entry in &mut self.entries {
            match entry.kind {
                StepKind::Checkpoint | StepKind::Roots => redact(&mut entry.value),
                StepKind::Ask => {
                    if let Some(content) = entry.value.get_mut("content") {
                        redact(content);
                    }
                }
                StepKind::Sample => {
                    if let Some(content) = entry.value.get_mut("content") {
                        redact_content(content);
                    }
                }
                StepKind::Now
                | StepKind::Uuid
                | StepKind::Sleep
                | StepKind::Select
                | StepKind::Patch => {}
            }
        }
        self.task_id = "0".repeat(32);
        if self.principal.is_some() {
            self.principal = Some(REDACTED.to_owned());
        }
        self
    }

    /// Reads task `id` and its journal from `store`; `None` when there is
    /// no such task.
    ///
    /// # Errors
    ///
    /// Store failures.
    pub async fn read(store: &dyn Store, id: &str) -> Result<Option<Self>> {
        let Some(task) = store.get(id).await? else {
            return Ok(None);
        };
        let journal = store.journal(id).await?;
        Ok(Some(Self::new(&task, journal)))
    }
}

/// What [`JournalExport::redacted`] writes in place of a string.
const REDACTED: &str = "<redacted>";

/// `value` with its strings and numbers replaced, its shape kept.
fn redact(value: &mut Value) {
    match value {
        Value::String(s) => REDACTED.clone_into(s),
        Value::Number(n) => *n = 0.into(),
        Value::Array(items) => items.iter_mut().for_each(redact),
        Value::Object(members) => members.values_mut().for_each(redact),
        Value::Bool(_) | Value::Null => {}
    }
}

/// A completion's content (a block, or blocks) with its data replaced and
/// its `type` and `mimeType` kept, so that it still reads as content.
fn redact_content(content: &mut Value) {
    match content {
        Value::Array(blocks) => blocks.iter_mut().for_each(redact_content),
        Value::Object(block) => block
            .iter_mut()
            .filter(|(key, _)| !matches!(key.as_str(), "type" | "mimeType"))
            .for_each(|(_, value)| redact(value)),
        other => redact(other),
    }
}

/// A step as a journal position holds it, or as the code asks for it: its
/// kind and name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// The step's kind.
    pub kind: StepKind,
    /// The step's name (a checkpoint's name, a question's type).
    pub name: String,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} `{}`", self.kind.as_str(), self.name)
    }
}

/// What [`check`] found for one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Verdict {
    /// The code takes the recorded path to the end of the journal: the task
    /// resumes on this build.
    Replays,
    /// The code asks for another step than the one recorded at `position`:
    /// the task would fail as non-deterministic on this build.
    Diverges {
        /// The journal position.
        position: u32,
        /// What the journal recorded there.
        recorded: Step,
        /// What the code now asks for there (`None`: the fn returned before
        /// it got there).
        wanted: Option<Step>,
    },
    /// The replay failed another way before the end of the journal: a
    /// recorded value no longer decodes, the stored arguments no longer fit,
    /// a `select` recorded a branch the code does not have, the fn panicked.
    Fails {
        /// Why, as the task would fail.
        message: String,
    },
    /// The tool's versions refuse the task: it was recorded by a version
    /// older than the tool replays from (the engine fails it at startup,
    /// naming the versions) or newer than the tool is (left to an instance
    /// that serves it). Not replayed.
    RefusedByVersion {
        /// The version that recorded the task.
        recorded: u32,
        /// The versions this build replays: `replays_from ..= version`.
        replays_from: u32,
        /// This build's version of the tool.
        version: u32,
    },
    /// No tool of that name in this build: the task would fail when it
    /// resumes.
    UnknownTool,
}

impl Verdict {
    /// Whether the task is fine on this build: it replays, or its version
    /// is refused by the tool's own rules (`replays_from`), which the
    /// engine handles with a clear reason.
    pub fn passed(&self) -> bool {
        matches!(self, Self::Replays | Self::RefusedByVersion { .. })
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Replays => write!(f, "replays"),
            Self::Diverges {
                position,
                recorded,
                wanted: Some(wanted),
            } => write!(
                f,
                "diverges at position {position}: recorded {recorded}, the code now asks for {wanted}"
            ),
            Self::Diverges {
                position,
                recorded,
                wanted: None,
            } => write!(
                f,
                "diverges at position {position}: recorded {recorded}, the code now returns before it"
            ),
            Self::Fails { message } => write!(f, "fails: {message}"),
            Self::RefusedByVersion {
                recorded,
                replays_from,
                version,
            } => write!(
                f,
                "refused by version: recorded by version {recorded}, this build replays \
                 versions {replays_from}–{version}"
            ),
            Self::UnknownTool => write!(f, "unknown tool: this build does not have it"),
        }
    }
}

/// One task's line of a [`Report`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskVerdict {
    /// The task's id.
    pub task_id: String,
    /// Its tool.
    pub tool: String,
    /// The version of the tool that recorded it.
    pub version: u32,
    /// What the replay found.
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// What [`check`] found: a verdict per unfinished task, oldest first.
///
/// Its `Display` is one line per task (`ID TOOL vN: replays`, `…: diverges
/// at position 0: recorded checkpoint `a`, the code now asks for checkpoint
/// `b``) and a summary line; it serializes as
/// `{"passed": bool, "tasks": [{"taskId", "tool", "version", "verdict", …}]}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Whether every task passed (see [`Report::passed`]).
    pub passed: bool,
    /// The verdicts, oldest task first.
    pub tasks: Vec<TaskVerdict>,
}

impl Report {
    fn new(tasks: Vec<TaskVerdict>) -> Self {
        let passed = tasks.iter().all(|t| t.verdict.passed());
        Self { passed, tasks }
    }

    /// Whether the build can be deployed over these tasks: none diverges,
    /// fails, or has lost its tool. (Tasks refused by version pass: the
    /// tool's `replays_from` refuses them on purpose.)
    pub fn passed(&self) -> bool {
        self.passed
    }

    /// The tasks that did not pass.
    pub fn failures(&self) -> impl Iterator<Item = &TaskVerdict> {
        self.tasks.iter().filter(|t| !t.verdict.passed())
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for t in &self.tasks {
            writeln!(f, "{} {} v{}: {}", t.task_id, t.tool, t.version, t.verdict)?;
        }
        let count = |p: fn(&Verdict) -> bool| self.tasks.iter().filter(|t| p(&t.verdict)).count();
        let replays = count(|v| matches!(v, Verdict::Replays));
        let diverges = count(|v| matches!(v, Verdict::Diverges { .. }));
        let refused = count(|v| matches!(v, Verdict::RefusedByVersion { .. }));
        let other = self.tasks.len() - replays - diverges - refused;
        write!(
            f,
            "{} unfinished task(s): {replays} replay, {diverges} diverge, {refused} refused by \
             version, {other} fail otherwise: {}",
            self.tasks.len(),
            if self.passed { "passed" } else { "FAILED" }
        )
    }
}

/// Replays the journal of every unfinished task in `store` through the
/// tools of `registry`, running no step live, and reports each task's
/// [`Verdict`]. Claims, runs and changes nothing (see the [module
/// docs](self)). For tools that take [`State<T>`](crate::State), use
/// [`EngineBuilder::check_replay`](crate::engine::EngineBuilder::check_replay),
/// which hands them the builder's state.
///
/// ```
/// use mcp_tasks_runtime::{checkpoint, replay, store::MemoryStore, task_tool, tool::Registry};
///
/// /// Counts.
/// #[task_tool]
/// async fn count() -> u32 {
///     mcp_tasks_runtime::durable::step("count", || async { 3 }).await
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mcp_tasks_runtime::Result<()> {
/// let store = MemoryStore::new();
/// let report = replay::check(&store, &Registry::new().with(count_tool())?).await?;
/// assert!(report.passed());
/// assert!(report.tasks.is_empty());
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// Store failures while reading the tasks or their journals.
pub async fn check(store: &dyn Store, registry: &Registry) -> Result<Report> {
    check_with(store, registry, &StateMap::new(), Arc::default()).await
}

/// [`check`] with the tools' state and the engine's clock.
pub(crate) async fn check_with(
    store: &dyn Store,
    registry: &Registry,
    state: &StateMap,
    clock: Arc<Clock>,
) -> Result<Report> {
    let mut verdicts = Vec::new();
    let mut after: Option<ListCursor> = None;
    loop {
        let page = store.list_all(after.as_ref(), PAGE).await?;
        let Some(last) = page.last() else { break };
        after = Some(ListCursor::after(last));
        let full = page.len() == PAGE;
        for task in page.into_iter().filter(|t| !t.status.is_terminal()) {
            let journal = store.journal(&task.id).await?;
            let export = JournalExport::new(&task, journal);
            let verdict = match registry.get(&task.tool) {
                None => Verdict::UnknownTool,
                Some(tool) => replay(tool.descriptor(), state, &export, clock.clone()).await,
            };
            verdicts.push(TaskVerdict {
                task_id: task.id,
                tool: task.tool,
                version: task.tool_version,
                verdict,
            });
        }
        if !full {
            break;
        }
    }
    Ok(Report::new(verdicts))
}

/// Replays `export` through `tool`, running no step live: the verdict of
/// [`check`] for one task (and of the testing kit's `replay_journal`).
pub(crate) async fn replay(
    tool: &ToolDescriptor,
    state: &StateMap,
    export: &JournalExport,
    clock: Arc<Clock>,
) -> Verdict {
    if !tool.replays(export.version) {
        return Verdict::RefusedByVersion {
            recorded: export.version,
            replays_from: tool.replays_from(),
            version: tool.version(),
        };
    }
    let fut = match tool.prepare(export.arguments.clone(), state) {
        Ok(fut) => fut,
        Err(why) => {
            return Verdict::Fails {
                message: format!("the stored arguments no longer fit the tool: {why}"),
            };
        }
    };
    let ctx = TaskCtx::check(Run {
        task_id: export.task_id.clone(),
        journal: export.entries.clone(),
        caps: InputCapabilities::ALL,
        recorder: Some(Arc::new(NoWrites)),
        record: None,
        answers: Map::new(),
        holder: None,
        let_go: None,
        info: TaskInfo::exported(export),
        clock,
        // A check runs no new step, so no cap applies.
        max_entries: u32::MAX,
        // A check stops where a sleep would wait, whatever its length.
        sleep_in_process_ms: 0,
    });
    let Ok(exit) = tokio::time::timeout(BOUND, ctx.drive(fut)).await else {
        return Verdict::Fails {
            message: format!(
                "the replay did not stop within {BOUND:?}: code outside the steps waits on \
                 something"
            ),
        };
    };
    let (diverged, next) = ctx.checked();
    if let Some((position, recorded, kind, name)) = diverged {
        return Verdict::Diverges {
            position,
            recorded: Step {
                kind: recorded.kind,
                name: recorded.name,
            },
            wanted: Some(Step { kind, name }),
        };
    }
    match exit {
        Exit::Fail(e) => Verdict::Fails { message: e.message },
        Exit::Done(Err(e)) if e.message.starts_with(crate::task::PANICKED) => {
            Verdict::Fails { message: e.message }
        }
        // The fn returned (a resume would end the task so): every recorded
        // step must have been taken on the way.
        Exit::Done(_) | Exit::Cancelled => match ctx.recorded_after(next) {
            Some(left) => Verdict::Diverges {
                position: left.position,
                recorded: Step {
                    kind: left.kind,
                    name: left.name,
                },
                wanted: None,
            },
            None => Verdict::Replays,
        },
        // Stopped where a step would run live, or asleep on a recorded
        // timer not yet due.
        Exit::Replayed
        | Exit::Sleep(_)
        | Exit::Park(_)
        | Exit::Ended
        | Exit::Lost
        | Exit::Handoff => Verdict::Replays,
    }
}

/// The recorder of a replay check: it has no store, so nothing the replay
/// does can be written. No live step ever reaches it (the check stops the
/// run first); a status message is dropped.
struct NoWrites;

impl Recorder for NoWrites {
    fn record(&self, _: &str, _: JournalEntry) -> futures::future::BoxFuture<'static, Recorded> {
        Box::pin(std::future::ready(Recorded::Lost))
    }

    fn status(&self, _: &str, _: String) {}
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Nothing a caller, a user or a step put in an export is left in its
    /// redacted form, whatever the nesting; the path and the shape are.
    #[test]
    fn a_redacted_export_keeps_the_path_and_the_shape_and_no_secret() {
        let secrets = [
            "hunter2",
            "4111111111111111",
            "alice@example.com",
            "sk-live-123",
        ];
        let entry = |position, kind, name: &str, value| JournalEntry {
            position,
            kind,
            name: name.to_owned(),
            value,
        };
        let export = JournalExport {
            task_id: "5f2b3c9e0d4a4e6f8a1b2c3d4e5f6a7b".to_owned(),
            tool: "pay".to_owned(),
            version: 2,
            status: "working".to_owned(),
            principal: Some("alice@example.com".to_owned()),
            created_at_ms: 1_764_748_800_000,
            arguments: json!({"card": "4111111111111111", "amount": 4200, "notify": true,
                              "tags": ["sk-live-123", null]})
            .as_object()
            .unwrap()
            .clone(),
            entries: vec![
                entry(
                    0,
                    StepKind::Checkpoint,
                    "login",
                    json!({"token": "sk-live-123",
                                                               "ttl": 3600, "nested": [{"p": "hunter2"}]}),
                ),
                entry(
                    1,
                    StepKind::Ask,
                    "Pin",
                    json!({"action": "accept",
                                                       "content": {"pin": "hunter2", "remember": false}}),
                ),
                entry(
                    2,
                    StepKind::Sample,
                    "Summary",
                    json!({"role": "assistant", "model": "m1",
                        "content": {"type": "text", "text": "alice@example.com paid"}}),
                ),
                entry(
                    3,
                    StepKind::Roots,
                    "roots",
                    json!({"roots": [{"uri": "file:///home/alice"}]}),
                ),
                entry(4, StepKind::Now, "now", json!(1_764_748_800_123_i64)),
                entry(5, StepKind::Select, "select", json!(1)),
                entry(6, StepKind::Checkpoint, "receipt", json!("hunter2")),
            ],
        };
        let redacted = export.clone().redacted();
        let text = serde_json::to_string(&redacted).unwrap();
        for secret in secrets.iter().chain(&["5f2b3c9e", "/home/alice", "4200"]) {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(
            Value::Object(redacted.arguments.clone()),
            json!({"card": "<redacted>", "amount": 0, "notify": true, "tags": ["<redacted>", null]})
        );
        let values: Vec<&Value> = redacted.entries.iter().map(|e| &e.value).collect();
        assert_eq!(
            values[..4],
            [
                &json!({"token": "<redacted>", "ttl": 0, "nested": [{"p": "<redacted>"}]}),
                &json!({"action": "accept", "content": {"pin": "<redacted>", "remember": false}}),
                &json!({"role": "assistant", "model": "m1",
                        "content": {"type": "text", "text": "<redacted>"}}),
                &json!({"roots": [{"uri": "<redacted>"}]}),
            ]
        );
        // The engine's own values, and the path, are as they were.
        assert_eq!(
            values[4..6],
            [&export.entries[4].value, &export.entries[5].value]
        );
        for (a, b) in redacted.entries.iter().zip(&export.entries) {
            assert_eq!((a.position, a.kind, &a.name), (b.position, b.kind, &b.name));
        }
        assert_eq!(redacted.task_id, "0".repeat(32));
        assert_eq!(redacted.principal.as_deref(), Some("<redacted>"));
        assert_eq!(
            (
                &redacted.tool,
                redacted.version,
                &redacted.status,
                redacted.created_at_ms
            ),
            (
                &export.tool,
                export.version,
                &export.status,
                export.created_at_ms
            )
        );
        // It reads back as an export.
        let back: JournalExport = serde_json::from_str(&text).unwrap();
        assert_eq!(back, redacted);
    }
}
