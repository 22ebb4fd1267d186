//! The engine: takes calls, runs tasks on workers with bounded concurrency,
//! parks and resumes them, cancels them, expires them, and recovers them at
//! startup. It knows nothing of MCP's wire; the front door in `mcp` sits on it.

mod builder;
mod call;
pub(crate) mod keys;
mod lease;
mod limits;
mod runner;
mod status;
mod timers;
mod tools;
mod versions;
mod watch;

use std::{sync::Arc, time::Duration};

use serde_json::{Map, Value};
use tokio::sync::{Semaphore, watch as channel};

use builder::Config;
pub use builder::EngineBuilder;
pub use call::{Call, CallMode, CallOutcome};
pub use keys::IDEMPOTENCY_KEY;
pub use limits::Limits;
#[cfg(feature = "server")]
pub(crate) use limits::{LOOPBACK_FACTOR, address_key};
use runner::Start;

use crate::{
    clock,
    error::{Error, Result},
    id,
    store::{FrontDoorStore, ListCursor, Store, TaskRecord, TaskStatus, Transition},
    tool::StateMap,
};

/// The durable task engine. Cheap to clone.
///
/// ```
/// use mcp_tasks_runtime::{
///     Engine, engine::{Call, CallOutcome}, store::MemoryStore, task_tool, tool::Registry,
/// };
///
/// /// Says hello.
/// #[task_tool]
/// async fn hello(name: String) -> String {
///     format!("Hello, {name}!")
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mcp_tasks_runtime::Result<()> {
/// let engine = Engine::builder(MemoryStore::new())
///     .registry(Registry::new().with(hello_tool())?)
///     .start()
///     .await?;
/// let args = serde_json::json!({"name": "Ada"}).as_object().cloned().unwrap_or_default();
/// let CallOutcome::Task(task) = engine.call(Call::new("hello", args)).await? else {
///     unreachable!("a task-capable call with no inline window starts a task");
/// };
/// let done = engine.wait(&task.id, None, std::time::Duration::from_secs(5)).await?;
/// assert_eq!(done.result.unwrap()["content"][0]["text"], "Hello, Ada!");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

impl Engine {
    /// An engine over `store`. See [`EngineBuilder`].
    pub fn builder(store: impl Store) -> EngineBuilder {
        Self::builder_arc(Arc::new(store))
    }

    /// An engine over a shared store.
    pub fn builder_arc(store: Arc<dyn Store>) -> EngineBuilder {
        EngineBuilder {
            store,
            front_door: None,
            registry: None,
            state: StateMap::new(),
            clock: Arc::default(),
            config: Config::default(),
        }
    }

    /// Moves this engine's clock `by` ahead, and lets its timers and scan
    /// look again (the testing kit's [`TestTask::advance`](crate::testing::TestTask::advance)).
    /// Engines sharing a [`TestClock`](crate::testing::TestClock) all see
    /// the move. Feature `testing`.
    #[cfg(feature = "testing")]
    pub fn advance_clock(&self, by: Duration) {
        self.inner.clock.advance(by);
        self.inner.timers.rouse();
        self.inner.scan_wake.notify_one();
    }

    /// Now, on this engine's clock, in Unix milliseconds. Feature `testing`.
    #[cfg(feature = "testing")]
    pub fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// The limits the engine enforces.
    pub fn limits(&self) -> &Limits {
        &self.inner.config.limits
    }

    /// Reads a task. Tasks of another principal read as not found.
    ///
    /// # Errors
    ///
    /// [`Error::TaskNotFound`] for unknown, expired or foreign ids.
    pub async fn get(&self, id: &str, principal: Option<&str>) -> Result<TaskRecord> {
        self.inner.get(id, principal).await
    }

    /// A page of `principal`'s tasks (`None`: those created without one),
    /// oldest first, after `after`; at most `limit`.
    ///
    /// # Errors
    ///
    /// Store failures.
    pub async fn list(
        &self,
        principal: Option<&str>,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>> {
        self.inner.store.list(principal, after, limit).await
    }

    /// The store the engine keeps its tasks in.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// Where the engine's front door keeps its state: spent `requestState`s
    /// and protocol sessions (see [`EngineBuilder::front_door`]).
    pub fn front_door(&self) -> &Arc<dyn FrontDoorStore> {
        &self.inner.front_door
    }

    /// Answers outstanding input requests. Responses to keys that are not
    /// outstanding are ignored; a partial answer keeps the task waiting for the
    /// rest. When nothing is left outstanding the task resumes.
    ///
    /// `responses` maps each key of the task's `inputRequests` (a
    /// [`PendingInput::key`](crate::store::PendingInput::key)) to the
    /// client's answer, the JSON of the result the request would get in a
    /// session (`tasks/update`'s `inputResponses` as they come):
    ///
    /// | question | answer |
    /// |---|---|
    /// | a form ([`ask_user`](crate::ask_user), [`confirm`](crate::confirm)) | `{"action": "accept", "content": {"confirm": true}}`, the form's fields in `content`; or `{"action": "decline"}`, `{"action": "cancel"}` |
    /// | a URL ([`ask_url`](crate::question::ask_url)) | the action alone: `{"action": "accept"}` (or `decline`, `cancel`) |
    /// | sampling ([`sample`](crate::question::sample)) | a `CreateMessageResult`: `{"role": "assistant", "model": "…", "content": {"type": "text", "text": "…"}}` |
    /// | roots ([`list_roots`](crate::question::list_roots)) | a `ListRootsResult`: `{"roots": [{"uri": "file:///…"}]}` |
    ///
    /// ```
    /// use mcp_tasks_runtime::{ToolError, confirm, task_tool, testing::ToolTest};
    ///
    /// /// Asks before deleting.
    /// #[task_tool]
    /// async fn delete() -> Result<String, ToolError> {
    ///     Ok(format!("deleted: {}", confirm("Delete it?").await?))
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mcp_tasks_runtime::Result<()> {
    /// let test = ToolTest::new(delete_tool()).start().await;
    /// let task = test.call(serde_json::json!({})).await;
    /// let key = task.question().await.key().to_owned();
    /// let mut responses = serde_json::Map::new();
    /// responses.insert(key, serde_json::json!({"action": "accept", "content": {"confirm": true}}));
    /// test.engine().update(task.id(), responses, None).await?;
    /// assert_eq!(task.text().await, "deleted: true");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Each answer to an outstanding key is first checked against its
    /// question ([`InputRequest::check_answer`](crate::question::InputRequest::check_answer):
    /// a form's answer must fit its `requestedSchema`). One that does not fit
    /// is not taken: its key stays outstanding, and the task's status
    /// message says what was wrong, naming the field, until an answer that
    /// fits comes. This is not an error: the client reads the message with
    /// `tasks/get` and answers again.
    ///
    /// # Errors
    ///
    /// [`Error::TaskNotFound`]; [`Error::LimitExceeded`] when the answers
    /// are over [`Limits::max_answer_bytes`] (the task keeps waiting).
    pub async fn update(
        &self,
        id: &str,
        mut responses: Map<String, Value>,
        principal: Option<&str>,
    ) -> Result<()> {
        let record = self.inner.get(id, principal).await?;
        crate::metrics::update();
        self.inner.config.limits.check_answers(&responses)?;
        // Keys are never reused (tasks ext. § Input Requests: keys): a key outstanding now names the same
        // question when the store takes its answer.
        let mut refused = Vec::new();
        let mut taken = Vec::new();
        for question in record.pending.iter().filter(|p| p.is_open()) {
            let Some(answer) = responses.get(&question.key) else {
                continue;
            };
            match question.request.check_answer(answer) {
                Ok(()) => taken.push(question.key.clone()),
                Err(why) => {
                    responses.remove(&question.key);
                    refused.push(format!("{} {why}.", refused_prefix(&question.key)));
                }
            }
        }
        if !refused.is_empty() {
            refused.push("The question is still open: answer it again.".to_owned());
            let message = limits::cap_status(
                refused.join(" "),
                self.inner.config.limits.max_status_message_bytes,
            );
            self.inner
                .transition(id, Transition::StatusMessage(message), None)
                .await?;
        }
        // Answers to questions asked in flight go to the run that waits for
        // them, through the stored task; the rest are journaled.
        let in_flight: Map<String, Value> = record
            .pending
            .iter()
            .filter(|p| p.in_flight)
            .filter_map(|p| Some((p.key.clone(), responses.remove(&p.key)?)))
            .collect();
        if !in_flight.is_empty() {
            self.inner
                .transition(id, Transition::AnswerInFlight(in_flight), None)
                .await?;
        }
        let answered = self
            .inner
            .store
            .answer(id, responses, self.inner.clock.now_ms())
            .await?
            .ok_or_else(|| Error::TaskNotFound(id.to_owned()))?;
        if answered.accepted > 0 {
            self.inner.watch.notify(&answered.record);
            // An earlier answer to one of these keys was refused: its
            // message no longer holds.
            let current = answered.record.status_message.as_deref().unwrap_or("");
            if let Some(key) = taken.iter().find(|k| current.contains(&refused_prefix(k))) {
                let message = format!("The answer to `{key}` was accepted.");
                self.inner
                    .transition(id, Transition::StatusMessage(message), None)
                    .await?;
            }
        }
        if answered.runnable {
            let waited = answered.record.updated_at_ms - record.updated_at_ms;
            crate::metrics::input_wait(&record.tool, waited);
            self.inner.spawn(id.to_owned(), Start::Answered);
        }
        Ok(())
    }

    /// Requests cancellation. A parked or sleeping task ends `cancelled` at
    /// once; a running one stops at its next await point outside a checkpoint;
    /// one that is not running here ends at once; a finished one stays as it is.
    ///
    /// # Errors
    ///
    /// [`Error::TaskNotFound`].
    pub async fn cancel(&self, id: &str, principal: Option<&str>) -> Result<()> {
        self.inner.get(id, principal).await?;
        crate::metrics::cancel();
        let change = Transition::RequestCancel;
        let Some(record) = self.inner.transition(id, change, None).await? else {
            return Ok(());
        };
        // A run of the task hears of the request through its record (another
        // instance's run, when its lease is next renewed). A task that no run
        // holds has nothing to stop, so it ends now.
        let now = self.inner.clock.now_ms();
        let held_elsewhere = record
            .lease
            .as_ref()
            .is_some_and(|l| l.owner != self.inner.config.owner && l.expires_at_ms > now);
        if record.status == TaskStatus::Working && !self.inner.watch.running(id) && !held_elsewhere
        {
            self.inner.transition(id, Transition::Cancel, None).await?;
        }
        Ok(())
    }

    /// This instance, as its leases name it.
    pub fn instance(&self) -> &str {
        &self.inner.config.owner
    }

    /// Gives up the tasks this instance holds, so another instance sharing
    /// the store takes them over at once instead of after their leases run
    /// out. Call it when the process is about to exit; runs still under way
    /// here stop at their next step.
    ///
    /// # Errors
    ///
    /// Store failures.
    pub async fn shutdown(&self) -> Result<()> {
        self.inner
            .shutting_down
            .store(true, std::sync::atomic::Ordering::SeqCst);
        for (id, _) in self.inner.watch.running_versions() {
            self.inner.watch.lose(&id);
        }
        self.inner.store.release(&self.inner.config.owner).await
    }

    /// Drains this instance before it exits: it takes no new call (each
    /// gets [`Error::ShuttingDown`], for the client to retry elsewhere) and
    /// starts no run, while reads, answers and cancels are still served. Each run
    /// under way finishes the step it is in (its value is journaled) and
    /// stops at the next one; once none is left, or `deadline` has passed,
    /// the instance gives up its tasks as [`Engine::shutdown`] does. What
    /// remains runs on another instance sharing the store, or here after a
    /// restart, from its journal: no finished step runs again.
    ///
    /// # Errors
    ///
    /// Store failures while releasing the leases.
    pub async fn drain(&self, deadline: Duration) -> Result<()> {
        use std::sync::atomic::Ordering;
        self.inner.shutting_down.store(true, Ordering::SeqCst);
        let until = tokio::time::Instant::now() + deadline;
        loop {
            // Each run sees its task as no longer held: it stops at its
            // next step, once the one in flight is journaled.
            let running = self.inner.watch.running_versions();
            for (id, _) in &running {
                self.inner.watch.lose(id);
            }
            if running.is_empty() || tokio::time::Instant::now() >= until {
                if !running.is_empty() {
                    tracing::warn!(
                        runs = running.len(),
                        "drain deadline passed with runs under way; their tasks are let go"
                    );
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        self.shutdown().await
    }

    /// Whether [`Engine::drain`] or [`Engine::shutdown`] was called.
    pub fn is_draining(&self) -> bool {
        self.inner
            .shutting_down
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Whether a new call is taken: [`Error::ShuttingDown`] once the engine
    /// drains, counted in [`Engine::refused_calls`]. [`Engine::call`] asks
    /// it first; a front door that refuses a call before it reaches the
    /// engine asks it too, so that the count holds every refusal.
    ///
    /// # Errors
    ///
    /// [`Error::ShuttingDown`] while draining.
    pub fn admit_call(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        if self.is_draining() {
            self.inner.refused_calls.fetch_add(1, Ordering::Relaxed);
            return Err(Error::ShuttingDown);
        }
        Ok(())
    }

    /// How many calls [`Engine::admit_call`] refused since the drain began.
    pub fn refused_calls(&self) -> u64 {
        self.inner
            .refused_calls
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Watches a task: the receiver holds the latest state and wakes on every
    /// change, the terminal one included.
    ///
    /// # Errors
    ///
    /// [`Error::TaskNotFound`].
    pub async fn subscribe(
        &self,
        id: &str,
        principal: Option<&str>,
    ) -> Result<channel::Receiver<TaskRecord>> {
        self.inner.watch.register(id);
        match self.inner.get(id, principal).await {
            Ok(record) => Ok(self.inner.watch.subscribed(&record)),
            Err(e) => {
                self.inner.watch.abandon(id);
                Err(e)
            }
        }
    }

    /// Drops what this process keeps for watching task `id` once no one
    /// watches it: call after dropping the last receiver from
    /// [`Engine::subscribe`] of a task that may not change again.
    #[cfg(feature = "server")]
    pub(crate) fn forget_watch(&self, id: &str) {
        self.inner.watch.prune(id);
    }

    /// How many tasks this process watches: those running here and those a
    /// subscriber (a listen stream, a waiting call) follows. It falls back
    /// when they finish or their watchers go away.
    pub fn watched_tasks(&self) -> usize {
        self.inner.watch.len()
    }

    /// Waits up to `timeout` for the task to finish; returns its latest state.
    ///
    /// # Errors
    ///
    /// [`Error::TaskNotFound`].
    pub async fn wait(
        &self,
        id: &str,
        principal: Option<&str>,
        timeout: Duration,
    ) -> Result<TaskRecord> {
        let mut rx = self.subscribe(id, principal).await?;
        let done = tokio::time::timeout(timeout, async {
            loop {
                let cur = rx.borrow_and_update().clone();
                if cur.status.is_terminal() || rx.changed().await.is_err() {
                    return rx.borrow().clone();
                }
            }
        })
        .await;
        match done {
            Ok(r) => Ok(r),
            Err(_) => self.get(id, principal).await,
        }
    }
}

/// How the status message of a refused answer starts.
fn refused_prefix(key: &str) -> String {
    format!("The answer to `{key}` was not accepted:")
}

/// The engine's shared state.
struct Inner {
    store: Arc<dyn Store>,
    /// Spent `requestState`s and protocol sessions.
    front_door: Arc<dyn FrontDoorStore>,
    tools: tools::Tools,
    /// What tools take as [`State<T>`](crate::State).
    state: StateMap,
    /// The engine's clock (the system's, unless a test moved it on).
    clock: Arc<clock::Clock>,
    permits: Arc<Semaphore>,
    /// Inline calls' own limit.
    inline_permits: Arc<Semaphore>,
    config: Config,
    watch: watch::Watch,
    status: status::StatusWrites,
    timers: Arc<timers::Timers>,
    /// Set by [`Engine::shutdown`]: claim nothing more.
    shutting_down: std::sync::atomic::AtomicBool,
    /// Calls refused since then ([`Engine::admit_call`]).
    refused_calls: std::sync::atomic::AtomicU64,
    /// The last scan found a full page of claimable tasks.
    backlog: std::sync::atomic::AtomicBool,
    /// Wakes the scan early (a worker came free during a backlog).
    scan_wake: Arc<tokio::sync::Notify>,
    /// Each principal's create rate, on this instance.
    create_rate: limits::CreateRate,
    /// Each principal's unfinished tasks, as last counted.
    unfinished: limits::UnfinishedCounts,
    /// The unfinished tasks each client address created here (calls
    /// without a principal).
    by_address: limits::AddressTasks,
    /// The tasks recorded by a newer version of their tool than this
    /// instance serves: left for another instance.
    versions: versions::Unserved,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.store)
            .field("tools", &self.tools.current().len())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Inner {
    async fn get(&self, id: &str, principal: Option<&str>) -> Result<TaskRecord> {
        match self.store.get(id).await? {
            // A task created without a principal is seen only by callers
            // without one too: with authentication on, by no one else.
            Some(r) if r.principal.as_deref() == principal => Ok(r),
            _ => Err(Error::TaskNotFound(id.to_owned())),
        }
    }

    /// The one way the engine changes a task: through the store's state
    /// machine (as the holder of `fence`, for a run), then to the task's
    /// watchers.
    async fn transition(
        &self,
        id: &str,
        change: Transition,
        fence: Option<u64>,
    ) -> Result<Option<TaskRecord>> {
        let r = self
            .store
            .transition(id, change, self.clock.now_ms(), fence)
            .await?;
        if let Some(r) = &r {
            self.announce(r);
        }
        Ok(r)
    }

    /// Tells the task's watchers of a stored change.
    fn announce(&self, r: &TaskRecord) {
        if r.status.is_terminal() {
            // A tool error is stored `completed` (its result says
            // `isError`), and logged as what it is.
            let tool_error = r.status == TaskStatus::Completed
                && r.result.as_ref().and_then(|v| v.get("isError")) == Some(&Value::Bool(true));
            let ended = if tool_error {
                "tool_error"
            } else {
                r.status.as_str()
            };
            // Task ids are bearer secrets when no principal is configured:
            // logged by reference only.
            tracing::info!(task = %id::task_ref(&r.id), tool = %r.tool, status = %ended, "task ended");
            crate::metrics::finished(
                &r.tool,
                r.status.as_str(),
                r.updated_at_ms - r.created_at_ms,
            );
        }
        self.watch.notify(r);
    }
}
