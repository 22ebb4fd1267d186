//! Building an [`Engine`]: its settings, its tools and state, and starting
//! it.

use std::{sync::Arc, time::Duration};

use tokio::sync::Semaphore;

use super::{Engine, Inner, Limits, lease, limits, status, timers, tools, versions, watch};
use crate::{
    clock,
    error::Result,
    id,
    store::{FrontDoorStore, MemoryStore, Store},
    tool::Registry,
    tool::StateMap,
};

/// Engine settings.
#[derive(Debug, Clone)]
pub(super) struct Config {
    /// How many tasks run at once; the rest wait for a worker.
    pub(super) max_concurrency: usize,
    /// How many inline calls (no task) run at once; the rest wait.
    pub(super) max_inline: usize,
    /// TTL for tools that set none (`None`: keep tasks until deleted).
    pub(super) default_ttl: Option<Duration>,
    /// Suggested poll interval for tools that set none.
    pub(super) default_poll_interval: Duration,
    /// This instance, as its leases name it.
    pub(super) owner: String,
    /// How long a claim holds a task without being renewed.
    pub(super) lease: Duration,
    /// How often the engine looks for tasks no notification announced
    /// (leases that lapsed, timers due on another instance).
    pub(super) scan: Duration,
    /// What callers and tools may ask.
    pub(super) limits: Limits,
    /// Durable sleeps of at most this long wait in their run; longer ones
    /// park the task.
    pub(super) sleep_in_process: Duration,
}

impl Config {
    pub(super) fn lease_ms(&self) -> i64 {
        i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX)
    }

    pub(super) fn sleep_in_process_ms(&self) -> i64 {
        i64::try_from(self.sleep_in_process.as_millis()).unwrap_or(i64::MAX)
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max_concurrency: 512,
            max_inline: 512,
            default_ttl: Some(Duration::from_secs(3600)),
            default_poll_interval: Duration::from_secs(1),
            owner: format!("{}-{}", std::process::id(), &id::random_hex()[..8]),
            lease: Duration::from_secs(10),
            scan: Duration::from_secs(1),
            limits: Limits::default(),
            sleep_in_process: Duration::from_secs(1),
        }
    }
}

/// Builds an [`Engine`]: made by [`Engine::builder`].
#[derive(Debug)]
#[must_use = "a builder does nothing until `start` is called"]
pub struct EngineBuilder {
    pub(super) store: Arc<dyn Store>,
    pub(super) front_door: Option<Arc<dyn FrontDoorStore>>,
    pub(super) registry: Option<Registry>,
    pub(super) state: StateMap,
    pub(super) clock: Arc<clock::Clock>,
    pub(super) config: Config,
}

