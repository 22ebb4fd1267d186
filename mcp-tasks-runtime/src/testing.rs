//! A kit for testing tools (feature `testing`): run a tool as a real task on
//! an in-memory engine, see the questions it asks, answer them, move its
//! durable timers on without waiting, and read how it ended.
//!
//! The engine is the real one (journal, replay, parking, deadlines), on a
//! [`MemoryStore`], with a clock of its own that [`TestTask::advance`] moves
//! on: a `sleep` of a day, or a question with a deadline of an hour, takes no
//! time in a test. That clock is [`TestClock::new`]: the system's time plus
//! every `advance`, so it also moves as real time passes. A test that needs
//! time to stand still between moves (a simulation, say) builds its engines
//! with [`TestClock::frozen`], which moves only by `advance`. Every durable `sleep` parks the task here, however short
//! (an engine's default lets one of up to a second wait in its run:
//! [`EngineBuilder::sleep_in_process_up_to`](crate::engine::EngineBuilder::sleep_in_process_up_to)),
//! so `advance` moves each one on. Each [`ToolTest`] has its own engine, state and clock, so
//! tests run in parallel without seeing each other. Tasks of tools that set
//! no `ttl` never expire here; a tool's own `ttl` counts on the test's clock.
//!
//! ```
//! use std::time::Duration;
//!
//! use mcp_tasks_runtime::{
//!     ToolError, confirm, durable, question::AskError, task_tool, testing::ToolTest,
//! };
//!
//! /// Waits a day, then asks; gives up after an hour without an answer.
//! #[task_tool]
//! async fn nightly() -> Result<String, ToolError> {
//!     durable::sleep(Duration::from_secs(24 * 3600)).await;
//!     match confirm("Run it?").timeout(Duration::from_secs(3600)).await {
//!         Ok(yes) => Ok(format!("ran: {yes}")),
//!         Err(AskError::TimedOut) => Ok("nobody answered".into()),
//!         Err(e) => Err(e.into()),
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let test = ToolTest::new(nightly_tool()).start().await;
//! let task = test.call(serde_json::json!({})).await;
//! task.advance(Duration::from_secs(24 * 3600)).await; // the sleep is over
//! assert_eq!(task.question().await.message(), Some("Run it?"));
//! task.advance(Duration::from_secs(3600)).await; // the deadline passes
//! assert_eq!(task.text().await, "nobody answered");
//! # }
//! ```

use std::{fmt, sync::Arc, time::Duration};

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::{
    Engine,
    engine::{Call, CallMode, CallOutcome},
    id,
    journal::JournalEntry,
    question::{InputCapabilities, InputRequest},
    store::{MemoryStore, PendingInput, Store, TaskRecord, TaskStatus},
    tool::{Registry, StateMap, TaskPolicy, ToolDescriptor, ToolOutcome},
};

/// The methods [`TestTask`] and [`InlineCall`] build alike on their own
/// `questions`, `respond` and `result`.
macro_rules! answers_and_output {
    () => {
        /// The one question asked.
        ///
        /// # Panics
        ///
        /// As [`questions`](Self::questions), and when there are several.
        pub async fn question(&self) -> TestQuestion {
            let mut all = self.questions().await;
            assert_eq!(all.len(), 1, "expected one question, found {all:?}");
            all.remove(0)
        }

        /// Accepts the form question `key` with `content` (see
        /// [`respond`](Self::respond)).
        pub async fn answer(&self, key: &str, content: Value) {
            self.respond(key, json!({"action": "accept", "content": content}))
                .await;
        }

        /// Declines the question `key` (see [`respond`](Self::respond)).
        pub async fn decline(&self, key: &str) {
            self.respond(key, json!({"action": "decline"})).await;
        }

        /// The call's result once it completes (a task's is waited for):
        /// its `structuredContent` (or its text) decoded; a tool error
        /// (`isError: true`) comes back as `Err` with its text.
        ///
        /// # Panics
        ///
        /// When the call fails, is cancelled or (inline) still waits on
        /// questions, or the content does not decode.
        pub async fn output<T: DeserializeOwned>(&self) -> Result<T, String> {
            let result = self.result().await;
            if result.get("isError") == Some(&Value::Bool(true)) {
                return Err(text_of(&result));
            }
            let content = result
                .get("structuredContent")
                .cloned()
                .unwrap_or_else(|| Value::String(text_of(&result)));
            Ok(serde_json::from_value(content)
                .unwrap_or_else(|e| panic!("the result does not decode: {e}: {result:?}")))
        }

        /// The text of the call's result once it completes (a tool
        /// error's too).
        ///
        /// # Panics
        ///
        /// As [`output`](Self::output).
        pub async fn text(&self) -> String {
            text_of(&self.result().await)
        }
    };
}

