//! The engine: creates tasks, runs them on workers with bounded concurrency,
//! parks and resumes them, cancels them, expires them, and recovers them at
//! startup. It knows nothing of MCP's wire; the front door in `mcp` sits on it.

use std::{
    collections::{BTreeSet, HashMap},
    future::poll_fn,
    panic::AssertUnwindSafe,
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicI64, Ordering},
    },
    task::Poll,
    time::Duration,
};

use futures::{FutureExt, future::BoxFuture};
use serde_json::{Map, Value};
use tokio::sync::{Notify, Semaphore, watch};

use crate::{
    context::{Recorder, Stop, Suspend, TaskCtx},
    error::{Error, Result, RpcError},
    id,
    input::InputCapabilities,
    journal::{JournalEntry, PendingInput},
    registry::Registry,
    store::{Store, TaskRecord, TaskStatus, Transition},
    tool::{JsonObject, TaskPolicy, ToolFuture, ToolOutcome},
};

/// Engine settings. Build with [`Engine::builder`].
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// How many tasks run at once; the rest wait for a worker.
    pub max_concurrency: usize,
    /// TTL for tools that set none (`None`: keep tasks until deleted).
    pub default_ttl: Option<Duration>,
    /// Suggested poll interval for tools that set none.
    pub default_poll_interval: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_concurrency: 512,
            default_ttl: Some(Duration::from_secs(3600)),
            default_poll_interval: Duration::from_secs(1),
        }
    }
}

/// Builds an [`Engine`].
#[derive(Debug)]
pub struct EngineBuilder {
    store: Arc<dyn Store>,
    registry: Option<Registry>,
    config: EngineConfig,
}

impl EngineBuilder {
    /// Serves these tools instead of every `#[task_tool]` in the binary.
    #[must_use]
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// How many tasks run at once (default 512).
    #[must_use]
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.config.max_concurrency = n.max(1);
        self
    }

    /// TTL for tools that set none (default 1 hour; `None` keeps tasks forever).
    #[must_use]
    pub fn default_ttl(mut self, ttl: Option<Duration>) -> Self {
        self.config.default_ttl = ttl;
        self
    }

    /// Suggested poll interval for tools that set none (default 1 s).
    #[must_use]
    pub fn default_poll_interval(mut self, interval: Duration) -> Self {
        self.config.default_poll_interval = interval;
        self
    }

    /// Starts the engine: resumes every unfinished task in the store and starts
    /// the TTL sweeper. Must be called inside a Tokio runtime.
    ///
    /// # Errors
    ///
    /// Duplicate or invalid tools in the registry; store failures during recovery.
    pub async fn start(self) -> Result<Engine> {
        let registry = match self.registry {
            Some(r) => r,
            None => Registry::from_inventory()?,
        };
        let inner = Arc::new(Inner {
            store: self.store,
            registry: Arc::new(registry),
            permits: Arc::new(Semaphore::new(self.config.max_concurrency)),
            config: self.config,
            running: Mutex::new(HashMap::new()),
            watchers: Mutex::new(HashMap::new()),
            status_slots: Mutex::new(HashMap::new()),
            timers: Mutex::new(BTreeSet::new()),
            timer_wake: Arc::new(Notify::new()),
            sweep_wake: Arc::new(Notify::new()),
            sweep_at: AtomicI64::new(i64::MIN),
            new_expiry: AtomicI64::new(i64::MAX),
        });
        let recovered = inner.recover().await?;
        tracing::info!(recovered, "engine started");
        tokio::spawn(timer_loop(Arc::downgrade(&inner)));
        tokio::spawn(sweep_loop(Arc::downgrade(&inner)));
        Ok(Engine { inner })
    }
}

/// A new task's call.
#[derive(Debug, Clone, Default)]
pub struct NewTask {
    /// The tool to run.
    pub tool: String,
    /// Its arguments.
    pub arguments: JsonObject,
    /// The creating request's declared client capabilities (gates what the
    /// task may ask the client).
    pub client_capabilities: InputCapabilities,
    /// The authenticated principal, when there is one.
    pub principal: Option<String>,
}

