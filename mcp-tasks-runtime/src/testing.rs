//! A kit for testing tools (feature `testing`): run a tool as a real task on
//! an in-memory engine, see the questions it asks, answer them, move its
//! durable timers on without waiting, and read how it ended.
//!
//! The engine is the real one (journal, replay, parking, deadlines), on a
//! [`MemoryStore`], with a clock of its own that [`TestTask::advance`] moves
//! on: a `sleep` of a day, or a question with a deadline of an hour, takes no
//! time in a test. Each [`ToolTest`] has its own engine, state and clock, so
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
    engine::{Call, CallOutcome},
    id,
    question::{InputCapabilities, InputRequest},
    store::{MemoryStore, PendingInput, TaskRecord, TaskStatus},
    tool::{Registry, StateMap, ToolDescriptor},
};

/// How long any wait of the kit lasts before it panics, naming what it
/// waited for.
const LIMIT: Duration = Duration::from_secs(10);

/// A tool (or several) on an engine of its own: made by [`ToolTest::new`],
/// started by [`ToolTest::start`].
#[derive(Debug)]
#[must_use = "a ToolTest does nothing until `start` is called"]
pub struct ToolTest {
    tools: Vec<&'static ToolDescriptor>,
    state: StateMap,
    capabilities: InputCapabilities,
    principal: Option<String>,
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

    /// What the calling client declares it can answer (default: everything).
    pub fn capabilities(mut self, capabilities: InputCapabilities) -> Self {
        self.capabilities = capabilities;
        self
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
        let registry = self
            .tools
            .iter()
            .try_fold(Registry::new(), |r, t| r.with(t))
            .unwrap_or_else(|e| panic!("the tools do not make a registry: {e}"));
        // No default TTL: moving the clock a day on must not expire a task
        // whose tool set none (one that sets one expires as it would).
        let mut builder = Engine::builder(MemoryStore::new())
            .registry(registry)
            .default_ttl(None);
        builder.set_state(self.state);
        let engine = builder
            .start()
            .await
            .unwrap_or_else(|e| panic!("the engine does not start: {e}"));
        StartedTest {
            engine,
            tool: self.tools[0].name(),
            capabilities: self.capabilities,
            principal: self.principal,
        }
    }
}

/// A started [`ToolTest`]: call its tool with [`StartedTest::call`].
#[derive(Debug, Clone)]
pub struct StartedTest {
    engine: Engine,
    tool: &'static str,
    capabilities: InputCapabilities,
    principal: Option<String>,
}

impl StartedTest {
    /// Calls the tool with `arguments` (a JSON object) as a task.
    ///
    /// # Panics
    ///
    /// When the arguments do not fit the tool (the message names the field).
    pub async fn call(&self, arguments: Value) -> TestTask {
        self.call_tool(self.tool, arguments).await
    }

    /// Calls the tool `name` (one of those given with [`ToolTest::tool`]).
    ///
    /// # Panics
    ///
    /// As [`StartedTest::call`], and for an unknown tool.
    pub async fn call_tool(&self, name: &str, arguments: Value) -> TestTask {
        let Value::Object(arguments) = arguments else {
            panic!("the arguments must be a JSON object, not {arguments}")
        };
        let call = Call::new(name, arguments)
            .capabilities(self.capabilities)
            .principal(self.principal.clone());
        match self.engine.call(call).await {
            Ok(CallOutcome::Task(task)) => TestTask {
                engine: self.engine.clone(),
                id: task.id.clone(),
                principal: self.principal.clone(),
            },
            Ok(other) => panic!("`{name}` did not start a task: {other:?}"),
            Err(e) => panic!("`{name}` refused the call: {e}"),
        }
    }

    /// The engine, for anything the kit does not cover.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}

/// A task the test started: answer it, move its clock, read its end.
#[derive(Clone)]
pub struct TestTask {
    engine: Engine,
    id: String,
    principal: Option<String>,
}

impl fmt::Debug for TestTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestTask").field("id", &self.id).finish()
    }
}

/// A question the task is waiting on.
#[derive(Debug, Clone, PartialEq)]
pub struct TestQuestion(PendingInput);

