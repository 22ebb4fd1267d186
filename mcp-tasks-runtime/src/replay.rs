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
use serde_json::Map;

use crate::{
    clock::Clock,
    error::Result,
    input::InputCapabilities,
    journal::{JournalEntry, StepKind},
    store::{ListCursor, Store},
    task::{Exit, Recorded, Recorder, Run, TaskCtx, TaskInfo},
    tool::Registry,
    tool::StateMap,
    tool::ToolDescriptor,
};

mod export;

pub use export::JournalExport;

/// How many tasks [`check`] reads at once.
const PAGE: usize = 200;

/// How long one task's replay may take before the check gives up on it (a
/// fn whose code outside steps waits on something that never comes).
const BOUND: Duration = Duration::from_secs(30);

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
        Exit::Replayed | Exit::Sleep(_) | Exit::Park(_) | Exit::Ended | Exit::Lost => {
            Verdict::Replays
        }
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

    fn transition(
        &self,
        _: &str,
        _: crate::store::Transition,
    ) -> futures::future::BoxFuture<'static, Option<crate::store::TaskRecord>> {
        Box::pin(std::future::ready(None))
    }
}