/// How an inline (task-less) run ended.
#[derive(Debug, Clone)]
pub enum InlineOutcome {
    /// The tool finished.
    Done(ToolOutcome),
    /// The tool asked the client something: answer these requests and call
    /// again with the journal.
    InputRequired {
        /// The requests, by key.
        requests: Vec<PendingInput>,
        /// The journal so far (to carry in an integrity-protected `requestState`).
        journal: Vec<JournalEntry>,
    },
    /// The inline window ran out: the run stopped at a step boundary; carry
    /// on as a task with [`Engine::create_from_journal`].
    HandedOff {
        /// The journal so far.
        journal: Vec<JournalEntry>,
    },
}

/// The durable task engine. Cheap to clone.
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
            registry: None,
            config: EngineConfig::default(),
        }
    }

    /// The tools served.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The engine's settings.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// Checks that `tool` exists and `arguments` fit it, without running it.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTool`], or [`Error::InvalidArguments`] naming the field.
    pub fn check(&self, tool: &str, arguments: &JsonObject) -> Result<TaskPolicy> {
        let t = self
            .inner
            .registry
            .get(tool)
            .ok_or_else(|| Error::UnknownTool(tool.to_owned()))?;
        let _validated = t
            .descriptor()
            .prepare(arguments.clone())
            .map_err(|message| Error::InvalidArguments {
                tool: tool.to_owned(),
                message,
            })?;
        Ok(t.descriptor().policy())
    }

    /// Creates a task and starts it. Returns once the task is durable: a `get`
    /// on any engine sharing the store finds it.
    ///
    /// # Errors
    ///
    /// Unknown tool or bad arguments (no task is created); store failures.
    pub async fn create(&self, task: NewTask) -> Result<TaskRecord> {
        self.check(&task.tool, &task.arguments)?;
        let record = self.new_record(task)?;
        self.inner.store.create(record.clone()).await?;
        tracing::debug!(task = %record.id, tool = %record.tool, "task created");
        self.inner.expires(record.expires_at_ms());
        self.inner.spawn_run(record.id.clone());
        Ok(record)
    }

    /// Records a call that already finished (inline, within the server's
    /// inline window) as a task, so a caller that must get a task handle gets
    /// one whose result is ready.
    ///
    /// # Errors
    ///
    /// Unknown tool; store failures.
    pub async fn create_finished(&self, task: NewTask, outcome: ToolOutcome) -> Result<TaskRecord> {
        let mut record = self.new_record(task)?;
        match outcome {
            Ok(result) => {
                record.status = TaskStatus::Completed;
                record.result = Some(result);
                record.status_message = Some("The task completed.".into());
            }
            Err(error) => {
                record.status = TaskStatus::Failed;
                record.status_message = Some(error.message.clone());
                record.error = Some(error);
            }
        }
        self.inner.store.create(record.clone()).await?;
        self.inner.expires(record.expires_at_ms());
        Ok(record)
    }

    /// A fresh `working` record for `task` with the tool's (or the engine's)
    /// TTL and poll interval.
    fn new_record(&self, task: NewTask) -> Result<TaskRecord> {
        let d = self
            .inner
            .registry
            .get(&task.tool)
            .ok_or_else(|| Error::UnknownTool(task.tool.clone()))?
            .descriptor();
        let ttl = d.ttl().or(self.inner.config.default_ttl);
        let poll = d
            .poll_interval()
            .unwrap_or(self.inner.config.default_poll_interval);
        let now = id::now_ms();
        Ok(TaskRecord {
            id: id::random_hex(),
            tool: task.tool,
            arguments: task.arguments,
            client_capabilities: task.client_capabilities,
            principal: task.principal,
            status: TaskStatus::Working,
            status_message: Some("The task is in progress.".into()),
            created_at_ms: now,
            updated_at_ms: now,
            ttl_ms: ttl.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            poll_interval_ms: Some(u64::try_from(poll.as_millis()).unwrap_or(u64::MAX)),
            pending: Vec::new(),
            wake_at_ms: None,
            cancel_requested: false,
            result: None,
            error: None,
            version: 0,
        })
    }

    /// Reads a task. Tasks of another principal read as not found.
    ///
    /// # Errors
    ///
    /// [`Error::TaskNotFound`] for unknown, expired or foreign ids.
    pub async fn get(&self, id: &str, principal: Option<&str>) -> Result<TaskRecord> {
        match self.inner.store.get(id).await? {
            Some(r) if r.principal.as_deref() == principal || r.principal.is_none() => Ok(r),
            _ => Err(Error::TaskNotFound(id.to_owned())),
        }
    }

    /// Answers outstanding input requests. Responses to keys that are not
    /// outstanding are ignored; a partial answer keeps the task waiting for the
    /// rest. When nothing is left outstanding the task resumes.
    ///
    /// # Errors
    ///
    /// [`Error::TaskNotFound`].
    pub async fn update(
        &self,
        id: &str,
        responses: Map<String, Value>,
        principal: Option<&str>,
    ) -> Result<()> {
        self.get(id, principal).await?;
        let answered = self
            .inner
            .store
            .answer(id, responses, id::now_ms())
            .await?
            .ok_or_else(|| Error::TaskNotFound(id.to_owned()))?;
        if answered.accepted > 0 {
            self.inner.notify(&answered.record);
        }
        if answered.runnable {
            self.inner.spawn_run(id.to_owned());
        }
        Ok(())
    }

    /// Requests cancellation. A parked or sleeping task ends `cancelled` at
    /// once; a running one stops at its next await point outside a checkpoint;
    /// a finished one stays as it is.
    ///
    /// # Errors
    ///
    /// [`Error::TaskNotFound`].
    pub async fn cancel(&self, id: &str, principal: Option<&str>) -> Result<()> {
        self.get(id, principal).await?;
        if let Some(record) = self
            .inner
            .store
            .transition(id, Transition::RequestCancel, id::now_ms())
            .await?
        {
            self.inner.notify(&record);
            let running = self.inner.running.lock().expect("lock").get(id).cloned();
            match running {
                Some(ctx) => ctx.request_cancel(),
                None if record.status == TaskStatus::Working && record.cancel_requested => {
                    // Not running here (e.g. waiting for a worker): end it now.
                    if let Some(r) = self
                        .inner
                        .store
                        .transition(id, Transition::Cancel, id::now_ms())
                        .await?
                    {
                        self.inner.notify(&r);
                    }
                }
                None => {}
            }
        }
        Ok(())
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
    ) -> Result<watch::Receiver<TaskRecord>> {
        let record = self.get(id, principal).await?;
        if record.status.is_terminal() {
            // Final: nothing will change, so no watcher is kept for it.
            return Ok(watch::channel(record).1);
        }
        let (rx, sent) = {
            let mut watchers = self.inner.watchers.lock().expect("lock");
            let w = watchers.entry(id.to_owned()).or_insert_with(|| Watcher {
                tx: watch::channel(record.clone()).0,
                sent: 0,
            });
            w.tx.send_if_modified(|cur| replace_if_newer(cur, &record));
            (w.tx.subscribe(), w.sent)
        };
        // A change may have landed between the read above and registering the
        // watcher; its notification then reached no one. Read again: unless a
        // notification arrived since registering (and later ones will follow),
        // this read is at least as new as what the watcher holds.
        if let Some(latest) = self.inner.store.get(id).await? {
            let mut watchers = self.inner.watchers.lock().expect("lock");
            if let Some(w) = watchers.get(id)
                && w.sent == sent
            {
                w.tx.send_if_modified(|cur| replace_if_newer(cur, &latest));
                if latest.status.is_terminal() {
                    watchers.remove(id);
                }
            }
        }
        Ok(rx)
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
                if cur.status.is_terminal() {
                    return cur;
                }
                if rx.changed().await.is_err() {
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

    /// Runs `tool` without a task (for clients that did not declare the tasks
    /// extension). `journal` is what earlier rounds recorded; `responses`
    /// answer the requests of the last round, by key. Checkpoints recorded
    /// earlier are not run again.
    ///
    /// # Errors
    ///
    /// Unknown tool or bad arguments.
    pub async fn run_inline(
        &self,
        tool: &str,
        arguments: JsonObject,
        client_capabilities: &InputCapabilities,
        journal: Vec<JournalEntry>,
        responses: Map<String, Value>,
    ) -> Result<InlineOutcome> {
        self.run_inline_for(
            tool,
            arguments,
            client_capabilities,
            journal,
            responses,
            None,
        )
        .await
    }

    /// [`Engine::run_inline`] for at most `window`: when the window runs out,
    /// the run stops at its next step boundary and returns
    /// [`InlineOutcome::HandedOff`] with its journal, ready for
    /// [`Engine::create_from_journal`] — no finished step runs twice.
    ///
    /// # Errors
    ///
    /// Unknown tool or bad arguments.
    pub async fn run_inline_for(
        &self,
        tool: &str,
        arguments: JsonObject,
        client_capabilities: &InputCapabilities,
        mut journal: Vec<JournalEntry>,
        responses: Map<String, Value>,
        window: Option<Duration>,
    ) -> Result<InlineOutcome> {
        self.check(tool, &arguments)?;
        let d = self.inner.registry.get(tool).expect("checked").descriptor();
        let fut = d
            .prepare(arguments)
            .map_err(|message| Error::InvalidArguments {
                tool: tool.to_owned(),
                message,
            })?;
        let ctx = TaskCtx::new(
            String::new(),
            journal.clone(),
            None,
            *client_capabilities,
            false,
        );
        ctx.set_inline_answers(responses);
        let driven = match window {
            None => drive(&ctx, fut).await,
            Some(window) => {
                let timer = {
                    let ctx = ctx.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(window).await;
                        ctx.request_handoff();
                    })
                };
                let driven = drive(&ctx, fut).await;
                timer.abort();
                driven
            }
        };
        journal.extend(ctx.take_recorded());
        Ok(match driven {
            Driven::Done(outcome) => InlineOutcome::Done(outcome),
            Driven::Stopped(Stop::Suspend(Suspend::Park(requests))) => {
                InlineOutcome::InputRequired { requests, journal }
            }
            Driven::Stopped(Stop::Handoff) => InlineOutcome::HandedOff { journal },
            Driven::Stopped(Stop::Suspend(Suspend::Fail(e))) => InlineOutcome::Done(Err(e)),
            Driven::Stopped(other) => InlineOutcome::Done(Err(RpcError::internal(format!(
                "the tool stopped unexpectedly: {other:?}"
            )))),
        })
    }

    /// Creates a task that carries on from `journal` (what an inline run
    /// recorded before it was handed off) and starts it. Durable before it
    /// returns, like [`Engine::create`].
    ///
    /// # Errors
    ///
    /// Unknown tool or bad arguments; store failures.
    pub async fn create_from_journal(
        &self,
        task: NewTask,
        journal: Vec<JournalEntry>,
    ) -> Result<TaskRecord> {
        self.check(&task.tool, &task.arguments)?;
        let record = self.new_record(task)?;
        self.inner
            .store
            .create_with_journal(record.clone(), journal)
            .await?;
        self.inner.expires(record.expires_at_ms());
        self.inner.spawn_run(record.id.clone());
        Ok(record)
    }
}