mod determinism;
mod inline;
mod task;

pub use crate::clock::TestClock;
pub use determinism::{DeterminismReport, Finding};
pub use inline::InlineCall;
use inline::Round;
/// Checks, crate-wide, what `#[task_tool]` cannot see from a tool's body
/// (feature `macros` too): see [writing tools](crate::guide::writing_tools).
#[cfg(feature = "macros")]
pub use mcp_tasks_macros::determinism_check;
pub use task::{TestQuestion, TestTask};

/// How long a wait of the kit lasts by default before it panics, naming
/// what it waited for (see [`ToolTest::settle_timeout`]).
const SETTLE: Duration = Duration::from_secs(10);

/// A tool (or several) on an engine of its own: made by [`ToolTest::new`],
/// started by [`ToolTest::start`].
#[derive(Debug)]
#[must_use = "a ToolTest does nothing until `start` is called"]
pub struct ToolTest {
    tools: Vec<&'static ToolDescriptor>,
    state: StateMap,
    capabilities: InputCapabilities,
    principal: Option<String>,
    settle: Duration,
}

impl ToolTest {
    /// A test of `tool`; its client declares elicitation (forms and URL
    /// mode), sampling (with tools) and roots.
    pub fn new(tool: &'static ToolDescriptor) -> Self {
        let capabilities = InputCapabilities::ALL;
        Self {
            tools: vec![tool],
            state: StateMap::new(),
            capabilities,
            principal: None,
            settle: SETTLE,
        }
    }

    /// Serves `tool` too (the first one is the one [`StartedTest::call`] calls).
    pub fn tool(mut self, tool: &'static ToolDescriptor) -> Self {
        self.tools.push(tool);
        self
    }