impl EngineBuilder {
    /// Serves these tools instead of every `#[task_tool]` in the binary
    /// (to replace them while the engine runs: [`Engine::set_registry`]).
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Keeps front-door state (spent `requestState`s, protocol sessions)
    /// in `front_door` rather than in the task store. Without it, the
    /// engine uses the task store's own ([`Store::front_door`]); a task
    /// store that keeps none (one written outside the crate, say) leaves it
    /// in this process's memory, with a WARN at start. Give a shared one
    /// when several instances serve one task store (see [`FrontDoorStore`]).
    ///
    /// ```
    /// use mcp_tasks_runtime::{Engine, store::{FrontDoorStore, MemoryStore}, tool::Registry};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mcp_tasks_runtime::Result<()> {
    /// let sessions = std::sync::Arc::new(MemoryStore::new());
    /// let engine = Engine::builder(MemoryStore::new())
    ///     .registry(Registry::new())
    ///     .front_door_arc(sessions.clone())
    ///     .start()
    ///     .await?;
    /// assert!(engine.front_door().spend("state-1", i64::MAX, 0).await?);
    /// assert!(!sessions.spend("state-1", i64::MAX, 0).await?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn front_door(self, front_door: impl FrontDoorStore) -> Self {
        self.front_door_arc(Arc::new(front_door))
    }

    /// [`EngineBuilder::front_door`] for a front door that is already shared.
    pub fn front_door_arc(mut self, front_door: Arc<dyn FrontDoorStore>) -> Self {
        self.front_door = Some(front_door);
        self
    }

    /// Hands `value` to every tool that takes a [`State<T>`](crate::State)
    /// parameter of its type (one value per type; a later one replaces an
    /// earlier). [`EngineBuilder::start`] refuses to start when a tool takes
    /// a state type that was not given.
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.state.insert(value);
        self
    }

    /// Runs the engine on `clock`, a clock a test moves on: an engine
    /// restarted on the same store with the clock of the one before sees
    /// the time that one was moved to (durable timers and deadlines keep
    /// their place). Feature `testing`.
    #[cfg(feature = "testing")]
    pub fn clock(mut self, clock: &clock::TestClock) -> Self {
        self.clock = clock.shared();
        self
    }

    /// Replaces every state value at once (the testing kit's way in).
    #[cfg(feature = "testing")]
    pub(crate) fn set_state(&mut self, state: StateMap) {
        self.state = state;
    }

    /// [`EngineBuilder::state`] for a value that is already shared: the
    /// tools get clones of this `Arc`.
    pub fn state_arc<T: Send + Sync + 'static>(mut self, value: Arc<T>) -> Self {
        self.state.insert_arc(value);
        self
    }

    builder_setters! {
        /// How many tasks run at once (default 512). A task parked on a
        /// question or asleep on a durable timer holds none; one waiting out a
        /// short sleep in its run holds one
        /// ([`sleep_in_process_up_to`](Self::sleep_in_process_up_to)).
        pub fn max_concurrency(usize) => config.max_concurrency, at least 1;

        /// How many inline calls (calls answered without a task: clients that
        /// cannot take one, `forbidden` tools, inline windows) run at once
        /// (default 512); the rest wait for one to finish. A call that became
        /// its task when its window ended keeps its place until that run ends.
        pub fn max_inline(usize) => config.max_inline, at least 1;

        /// TTL for tools that set none (default 1 hour; `None` keeps tasks forever).
        pub fn default_ttl(Option<Duration>) => config.default_ttl;

        /// Suggested poll interval for tools that set none (default 1 s).
        pub fn default_poll_interval(Duration) => config.default_poll_interval;
    }

    /// How this instance is named in the leases it holds (default: its
    /// process id and a random suffix). Every instance sharing a store needs
    /// a name of its own, and a name is one process's at a time: an engine
    /// that starts gives up every lease held under its name (a previous
    /// process's, killed before it could hand its tasks over), so those
    /// tasks run again at once rather than after their lease.
    pub fn instance(mut self, name: impl Into<String>) -> Self {
        self.config.owner = name.into();
        self
    }

    builder_setters! {
        /// How long a claim on a running task lasts without being renewed
        /// (default 10 s; renewed every third of it). When an instance dies, its
        /// tasks wait this long before another instance takes them over.
        pub fn lease(Duration) => config.lease, at least Duration::from_millis(30);

        /// How long a durable [`sleep`](crate::durable::sleep) may be and still
        /// wait in its run (default 1 s; `Duration::ZERO` parks every sleep).
        ///
        /// A sleep this short or shorter journals its deadline (one durable
        /// write, as a checkpoint's) and then waits in the process: the run keeps
        /// its worker and its lease, and the fn goes on at the deadline without
        /// the task being stored asleep, claimed and replayed again. A longer one
        /// parks the task: its deadline is stored with the park, the run ends
        /// and frees its worker, and the task runs again from its journal once
        /// the deadline passes. A sleep raced in a
        /// [`select`](crate::durable::select) always parks.
        ///
        /// Either way the deadline survives a crash: a replay waits out only what
        /// is left of it. A task killed in a sleep that waited in its run is
        /// taken over as a task killed in a step is, once its lease runs out
        /// (at once by an instance that starts under the same name), and a
        /// [`drain`](crate::Engine::drain) stops such a run at once.
        pub fn sleep_in_process_up_to(Duration) => config.sleep_in_process;

        /// How often the engine looks for runnable tasks that no notification
        /// announced: leases that lapsed, timers due on another instance
        /// (default 1 s).
        pub fn scan_interval(Duration) => config.scan, at least Duration::from_millis(10);

        /// The limits on sizes, unfinished tasks and create rates (see
        /// [`Limits`] for each default).
        pub fn limits(Limits) => config.limits;
    }

    /// The replay check of this build (see [`replay::check`](crate::replay::check)):
    /// replays the journal of every unfinished task in the store through
    /// the builder's tools (every `#[task_tool]` in the binary unless
    /// [`EngineBuilder::registry`] says otherwise), with its state, running
    /// no step live. Starts nothing and writes nothing: call it before
    /// [`EngineBuilder::start`], say on a `--check-replay` flag, and refuse
    /// the deploy when the report has not [passed](crate::replay::Report::passed).
    /// Build the engine on a store opened read-only for it
    /// (`SqliteStore::open_read_only`, `PostgresStore::connect_read_only`):
    /// opening one to write migrates it to this build's schema, which the
    /// build running on it then refuses. Such an engine cannot
    /// [`start`](Self::start): its first write fails, saying the store is
    /// read-only.
    ///
    /// # Errors
    ///
    /// Store failures while reading; duplicate or invalid tools in the
    /// registry.
    pub async fn check_replay(&self) -> Result<crate::replay::Report> {
        let inventory;
        let registry = match &self.registry {
            Some(r) => r,
            None => {
                inventory = Registry::from_inventory()?;
                &inventory
            }
        };
        crate::replay::check_with(&*self.store, registry, &self.state, self.clock.clone()).await
    }

    /// Starts the engine: it fails the unfinished tasks recorded by a
    /// version of their tool older than the one it replays from (see
    /// [`ToolDescriptor::with_replays_from`](crate::tool::ToolDescriptor::with_replays_from)),
    /// gives up the leases held under its [instance name](Self::instance),
    /// claims every runnable task no live lease holds (recovery), renews
    /// its leases, and starts the timers and the TTL sweeper. Must be called
    /// inside a Tokio runtime.
    ///
    /// # Errors
    ///
    /// Store failures while reading the unfinished tasks; duplicate or
    /// invalid tools in the registry; [`Error::MissingState`](crate::Error::MissingState)
    /// naming the tool and the type when a tool takes a
    /// [`State<T>`](crate::State) that [`EngineBuilder::state`] did not give.
    pub async fn start(self) -> Result<Engine> {
        let registry = match self.registry {
            Some(r) => r,
            None => Registry::from_inventory()?,
        };
        registry.check_state(&self.state)?;
        let clock = self.clock;
        let front_door = match self.front_door {
            Some(front_door) => front_door,
            None => self.store.clone().front_door().unwrap_or_else(|| {
                tracing::warn!(
                    "the task store keeps no front-door state: sessions and spent \
                     requestStates are kept in this process's memory (see EngineBuilder::front_door)"
                );
                Arc::new(MemoryStore::new())
            }),
        };
        let inner = Arc::new(Inner {
            store: self.store,
            front_door,
            tools: tools::Tools::new(registry),
            state: self.state,
            clock: clock.clone(),
            permits: Arc::new(Semaphore::new(self.config.max_concurrency)),
            inline_permits: Arc::new(Semaphore::new(self.config.max_inline)),
            config: self.config,
            watch: watch::Watch::default(),
            status: status::StatusWrites::default(),
            timers: Arc::new(timers::Timers::new(clock)),
            shutting_down: std::sync::atomic::AtomicBool::new(false),
            refused_calls: std::sync::atomic::AtomicU64::new(0),
            backlog: std::sync::atomic::AtomicBool::new(false),
            scan_wake: Arc::default(),
            create_rate: limits::CreateRate::default(),
            unfinished: limits::UnfinishedCounts::default(),
            by_address: limits::AddressTasks::default(),
            versions: versions::Unserved::default(),
        });
        versions::fail_too_old(&inner).await?;
        // A name is one process's at a time, and this process holds nothing
        // yet: a lease under its name is an earlier process's, killed before
        // it handed its tasks over. Its renewals here would keep that lease
        // live with no run behind it, so it is given up, and the first scan
        // claims those tasks like any other.
        inner.store.release(&inner.config.owner).await?;
        tracing::info!(instance = %inner.config.owner, "engine started");
        timers::start(&inner);
        lease::start(&inner);
        Ok(Engine { inner })
    }
}