/// A task's subscribers.
struct Watcher {
    tx: watch::Sender<TaskRecord>,
    /// How many changes were notified to it.
    sent: u64,
}

/// Puts `new` in a subscription holding `cur` unless that would go back:
/// terminal states are final and an older change never replaces a newer one
/// (notifications from concurrent writers can arrive out of order).
fn replace_if_newer(cur: &mut TaskRecord, new: &TaskRecord) -> bool {
    if *cur == *new || cur.status.is_terminal() || new.updated_at_ms < cur.updated_at_ms {
        return false;
    }
    *cur = new.clone();
    true
}

struct Inner {
    store: Arc<dyn Store>,
    registry: Arc<Registry>,
    permits: Arc<Semaphore>,
    config: EngineConfig,
    running: Mutex<HashMap<String, Arc<TaskCtx>>>,
    watchers: Mutex<HashMap<String, Watcher>>,
    /// Coalesced status-message writes: present while a flush is in flight.
    status_slots: Mutex<HashMap<String, Option<String>>>,
    /// Sleeping tasks by wake time.
    timers: Mutex<BTreeSet<(i64, String)>>,
    timer_wake: Arc<Notify>,
    sweep_wake: Arc<Notify>,
    /// When the sweeper runs next (Unix ms; `i64::MIN` until it first runs).
    sweep_at: AtomicI64,
    /// The earliest expiry among tasks created since the sweeper last read
    /// the store's (see `sweep_loop`).
    new_expiry: AtomicI64,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.store)
            .field("tools", &self.registry.len())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