impl TestQuestion {
    /// Its key in `inputRequests`.
    pub fn key(&self) -> &str {
        &self.0.key
    }

    /// What a form or URL question asks (`None` for sampling and roots).
    pub fn message(&self) -> Option<&str> {
        match &self.0.request {
            InputRequest::Form(form) => Some(&form.message),
            InputRequest::Url(ask) => Some(&ask.message),
            InputRequest::Sample(_) | InputRequest::ListRoots => None,
        }
    }

    /// The page a URL question ([`ask_url`](crate::question::ask_url)) sends the user
    /// to (`None` for any other question).
    pub fn url(&self) -> Option<&str> {
        match &self.0.request {
            InputRequest::Url(ask) => Some(&ask.url),
            _ => None,
        }
    }

    /// The question as the task stores it.
    pub fn pending(&self) -> &PendingInput {
        &self.0
    }
}

impl TestTask {
    /// The task's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The task as stored now.
    ///
    /// # Panics
    ///
    /// When the task is gone (expired).
    pub async fn record(&self) -> TaskRecord {
        self.engine
            .get(&self.id, self.principal.as_deref())
            .await
            .unwrap_or_else(|e| panic!("task {} is gone: {e}", self.id))
    }

    /// The task and its journal as exported JSON (what
    /// [`ToolTest::replay_journal`] replays).
    ///
    /// # Panics
    ///
    /// When the task is gone (expired).
    pub async fn export(&self) -> crate::replay::JournalExport {
        crate::replay::JournalExport::read(&**self.engine.store(), &self.id)
            .await
            .unwrap_or_else(|e| panic!("task {} could not be read: {e}", self.id))
            .unwrap_or_else(|| panic!("task {} is gone", self.id))
    }

    /// Waits until the task is parked on questions, and returns them.
    ///
    /// # Panics
    ///
    /// When the task ends instead, or nothing is asked within 10 s.
    pub async fn questions(&self) -> Vec<TestQuestion> {
        let r = self
            .until("it asks a question", |r| {
                r.status == TaskStatus::InputRequired || r.status.is_terminal()
            })
            .await;
        assert!(
            r.status == TaskStatus::InputRequired,
            "the task ended without asking: {r:?}"
        );
        r.pending.into_iter().map(TestQuestion).collect()
    }

    /// Waits for the one question the task is parked on.
    ///
    /// # Panics
    ///
    /// As [`TestTask::questions`], and when there are several.
    pub async fn question(&self) -> TestQuestion {
        let mut all = self.questions().await;
        assert_eq!(all.len(), 1, "expected one question, found {all:?}");
        all.remove(0)
    }

    /// Accepts the form question `key` with `content`, once the task asks it.
    pub async fn answer(&self, key: &str, content: Value) {
        self.respond(key, json!({"action": "accept", "content": content}))
            .await;
    }

    /// Declines the question `key`, once the task asks it.
    pub async fn decline(&self, key: &str) {
        self.respond(key, json!({"action": "decline"})).await;
    }

    /// Answers the question `key` with `response` as the client would send
    /// it (an `ElicitResult`, a `CreateMessageResult`, a `ListRootsResult`),
    /// once the task asks it. A URL question ([`ask_url`](crate::question::ask_url))
    /// is answered with its action alone: `{"action": "accept"}`.
    ///
    /// # Panics
    ///
    /// When the task ends, or parks without asking `key`, first.
    pub async fn respond(&self, key: &str, response: Value) {
        let keys: Vec<String> = self
            .questions()
            .await
            .into_iter()
            .map(|q| q.0.key)
            .collect();
        assert!(
            keys.iter().any(|k| k == key),
            "`{key}` is not an outstanding question: {keys:?}"
        );
        let mut responses = Map::new();
        responses.insert(key.to_owned(), response);
        self.engine
            .update(&self.id, responses, self.principal.as_deref())
            .await
            .unwrap_or_else(|e| panic!("tasks/update failed: {e}"));
    }