    /// Hands `value` to the tools' [`State<T>`](crate::State) parameters.
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.state.insert(value);
        self
    }

    /// Hands a value the test keeps to the tools' [`State<T>`](crate::State)
    /// parameters: the test reads it after the run through its own `Arc`,
    /// which is how to inspect a fake that is not `Clone`.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    ///
    /// use mcp_tasks_runtime::{State, task_tool, testing::ToolTest};
    ///
    /// /// Records what it was asked to send (a fake mailer: not `Clone`).
    /// #[derive(Default)]
    /// struct Outbox {
    ///     sent: Mutex<Vec<String>>,
    /// }
    ///
    /// /// Sends a mail.
    /// #[task_tool]
    /// async fn send(to: String, outbox: State<Outbox>) -> String {
    ///     outbox.sent.lock().unwrap().push(to.clone());
    ///     format!("sent to {to}")
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let outbox = Arc::new(Outbox::default());
    /// let test = ToolTest::new(send_tool()).state_arc(outbox.clone()).start().await;
    /// let task = test.call(serde_json::json!({"to": "ada@example.com"})).await;
    /// assert_eq!(task.text().await, "sent to ada@example.com");
    /// assert_eq!(*outbox.sent.lock().unwrap(), ["ada@example.com"]);
    /// # }
    /// ```
    pub fn state_arc<T: Send + Sync + 'static>(mut self, value: Arc<T>) -> Self {
        self.state.insert_arc(value);
        self
    }

    builder_setters! {
        /// How long the kit's waits last before they panic (10 s by default):
        /// for the task to ask, to settle before [`TestTask::advance`], to end.
        /// A tool that really works that long (against a real service, say)
        /// needs more.
        pub fn settle_timeout(Duration) => settle;

        /// What the calling client declares it can answer (default: everything).
        pub fn capabilities(InputCapabilities) => capabilities;
    }

    /// Who calls (what [`task_info`](crate::durable::task_info) shows as the principal).
    pub fn principal(mut self, principal: impl Into<String>) -> Self {
        self.principal = Some(principal.into());
        self
    }

    /// Replays an exported journal (as `tasks journal ID`, the admin page's
    /// `/tasks/{id}/journal.json` or [`TestTask::export`] give it) through
    /// the tool it names, running no step live, and says whether the tool
    /// takes the recorded path: the verdict of the deploy's
    /// [`replay::check`](crate::replay::check) for that task, from the same
    /// code. Keep a journal recorded in production beside the tests, and a
    /// change that would break its tasks fails a test. Starts no engine.
    /// An export holds arguments, answers and step values in clear: commit
    /// its [`redacted`](crate::replay::JournalExport::redacted) form, with
    /// what the replay needs put back by hand.
    ///
    /// ```
    /// use mcp_tasks_runtime::{
    ///     ToolError, checkpoint, confirm, replay::{JournalExport, Verdict}, task_tool,
    ///     testing::ToolTest,
    /// };
    ///
    /// /// Builds, then asks before shipping.
    /// #[task_tool]
    /// async fn ship() -> Result<String, ToolError> {
    ///     let build = checkpoint("build", || async { Ok(42) }).await?;
    ///     let yes = confirm(format!("Ship build {build}?")).await?;
    ///     Ok(if yes { "shipped" } else { "kept" }.into())
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let recorded: JournalExport = serde_json::from_value(serde_json::json!({
    ///     "taskId": "t1", "tool": "ship", "version": 1, "status": "input_required",
    ///     "principal": null, "createdAtMs": 0, "arguments": {},
    ///     "entries": [{"position": 0, "kind": "checkpoint", "name": "build", "value": 42}],
    /// }))
    /// .unwrap();
    /// assert_eq!(ToolTest::new(ship_tool()).replay_journal(&recorded).await, Verdict::Replays);
    /// # }
    /// ```
    pub async fn replay_journal(
        &self,
        export: &crate::replay::JournalExport,
    ) -> crate::replay::Verdict {
        match self.tools.iter().find(|t| t.name() == export.tool) {
            Some(tool) => {
                crate::replay::replay(tool, &self.state, export, std::sync::Arc::default()).await
            }
            None => crate::replay::Verdict::UnknownTool,
        }
    }

    /// Starts the engine.
    ///
    /// # Panics
    ///
    /// When the engine refuses to start: a tool's state was not given, or
    /// two tools share a name. The message says which.
    pub async fn start(self) -> StartedTest {
        self.start_on(Arc::new(MemoryStore::new()), TestClock::new())
            .await
    }

    async fn start_on(self, store: Arc<dyn Store>, clock: TestClock) -> StartedTest {
        let registry = self
            .tools
            .iter()
            .try_fold(Registry::new(), |r, t| r.with(t))
            .unwrap_or_else(|e| panic!("the tools do not make a registry: {e}"));
        // No default TTL: moving the clock a day on must not expire a task
        // whose tool set none (one that sets one expires as it would). Every
        // durable sleep parks, however short, so that `advance` moves it on.
        let mut builder = Engine::builder_arc(store.clone())
            .registry(registry)
            .clock(&clock)
            .default_ttl(None)
            .sleep_in_process_up_to(Duration::ZERO);
        builder.set_state(self.state);
        let engine = builder
            .start()
            .await
            .unwrap_or_else(|e| panic!("the engine does not start: {e}"));
        StartedTest {
            engine,
            store,
            clock,
            tool: self.tools[0],
            capabilities: self.capabilities,
            principal: self.principal,
            settle: self.settle,
        }
    }
}

/// A started [`ToolTest`]: call its tool with [`StartedTest::call`].
#[derive(Debug, Clone)]
pub struct StartedTest {
    engine: Engine,
    store: Arc<dyn Store>,
    clock: TestClock,
    tool: &'static ToolDescriptor,
    capabilities: InputCapabilities,
    principal: Option<String>,
    settle: Duration,
}

impl StartedTest {
    /// Calls the tool with `arguments` (a JSON object) as a task.
    ///
    /// A `task = forbidden` tool makes no task: call it with
    /// [`StartedTest::call_inline`].
    ///
    /// # Panics
    ///
    /// When the arguments do not fit the tool (the message names the
    /// field), and for a `task = forbidden` tool (the message names
    /// `call_inline`).
    pub async fn call(&self, arguments: Value) -> TestTask {
        self.call_tool(self.tool.name(), arguments).await
    }

    /// Calls the tool `name` (one of those given with [`ToolTest::tool`]).
    ///
    /// # Panics
    ///
    /// As [`StartedTest::call`], and for an unknown tool.
    pub async fn call_tool(&self, name: &str, arguments: Value) -> TestTask {
        if self.policy(name) == Some(TaskPolicy::Forbidden) {
            panic!(
                "`{name}` is `task = forbidden`: it runs inline and makes no task; \
                 call it with `call_inline`"
            );
        }
        let call = Call::new(name, object(arguments))
            .capabilities(self.capabilities)
            .principal(self.principal.clone());
        match self.engine.call(call).await {
            Ok(CallOutcome::Task(task)) => self.task(&task.id),
            Ok(other) => panic!("`{name}` did not start a task: {other:?}"),
            Err(e) => panic!("`{name}` refused the call: {e}"),
        }
    }

    /// Calls the tool inline, as a client that does not take tasks would:
    /// the way to test a `task = forbidden` tool (any tool that is not
    /// `task = required` runs so too). Its questions come back as MRTR
    /// rounds; answer them on the [`InlineCall`] as on a [`TestTask`], and
    /// the call goes on once each question of the round is answered.
    ///
    /// An inline run has no record and no clock to move on: a durable
    /// `sleep` in it waits in place, for real.
    ///
    /// ```
    /// use mcp_tasks_runtime::{ToolError, confirm, task_tool, testing::ToolTest};
    ///
    /// /// Asks, then answers at once.
    /// #[task_tool(task = forbidden)]
    /// async fn quick_check(what: String) -> Result<String, ToolError> {
    ///     let yes = confirm(format!("Check {what}?")).await?;
    ///     Ok(format!("{what}: {yes}"))
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let test = ToolTest::new(quick_check_tool()).start().await;
    /// let call = test.call_inline(serde_json::json!({"what": "disk"})).await;
    /// let question = call.question().await;
    /// assert_eq!(question.message(), Some("Check disk?"));
    /// call.answer(question.key(), serde_json::json!({"confirm": true})).await;
    /// assert_eq!(call.text().await, "disk: true");
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// When the arguments do not fit the tool (the message names the
    /// field), and for a `task = required` tool.
    pub async fn call_inline(&self, arguments: Value) -> InlineCall {
        self.call_tool_inline(self.tool.name(), arguments).await
    }

    /// [`StartedTest::call_inline`] of the tool `name` (one of those given
    /// with [`ToolTest::tool`]).
    ///
    /// # Panics
    ///
    /// As [`StartedTest::call_inline`], and for an unknown tool.
    pub async fn call_tool_inline(&self, name: &str, arguments: Value) -> InlineCall {
        let call = InlineCall {
            engine: self.engine.clone(),
            tool: name.to_owned(),
            arguments: object(arguments),
            capabilities: self.capabilities,
            principal: self.principal.clone(),
            round: Arc::new(tokio::sync::Mutex::new(Round::default())),
        };
        call.run(Vec::new(), Map::new()).await;
        call
    }

    /// The task `id` on this test's engine: one an earlier engine of the
    /// test made, after [`StartedTest::restart`].
    pub fn task(&self, id: &str) -> TestTask {
        TestTask {
            engine: self.engine.clone(),
            id: id.to_owned(),
            principal: self.principal.clone(),
            settle: self.settle,
        }
    }

    /// Stops this engine and starts `next`'s tools (a new version of the
    /// tool, say) on the same store and clock, as a deploy does: the tasks
    /// the old code made and left parked or asleep are run on by the new
    /// code, from their journals. Reach them with [`StartedTest::task`].
    /// `next` brings its own state, capabilities and principal; the
    /// journal's checks apply as in production (a task of a version below
    /// the new tool's `replays_from` is failed when the engine starts).
    ///
    /// ```
    /// use mcp_tasks_runtime::{ToolError, checkpoint, confirm, task_tool, testing::ToolTest};
    ///
    /// /// Builds, then asks before shipping.
    /// #[task_tool(name = "ship")]
    /// async fn ship_v1() -> Result<String, ToolError> {
    ///     let build = checkpoint("build", || async { Ok(41) }).await?;
    ///     let yes = confirm(format!("Ship build {build}?")).await?;
    ///     Ok(format!("v1 shipped {build}: {yes}"))
    /// }
    ///
    /// /// The same steps, a new ending.
    /// #[task_tool(name = "ship", version = 2)]
    /// async fn ship_v2() -> Result<String, ToolError> {
    ///     let build = checkpoint("build", || async { Ok(42) }).await?;
    ///     let yes = confirm(format!("Ship build {build}?")).await?;
    ///     Ok(format!("v2 shipped {build}: {yes}"))
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let v1 = ToolTest::new(ship_v1_tool()).start().await;
    /// let old = v1.call(serde_json::json!({})).await;
    /// let key = old.question().await.key().to_owned(); // parked by v1
    /// let v2 = v1.restart(ToolTest::new(ship_v2_tool())).await;
    /// let task = v2.task(old.id());
    /// task.answer(&key, serde_json::json!({"confirm": true})).await;
    /// // v2 ran on from v1's journal: the build v1 recorded, v2's ending.
    /// assert_eq!(task.text().await, "v2 shipped 41: true");
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// As [`ToolTest::start`], and when the old engine cannot let go of
    /// its tasks.
    pub async fn restart(self, next: ToolTest) -> StartedTest {
        self.engine
            .shutdown()
            .await
            .unwrap_or_else(|e| panic!("the old engine does not stop: {e}"));
        next.start_on(self.store, self.clock).await
    }

    fn policy(&self, name: &str) -> Option<TaskPolicy> {
        self.engine
            .registry()
            .get(name)
            .map(|t| t.descriptor().policy())
    }

    /// The engine, for anything the kit does not cover.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}

/// Why a wait of `limit` for `what` gave up on the task as `r` is: short,
/// and naming the durable `sleep` when the task is running on.
fn stuck(limit: Duration, what: &str, r: &TaskRecord) -> String {
    let running = r.status == TaskStatus::Working && r.wake_at_ms.is_none();
    let state = if running {
        "still running, not on a durable timer nor parked".to_owned()
    } else {
        r.status.as_str().to_owned()
    };
    let message = r
        .status_message
        .as_deref()
        .map(|m| format!(" (\"{m}\")"))
        .unwrap_or_default();
    let mut said = format!(
        "waited {limit:?} for {what}: task {} is {state}{message}",
        r.id
    );
    if running {
        said.push_str(
            ". A tokio timer (`tokio::time::sleep`) is not moved on by `advance`: \
             wait with the durable `mcp_tasks_runtime::durable::sleep`; a tool that really \
             works this long needs `ToolTest::settle_timeout`",
        );
    }
    said
}

/// `arguments` as the JSON object a call takes.
fn object(arguments: Value) -> Map<String, Value> {
    match arguments {
        Value::Object(map) => map,
        other => panic!("the arguments must be a JSON object, not {other}"),
    }
}

/// Makes the task ids (and `durable::uuid` values) made on this thread
/// from now on come from a sequence seeded by `seed` instead of the
/// operating system's generator (`None` goes back to it). A deterministic
/// simulation that drives its engines on one thread (a `current_thread`
/// runtime) seeds it so that the same seed makes the same ids. Ids made on
/// other threads are not affected. Never in production: seeded ids are
/// guessable, and a task id is a bearer secret.
///
/// ```
/// use mcp_tasks_runtime::testing::seed_ids;
///
/// seed_ids(Some(7));
/// // ... start engines and create tasks on this thread ...
/// seed_ids(None);
/// ```
pub fn seed_ids(seed: Option<u64>) {
    id::seeded::seed(seed);
}