enum Driven {
    Done(ToolOutcome),
    Stopped(Stop),
}

/// Polls the tool's future inside its context until it finishes or must stop.
async fn drive(ctx: &Arc<TaskCtx>, fut: ToolFuture) -> Driven {
    let fut = ctx.scope(AssertUnwindSafe(fut).catch_unwind());
    let mut fut = std::pin::pin!(fut);
    poll_fn(|cx| {
        ctx.waker.register(cx.waker());
        match fut.as_mut().poll(cx) {
            Poll::Ready(Ok(outcome)) => Poll::Ready(Driven::Done(outcome)),
            Poll::Ready(Err(panic)) => {
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic with a non-string payload".into());
                Poll::Ready(Driven::Done(Err(RpcError::internal(format!(
                    "the tool panicked: {msg}"
                )))))
            }
            Poll::Pending => match ctx.stop_reason() {
                Some(stop) => Poll::Ready(Driven::Stopped(stop)),
                None => Poll::Pending,
            },
        }
    })
    .await
}

impl Inner {
    /// A task that expires at `at` was just stored: wake the sweeper only if
    /// it would otherwise run too late (not on every create: each sweep costs
    /// the store two queries).
    fn expires(&self, at: Option<i64>) {
        let Some(at) = at else { return };
        self.new_expiry.fetch_min(at, Ordering::SeqCst);
        if at < self.sweep_at.load(Ordering::SeqCst) {
            self.sweep_wake.notify_one();
        }
    }