    /// Moves the engine's clock `by` ahead: durable timers (`sleep`) and
    /// question deadlines that fall due meanwhile fire now, and the task
    /// runs on. It first waits for the task to settle (asleep on a timer,
    /// parked on a question, or ended), and returns once the task has moved
    /// on from what it was waiting on (or nothing was due).
    ///
    /// # Panics
    ///
    /// When the task is still running after 10 s.
    pub async fn advance(&self, by: Duration) {
        let before = self
            .until("it waits on a timer or a question, or ends", |r| {
                r.status != TaskStatus::Working || (r.wake_at_ms.is_some() && r.lease.is_none())
            })
            .await;
        self.engine.advance_clock(by);
        let now = self.engine.now_ms();
        if before.wake_at_ms.is_some_and(|at| at <= now) {
            self.until("its timer fires", |r| r.version > before.version)
                .await;
        }
    }

    /// Asks the task to cancel (as `tasks/cancel` does).
    pub async fn cancel(&self) {
        self.engine
            .cancel(&self.id, self.principal.as_deref())
            .await
            .unwrap_or_else(|e| panic!("tasks/cancel failed: {e}"));
    }

    /// Waits until the task ends, and returns it.
    ///
    /// # Panics
    ///
    /// When it has not ended within 10 s (parked on a question, say).
    pub async fn finish(&self) -> TaskRecord {
        self.until("it ends", |r| r.status.is_terminal()).await
    }

    /// Waits until the task completes and decodes its `structuredContent`;
    /// a tool error (`isError: true`) comes back as `Err` with its text.
    ///
    /// # Panics
    ///
    /// When the task fails or is cancelled, or the content does not decode.
    pub async fn output<T: DeserializeOwned>(&self) -> Result<T, String> {
        let result = self.completed().await;
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

    /// Waits until the task completes and returns its text (a tool error's
    /// too).
    ///
    /// # Panics
    ///
    /// When the task fails or is cancelled.
    pub async fn text(&self) -> String {
        text_of(&self.completed().await)
    }

    async fn completed(&self) -> Map<String, Value> {
        let r = self.finish().await;
        match (r.status, r.result) {
            (TaskStatus::Completed, Some(result)) => result,
            (status, _) => panic!(
                "the task ended {}, not completed: {:?}",
                status.as_str(),
                r.error
            ),
        }
    }

    async fn until(&self, what: &str, done: impl Fn(&TaskRecord) -> bool) -> TaskRecord {
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            let r = self.record().await;
            if done(&r) {
                return r;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "waited {LIMIT:?} for {what}: {r:?}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

fn text_of(result: &Map<String, Value>) -> String {
    result
        .get("content")
        .and_then(|c| c.get(0))
        .and_then(|c| c.get("text"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// A clock that engines share across restarts: hand it to each with
/// [`EngineBuilder::clock`](crate::engine::EngineBuilder::clock), and move it on
/// with [`Engine::advance_clock`] (which also wakes that engine's timers).
/// It reads the system's time plus how far it was moved on, like every
/// engine's clock; a test that stops an engine and starts another on the
/// same store gives the new one the old one's clock, so that a sleep that
/// was moved past stays past.
///
/// ```
/// use std::time::Duration;
///
/// use mcp_tasks_runtime::{Engine, store::MemoryStore, testing::TestClock, tool::Registry};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mcp_tasks_runtime::Result<()> {
/// let clock = TestClock::new();
/// let store = std::sync::Arc::new(MemoryStore::new());
/// let first = Engine::builder_arc(store.clone())
///     .registry(Registry::new())
///     .clock(&clock)
///     .start()
///     .await?;
/// let before = clock.now_ms();
/// first.advance_clock(Duration::from_secs(3600));
/// // A restart on the same store, an hour later on the test's clock.
/// let second = Engine::builder_arc(store)
///     .registry(Registry::new())
///     .clock(&clock)
///     .start()
///     .await?;
/// assert!(second.now_ms() >= before + 3_600_000);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct TestClock(Arc<id::Clock>);

impl TestClock {
    /// A clock at the system's time.
    pub fn new() -> Self {
        Self::default()
    }

    /// Now, on this clock, in Unix milliseconds.
    pub fn now_ms(&self) -> i64 {
        self.0.now_ms()
    }

    /// The clock an engine built with it runs on.
    pub(crate) fn shared(&self) -> Arc<id::Clock> {
        self.0.clone()
    }
}