    fn notify(&self, record: &TaskRecord) {
        let mut watchers = self.watchers.lock().expect("lock");
        if let Some(w) = watchers.get_mut(&record.id) {
            w.sent += 1;
            w.tx.send_if_modified(|cur| replace_if_newer(cur, record));
            if record.status.is_terminal() || w.tx.receiver_count() == 0 {
                watchers.remove(&record.id);
            }
        }
    }

    fn spawn_run(self: &Arc<Self>, id: String) {
        let inner = self.clone();
        tokio::spawn(async move {
            if let Err(e) = inner.clone().run(&id).await {
                tracing::error!(task = %id, error = %e, "task run failed");
            }
        });
    }

    async fn transition(&self, id: &str, change: Transition) -> Result<Option<TaskRecord>> {
        let r = self.store.transition(id, change, id::now_ms()).await?;
        if let Some(r) = &r {
            if r.status.is_terminal() {
                tracing::info!(task = %id, status = r.status.as_str(), "task finished");
            }
            self.notify(r);
        }
        Ok(r)
    }

    async fn run(self: Arc<Self>, id: &str) -> Result<()> {
        // The semaphore is never closed.
        let Ok(_permit) = self.permits.clone().acquire_owned().await else {
            return Ok(());
        };
        let Some(record) = self.store.get(id).await? else {
            return Ok(());
        };
        if record.status != TaskStatus::Working {
            return Ok(());
        }
        if record.cancel_requested {
            self.transition(id, Transition::Cancel).await?;
            return Ok(());
        }
        if let Some(at) = record.wake_at_ms
            && at > id::now_ms()
        {
            self.add_timer(at, id);
            return Ok(());
        }
        let Some(tool) = self.registry.get(&record.tool) else {
            let e = RpcError::internal(format!(
                "tool `{}` is no longer registered on this server",
                record.tool
            ));
            self.transition(id, Transition::Fail(e)).await?;
            return Ok(());
        };
        let fut = match tool.descriptor().prepare(record.arguments.clone()) {
            Ok(f) => f,
            Err(message) => {
                let e = RpcError::invalid_params(format!(
                    "the stored arguments no longer fit tool `{}`: {message}",
                    record.tool
                ));
                self.transition(id, Transition::Fail(e)).await?;
                return Ok(());
            }
        };
        let journal = self.store.journal(id).await?;
        let ctx = TaskCtx::new(
            id.to_owned(),
            journal,
            Some(Arc::new(EngineRecorder(self.clone())) as Arc<dyn Recorder>),
            record.client_capabilities,
            false,
        );
        {
            let mut running = self.running.lock().expect("lock");
            if running.contains_key(id) {
                return Ok(()); // already running here
            }
            running.insert(id.to_owned(), ctx.clone());
        }
        // A cancel (or the end of the task: a cancel of a task waiting for a
        // worker, expiry) may have landed between the read above and
        // registering. Don't run the tool's code for a task that has ended.
        match self.store.get(id).await? {
            Some(r) if r.status == TaskStatus::Working => {
                if r.cancel_requested {
                    ctx.request_cancel();
                }
            }
            _ => {
                self.running.lock().expect("lock").remove(id);
                return Ok(());
            }
        }
        let driven = drive(&ctx, fut).await;
        self.running.lock().expect("lock").remove(id);
        let change = match driven {
            Driven::Done(Ok(result)) => Transition::Complete(result),
            Driven::Done(Err(error)) => Transition::Fail(error),
            Driven::Stopped(Stop::Cancelled) => Transition::Cancel,
            Driven::Stopped(Stop::Expired | Stop::Handoff) => return Ok(()),
            Driven::Stopped(Stop::Suspend(Suspend::Park(pending))) => Transition::Park(pending),
            Driven::Stopped(Stop::Suspend(Suspend::Sleep(at))) => {
                Transition::Sleep { wake_at_ms: at }
            }
            Driven::Stopped(Stop::Suspend(Suspend::Fail(e))) => Transition::Fail(e),
        };
        let sleep_at = match &change {
            Transition::Sleep { wake_at_ms } => Some(*wake_at_ms),
            _ => None,
        };
        let applied = self.transition(id, change).await?;
        if let (Some(at), Some(_)) = (sleep_at, applied) {
            self.add_timer(at, id);
        }
        Ok(())
    }

    fn add_timer(&self, at: i64, id: &str) {
        self.timers
            .lock()
            .expect("lock")
            .insert((at, id.to_owned()));
        self.timer_wake.notify_one();
    }

    /// Startup recovery: resume, park or fail every unfinished task.
    async fn recover(self: &Arc<Self>) -> Result<usize> {
        let unfinished = self.store.unfinished().await?;
        let n = unfinished.len();
        for r in unfinished {
            // A parked task (input_required) waits for its answer, holding nothing.
            if r.status == TaskStatus::Working {
                self.spawn_run(r.id);
            }
        }
        Ok(n)
    }
}

/// The engine as seen by a running task's context.
struct EngineRecorder(Arc<Inner>);

impl Recorder for EngineRecorder {
    fn record(
        &self,
        task_id: &str,
        entry: JournalEntry,
    ) -> BoxFuture<'static, Result<(), RpcError>> {
        let store = self.0.store.clone();
        let id = task_id.to_owned();
        async move {
            store
                .append(&id, entry)
                .await
                .map_err(|e| RpcError::internal(format!("could not journal the step: {e}")))
        }
        .boxed()
    }

    fn status(&self, task_id: &str, message: String) {
        {
            let mut slots = self.0.status_slots.lock().expect("lock");
            if let Some(slot) = slots.get_mut(task_id) {
                *slot = Some(message);
                return;
            }
            slots.insert(task_id.to_owned(), None);
        }
        let this = self.0.clone();
        let id = task_id.to_owned();
        tokio::spawn(async move {
            let mut next = Some(message);
            while let Some(m) = next {
                if let Err(e) = this.transition(&id, Transition::StatusMessage(m)).await {
                    tracing::warn!(task = %id, error = %e, "status message not saved");
                }
                let mut slots = this.status_slots.lock().expect("lock");
                next = slots.get_mut(&id).and_then(Option::take);
                if next.is_none() {
                    slots.remove(&id);
                }
            }
        });
    }
}

async fn timer_loop(inner: Weak<Inner>) {
    loop {
        let Some(this) = inner.upgrade() else { return };
        let next = this.timers.lock().expect("lock").first().cloned();
        let now = id::now_ms();
        match next {
            Some((at, id)) if at <= now => {
                this.timers.lock().expect("lock").remove(&(at, id.clone()));
                this.spawn_run(id);
                continue;
            }
            Some((at, _)) => {
                let wait = Duration::from_millis(u64::try_from(at - now).unwrap_or(0));
                let wake = this.timer_wake.clone();
                drop(this);
                let notified = wake.notified();
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = notified => {}
                }
            }
            None => {
                let wake = this.timer_wake.clone();
                drop(this);
                let notified = wake.notified();
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(60)) => {}
                    () = notified => {}
                }
            }
        }
    }
}

async fn sweep_loop(inner: Weak<Inner>) {
    loop {
        let Some(this) = inner.upgrade() else { return };
        // Tasks created from here on are either seen by `next_expiry` below
        // or leave their expiry in `new_expiry` (read after `sweep_at` is
        // set), or see the new `sweep_at` and wake the sweeper themselves.
        this.new_expiry.store(i64::MAX, Ordering::SeqCst);
        let now = id::now_ms();
        match this.store.purge_expired(now).await {
            Ok(ids) => {
                for id in ids {
                    tracing::info!(task = %id, "task expired and purged");
                    if let Some(ctx) = this.running.lock().expect("lock").remove(&id) {
                        ctx.expire();
                    }
                    let w = this.watchers.lock().expect("lock").remove(&id);
                    if let Some(Watcher { tx, .. }) = w {
                        let mut last = tx.borrow().clone();
                        if !last.status.is_terminal() {
                            last.status = TaskStatus::Failed;
                            last.status_message = Some("Task expired".into());
                            last.error = Some(RpcError::internal("Task expired"));
                            last.pending.clear();
                            last.updated_at_ms = now;
                            tx.send_replace(last);
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "expiry sweep failed"),
        }
        let next = this.store.next_expiry().await.ok().flatten();
        let now = id::now_ms();
        let mut at = next.map_or(i64::MAX, |at| at.max(now)).min(now + 60_000);
        this.sweep_at.store(at, Ordering::SeqCst);
        let created = this.new_expiry.load(Ordering::SeqCst);
        if created < at {
            at = created.max(now);
            this.sweep_at.store(at, Ordering::SeqCst);
        }
        let wait = Duration::from_millis(u64::try_from(at - now).unwrap_or(0));
        let wake = this.sweep_wake.clone();
        drop(this);
        let notified = wake.notified();
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = notified => {}
        }
    }
}
