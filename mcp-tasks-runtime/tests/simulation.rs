//! The engine tested by a deterministic simulation of a fleet: seeded runs
//! of generated tool programs on several live engines sharing one store,
//! under crashes, pauses, restarts, store faults and latency, each checked
//! by oracles that see what a user would. The same seed gives the same run,
//! step for step.
//!
//! # How a run is made deterministic
//!
//! - **One thread, simulated time.** Every engine of a run (every "node")
//!   lives on one `current_thread` tokio runtime started paused: tokio's
//!   timers (the engine's renewals, scans and retries, the store's latency)
//!   are simulated time, and the runtime polls its tasks in the same order
//!   every time. No real thread, no real I/O: the store is the memory store.
//! - **A frozen clock** ([`TestClock::frozen`]) shared by the nodes: it
//!   moves only when the driver moves it, by a seeded tick (10 to 200 ms)
//!   before each of its turns, or to a deadline the user lets pass.
//! - **Seeded ids** ([`seed_ids`]): task ids and `durable::uuid` values
//!   come from the seed on the run's thread.
//! - **A simulated store** (`simulation/faults.rs`): the memory store
//!   behind a wrapper per node that adds seeded latency, strikes the
//!   planned faults (fail before or after landing, crash before or after
//!   landing) on any call (reads, claims, renewals and writes), and holds
//!   every call of a paused node (SIGSTOP) or a dead one.
//! - **The engine's own races** are `select! { biased; .. }`: tokio draws an
//!   unbiased `select!`'s order from a per-runtime generator that can be
//!   seeded only under `--cfg tokio_unstable`.
//!
//! Why not a tool made for this: `madsim` replaces tokio (and `std`'s
//! time and random numbers) with its own at build time, behind
//! `--cfg madsim`, which means a second build of the whole dependency
//! tree (rmcp, sqlx, axum) and keeping every dependency madsim-compatible;
//! `turmoil` simulates hosts and a network on one thread, but the engines
//! here share a store in memory, not a network, and turmoil leaves tokio's
//! `select!` order and the engine's clock to us anyway. What both give
//! (one thread, simulated time, seeded faults) is what the paused
//! `current_thread` runtime gives here, with the engine's code unchanged.
//!
//! # One seed
//!
//! 1. A program is generated (`simulation/program.rs`): one to eight
//!    instructions of the real vocabulary (checkpoints, questions with and
//!    without a deadline, durable sleeps long and short (a short one waits
//!    in its run), `select` of two steps, nested, `spawn`, `status`,
//!    `patched`, `now`, `uuid`), interpreted by one `#[task_tool]`.
//! 2. The reference run: one node, no faults. Each time the task settles
//!    (parked on questions, or asleep) the user acts after a seeded while:
//!    answers yes or no, declines, lets a deadline pass (the clock is moved
//!    to it), lets a sleep end, or cancels. What was done is recorded.
//! 3. The faulty run: one to three nodes (distinct instance names) on the
//!    same store, the same actions at the same settles, while the store
//!    strikes the planned faults, nodes are paused past their lease and
//!    resumed (often to be drained, shut down or killed as they thaw),
//!    crash, shut down or drain, and are restarted under the same instance
//!    name. After the task's end the paused nodes thaw and run a while.
//!
//! # Oracles, checked for every seed and both runs
//!
//! - **the model**: each instruction's result computed from the program
//!   and the user's actions alone (`program::expect`), where the program
//!   decides it; the status (`cancelled` when the user cancelled);
//!   every step the model says ran completed at least once;
//! - **the differential**: the faulty run settles where the reference did
//!   and ends as it did;
//! - **effects**: each step's closure completes at most once, plus once
//!   for each node that died or was paused with it in flight (started, its
//!   value not journaled, no later instruction begun), and never on a node that
//!   lost its lease (the store shows another holder, the lease past its
//!   expiry, or a fence other than that of the node's claim, when it
//!   completes);
//! - **the fence**: no journal append lands with a fence other than the
//!   store's;
//! - **sleeps**: a sleep never returns before its journaled deadline (the
//!   clock when the run whose entry landed reached it, plus its span), and
//!   never more than two ticks, plus the time its node was paused, after the
//!   later of its deadline and the moment the run that returned reached it
//!   (a resumed sleep keeps its journaled deadline);
//! - **cancels**: a cancel of a parked or sleeping task that the engine
//!   accepted ends it within [`CANCEL_BOUND`] of simulated time;
//! - the task is never lost, ends within [`MAX_TICKS`] turns of the driver,
//!   stays as it ended after one more restart; nothing panics.
//!
//! # A failure you can rerun
//!
//! A failing seed prints its report (program, fault plan, what struck, the
//! violation) and the one-line command that reruns it exactly; the first
//! failing seed of a run is also shrunk (greedy: each instruction, then
//! each fault, taken out while the seed still fails) and printed with the
//! command that runs the shrunk program and faults.
//!
//! - `MCP_TASKS_SIM_SEED=N` runs seed `N` alone; `MCP_TASKS_SIM_PROGRAM`
//!   (the program as JSON) and `MCP_TASKS_SIM_FAULTS` (`call:fault,..`,
//!   a fault being `fail-before`, `fail-after`, `crash-before`,
//!   `crash-after` or `pause-MS`) replace the seed's;
//! - `MCP_TASKS_SIM_SEEDS=N` runs `N` seeds (default 1,000, about 40 s in a
//!   debug build on two cores) from seed 0 or
//!   from `MCP_TASKS_SIM_FIRST=F`, so that a long run can be split across
//!   processes, each given its own range;
//! - `MCP_TASKS_SIM_VERBOSE=1` prints every seed's report, and
//!   `MCP_TASKS_SIM_TRACE=1` a failing seed's whole trace;
//! - the long run, a million seeds, in four processes:
//!   `MCP_TASKS_SIM_SEEDS=250000 MCP_TASKS_SIM_FIRST=0 cargo test --release -p mcp-tasks-runtime --test simulation generated -- --nocapture`,
//!   and the same with `MCP_TASKS_SIM_FIRST=250000`, `500000`, `750000`.

#[path = "simulation/faults.rs"]
mod faults;
#[path = "simulation/program.rs"]
mod program;

use std::{
    cell::Cell,
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use faults::{Fault, Landing, NodeState, Plan, Sim, SimStore};
use futures::FutureExt;
use mcp_tasks_runtime::{
    Engine,
    engine::{Call, CallOutcome},
    question::InputCapabilities,
    store::{StepKind, Store, TaskRecord, TaskStatus},
    testing::{TestClock, seed_ids},
    tool::Registry,
};
use program::{Op, Probe, Resolution};
use serde_json::{Map, Value, json};

/// How long a claim lasts (renewed every third of it).
const LEASE: Duration = Duration::from_secs(1);
/// How often an engine scans for tasks to claim.
const SCAN: Duration = Duration::from_millis(100);
/// Sleeps up to this long wait in their run.
const IN_PROCESS: Duration = Duration::from_secs(2);
/// The longest tick of the clock between two turns of the driver (ms).
const MAX_TICK: u64 = 200;
/// The bound on one run, in turns of the driver, against hangs.
const MAX_TICKS: u32 = 3000;
/// The bound on one run in real time (a loop that never yields).
const REAL_HANG: Duration = Duration::from_secs(120);
/// A cancel of a parked or sleeping task ends it within this much
/// simulated time.
const CANCEL_BOUND: i64 = 3_000;
/// Where the frozen clock starts (Unix ms, 2026-01-01).
const EPOCH_MS: i64 = 1_767_225_600_000;
/// Seeds run by default.
const DEFAULT_SEEDS: u64 = 1000;
/// Seeds run at once (one thread each).
const PARALLEL: usize = 2;
/// Seeds that once found a bug, run with the default seeds ever after.
const REGRESSIONS: [u64; 2] = [
    // A node thawed past its lease and drained at once finished its step.
    5_011_893,
    // A thawed node finished its step after another claimed and ended the task.
    5_012_360,
];

thread_local! {
    /// Panics on this thread (a seed's every node runs on its thread).
    static PANICS: Cell<usize> = const { Cell::new(0) };
}

/// Where a task waits for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Settle {
    /// Parked on the questions with these keys.
    Parked(Vec<String>),
    /// Asleep until this time (on the engine's clock).
    Asleep(i64),
}

impl Settle {
    /// The settle as runs compare it: the time a sleep ends depends on
    /// when it began.
    fn shape(&self) -> Settle {
        match self {
            Self::Asleep(_) => Self::Asleep(0),
            parked => parked.clone(),
        }
    }
}

/// What the user does at a settle.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Action {
    Answer {
        key: String,
        yes: bool,
    },
    Decline {
        key: String,
    },
    /// The clock moves on past the earliest question deadline (which times
    /// out these questions).
    Expire {
        keys: Vec<String>,
    },
    /// The clock moves on to the end of the sleep.
    Wake,
    Cancel,
}

/// How a node goes down.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// Gone at once, with everything in it.
    Crash,
    /// `Engine::shutdown`.
    Shutdown,
    /// `Engine::drain`.
    Drain,
}

/// How a task ended, as runs compare it.
#[derive(Debug, Clone, PartialEq)]
struct Outcome {
    status: TaskStatus,
    result: Option<Map<String, Value>>,
    error: Option<String>,
}

impl Outcome {
    fn of(r: &TaskRecord) -> Self {
        Self {
            status: r.status,
            result: r.result.clone(),
            error: r.error.as_ref().map(|e| e.message.clone()),
        }
    }
}

/// Where the actions come from.
enum Chooser {
    /// At random, recorded.
    Reference(fastrand::Rng, Vec<(Settle, Action)>),
    /// The reference's, in order.
    Replay(std::vec::IntoIter<(Settle, Action)>),
}

impl Chooser {
    fn choose(&mut self, settle: &Settle, record: &TaskRecord) -> Result<Action, String> {
        match self {
            Self::Reference(rng, log) => {
                let action = match settle {
                    _ if rng.u8(0..100) < 5 => Action::Cancel,
                    Settle::Asleep(_) => Action::Wake,
                    Settle::Parked(keys) => {
                        let first = record.pending.iter().filter_map(|p| p.deadline_ms).min();
                        let key = keys[rng.usize(..keys.len())].clone();
                        match (rng.u8(0..100), first) {
                            (0..30, Some(at)) => Action::Expire {
                                keys: {
                                    let mut keys: Vec<String> = record
                                        .pending
                                        .iter()
                                        .filter(|p| p.deadline_ms.is_some_and(|d| d <= at + 1))
                                        .map(|p| p.key.clone())
                                        .collect();
                                    keys.sort();
                                    keys
                                },
                            },
                            (0..45, _) => Action::Decline { key },
                            _ => Action::Answer {
                                key,
                                yes: rng.bool(),
                            },
                        }
                    }
                };
                log.push((settle.shape(), action.clone()));
                Ok(action)
            }
            Self::Replay(log) => match log.next() {
                Some((expected, action)) if expected == settle.shape() => Ok(action),
                Some((expected, _)) => Err(format!(
                    "the run took another path: it settled {settle:?} where the reference settled {expected:?}"
                )),
                None => Err(format!(
                    "the run took another path: it settled {settle:?} after the reference's last settle"
                )),
            },
        }
    }
}

/// One instance of the fleet: its name, and the engine of its current
/// generation.
struct Slot {
    name: String,
    generation: u32,
    engine: Option<Engine>,
    /// When a dead instance starts again (clock ms).
    restart_at: Option<i64>,
}

/// One run of a program: its nodes, its shared [`Sim`].
struct World {
    sim: Arc<Sim>,
    slots: Vec<Slot>,
    generation: u32,
    task: String,
    /// The driver's own choices (chaos, delays).
    rng: fastrand::Rng,
    /// What happens to a node that thaws: a generator of its own, so the
    /// rest of the run draws as it would without it.
    thaw: fastrand::Rng,
    /// Pauses, crashes and restarts of nodes.
    chaos: bool,
    /// What happened, for the report.
    events: Vec<String>,
}

impl World {
    fn new(seed: u64, fleet: usize, plan: Plan, chaos: bool) -> Self {
        let sim = Sim::new(seed, plan, TestClock::frozen(EPOCH_MS));
        let slots = (0..fleet)
            .map(|i| Slot {
                name: format!("sim-{}", char::from(b'a' + u8::try_from(i).unwrap_or(0))),
                generation: 0,
                engine: None,
                restart_at: None,
            })
            .collect();
        Self {
            sim,
            slots,
            generation: 0,
            task: String::new(),
            rng: fastrand::Rng::with_seed(seed ^ 0x5eed_0004),
            thaw: fastrand::Rng::with_seed(seed ^ 0x5eed_0007),
            chaos,
            events: Vec::new(),
        }
    }

    fn now(&self) -> i64 {
        self.sim.clock.now_ms()
    }

    fn event(&mut self, what: String) {
        self.sim.trace(format!("driver: {what}"));
        self.events
            .push(format!("@{} {what}", self.now() - EPOCH_MS));
    }

    /// Starts instance `i` as a new node (generation).
    async fn start(&mut self, i: usize) {
        self.generation += 1;
        let g = self.generation;
        let name = self.slots[i].name.clone();
        self.sim.add_node(g, &name);
        self.slots[i].generation = g;
        self.slots[i].restart_at = None;
        self.event(format!("{name} starts as g{g}"));
        let store = SimStore {
            sim: self.sim.clone(),
            generation: g,
        };
        let builder = Engine::builder(store)
            .registry(Registry::new().with(program::program_tool()).unwrap())
            .state(Probe {
                sim: self.sim.clone(),
                generation: g,
                instruction: 0,
            })
            .clock(&self.sim.clock)
            .lease(LEASE)
            .scan_interval(SCAN)
            .sleep_in_process_up_to(IN_PROCESS)
            .default_ttl(None)
            .instance(name.clone());
        match tokio::time::timeout(Duration::from_secs(5), builder.start()).await {
            Ok(Ok(engine)) => self.slots[i].engine = Some(engine),
            outcome => {
                let why = match outcome {
                    Ok(Err(e)) => format!("{e}"),
                    _ => "its start hung".into(),
                };
                self.event(format!("{name} (g{g}) does not start: {why}"));
                self.sim.set_node(g, NodeState::Dead);
                self.slots[i].restart_at = Some(self.now() + 500);
            }
        }
    }

    fn state(&self, i: usize) -> NodeState {
        let slot = &self.slots[i];
        if slot.engine.is_none() {
            return NodeState::Dead;
        }
        self.sim.node(slot.generation).1
    }

    /// A live node for the user's calls.
    fn live(&self) -> Option<Engine> {
        (0..self.slots.len())
            .find(|&i| self.state(i) == NodeState::Live)
            .and_then(|i| self.slots[i].engine.clone())
    }

    /// Takes node `i` down (`how`). A step whose closure started on it and
    /// whose value is not journaled was in flight: it may run once more.
    async fn kill(&mut self, i: usize, how: Stop) {
        let g = self.slots[i].generation;
        let name = self.slots[i].name.clone();
        self.event(format!("{name} (g{g}) goes down: {how:?}"));
        if let Some(engine) = self.slots[i].engine.take() {
            let bound = Duration::from_secs(2);
            match how {
                Stop::Crash => {}
                Stop::Shutdown => {
                    let _ = tokio::time::timeout(bound, engine.shutdown()).await;
                }
                Stop::Drain => {
                    let _ =
                        tokio::time::timeout(bound, engine.drain(Duration::from_millis(50))).await;
                }
            }
        }
        self.sim.set_node(g, NodeState::Dead);
        self.sim.allow_in_flight(g);
        let back = 200 + self.rng.i64(0..3000);
        self.slots[i].restart_at = Some(self.now() + back);
    }

    /// One turn of the clock: a seeded tick, which every live node hears
    /// of, and that much simulated time for the nodes to work in.
    async fn tick(&mut self) {
        let dt = 10 + self.rng.u64(0..=MAX_TICK - 10);
        self.advance(dt).await;
        tokio::time::sleep(Duration::from_millis(dt)).await;
    }

    /// Moves the shared clock on, and rouses the live nodes' timers. The
    /// store calls under way land first, at about the time they were made
    /// (a call takes its latency, not the hours a user lets pass).
    async fn advance(&mut self, by_ms: u64) {
        for _ in 0..100 {
            if self.sim.slow_calls() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        self.sim.trace(format!("clock +{by_ms}"));
        self.sim.clock.advance(Duration::from_millis(by_ms));
        for i in 0..self.slots.len() {
            if self.state(i) == NodeState::Live
                && let Some(engine) = &self.slots[i].engine
            {
                engine.advance_clock(Duration::ZERO);
            }
        }
    }

    /// Takes down for good the nodes that crashed at a store call.
    async fn bury(&mut self) {
        for i in 0..self.slots.len() {
            if self.slots[i].engine.is_some()
                && self.sim.node(self.slots[i].generation).1 == NodeState::Dead
            {
                self.kill(i, Stop::Crash).await;
            }
        }
    }

    /// Resumes the paused nodes whose pause ends by `by`, and rouses their
    /// timers; returns their slots.
    fn resume(&mut self, by: i64) -> Vec<usize> {
        let mut resumed = Vec::new();
        for g in self.sim.resume_due(by) {
            if let Some(i) = self.slots.iter().position(|s| s.generation == g)
                && let Some(engine) = &self.slots[i].engine
            {
                engine.advance_clock(Duration::ZERO);
                resumed.push(i);
            }
        }
        resumed
    }

    /// Starts again the instances whose time has come, and resumes the
    /// paused ones whose pause is over; returns the slots resumed.
    async fn restart_due(&mut self) -> Vec<usize> {
        let now = self.now();
        let resumed = self.resume(now);
        for i in 0..self.slots.len() {
            if self.slots[i].restart_at.is_some_and(|at| at <= now) {
                self.start(i).await;
            }
        }
        resumed
    }

    /// Pauses, resumes, crashes and restarts nodes, at random.
    async fn chaos(&mut self) {
        // A node that thaws is often stopped at once, as an orchestrator
        // that gave up on it would: drained, shut down or killed while its
        // runs still think they hold their tasks.
        for i in self.restart_due().await {
            let how = match self.thaw.u8(0..6) {
                0 => Stop::Drain,
                1 => Stop::Shutdown,
                2 => Stop::Crash,
                _ => continue,
            };
            self.kill(i, how).await;
        }
        let live: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.state(i) == NodeState::Live)
            .collect();
        if live.is_empty() {
            return;
        }
        let roll = self.rng.u16(0..1000);
        if roll < 15 {
            // Pause the lease holder, most often: a step or a write may be
            // in flight there.
            let holder = self
                .sim
                .memory
                .get(&self.task)
                .now_or_never()
                .and_then(|r| r.ok().flatten())
                .and_then(|r| r.lease)
                .and_then(|l| {
                    live.iter()
                        .copied()
                        .find(|&i| self.slots[i].name == l.owner)
                });
            let i = match holder {
                Some(i) if self.rng.u8(0..4) != 0 => i,
                _ => live[self.rng.usize(..live.len())],
            };
            let g = self.slots[i].generation;
            let span = LEASE.as_millis() as i64 + self.rng.i64(-300..2500);
            self.event(format!(
                "{} (g{g}) paused for {span} ms",
                self.slots[i].name
            ));
            self.sim.pause(g, span);
        } else if roll < 23 {
            let i = live[self.rng.usize(..live.len())];
            let how = match self.rng.u8(0..4) {
                0 | 1 => Stop::Crash,
                2 => Stop::Shutdown,
                _ => Stop::Drain,
            };
            self.kill(i, how).await;
        }
    }

    /// Creates the task: a call of the program, on the first node.
    async fn create(&mut self, ops: &[Op]) -> Result<(), String> {
        let mut args = Map::new();
        args.insert("ops".into(), serde_json::to_value(ops).unwrap());
        let engine = self.live().ok_or("no live node to create the task on")?;
        let call = Call::new("program", args).capabilities(InputCapabilities::ALL);
        match tokio::time::timeout(Duration::from_secs(5), engine.call(call)).await {
            Ok(Ok(CallOutcome::Task(task))) => {
                self.task = task.id.clone();
                Ok(())
            }
            Ok(Ok(other)) => Err(format!("the call did not start a task: {other:?}")),
            Ok(Err(e)) => Err(format!("the call was refused: {e}")),
            Err(_) => Err("the call hung".into()),
        }
    }

    /// The task as stored now, read beside the nodes (unfaulted).
    fn record(&self) -> Result<TaskRecord, String> {
        match self.sim.memory.get(&self.task).now_or_never() {
            Some(Ok(Some(r))) => Ok(r),
            Some(Ok(None)) => Err("the task is gone: lost".into()),
            other => Err(format!("the memory store did not answer: {other:?}")),
        }
    }

    /// Does `action` at the settle the task is in, through a live node;
    /// `true` when a cancel was accepted. Done again at the next turn if
    /// it has not taken yet (each is idempotent).
    async fn act(&mut self, record: &TaskRecord, action: &Action) -> bool {
        let now = self.now();
        let pending = |key: &str| record.pending.iter().any(|p| p.key == key);
        let respond = |key: &str, response: Value| {
            let mut responses = Map::new();
            responses.insert(key.to_owned(), response);
            responses
        };
        let bound = Duration::from_secs(2);
        match action {
            Action::Answer { key, yes } if pending(key) => {
                if let Some(e) = self.live() {
                    let content = json!({"action": "accept", "content": {"confirm": yes}});
                    let r = tokio::time::timeout(
                        bound,
                        e.update(&self.task, respond(key, content), None),
                    )
                    .await;
                    self.sim.trace(format!("user answers {key}: {r:?}"));
                }
            }
            Action::Decline { key } if pending(key) => {
                if let Some(e) = self.live() {
                    let r = tokio::time::timeout(
                        bound,
                        e.update(&self.task, respond(key, json!({"action": "decline"})), None),
                    )
                    .await;
                    self.sim.trace(format!("user declines {key}: {r:?}"));
                }
            }
            Action::Expire { .. } => {
                if let Some(at) = record.pending.iter().filter_map(|p| p.deadline_ms).min()
                    && at >= now
                {
                    self.advance(u64::try_from(at - now + 1).unwrap_or(0)).await;
                }
            }
            Action::Wake => {
                if let Some(at) = record.wake_at_ms
                    && at >= now
                {
                    self.advance(u64::try_from(at - now + 1).unwrap_or(0)).await;
                }
            }
            Action::Cancel if !record.cancel_requested => {
                if let Some(e) = self.live() {
                    let r = tokio::time::timeout(bound, e.cancel(&self.task, None)).await;
                    self.sim.trace(format!("user cancels: {r:?}"));
                    return matches!(r, Ok(Ok(())));
                }
            }
            _ => {}
        }
        false
    }

    /// Runs the program to its end: returns how it ended.
    async fn drive(&mut self, ops: &[Op], chooser: &mut Chooser) -> Result<Outcome, String> {
        for i in 0..self.slots.len() {
            self.start(i).await;
        }
        self.create(ops).await?;
        self.sim.arm(&self.task);
        let began = Instant::now();
        let mut last: Option<(Settle, Action)> = None;
        let mut settled_at: Option<(Settle, u32)> = None;
        let mut cancelled_at: Option<i64> = None;
        for turn in 0..MAX_TICKS {
            if began.elapsed() > REAL_HANG {
                return Err(format!("no end within {REAL_HANG:?} of real time"));
            }
            self.bury().await;
            if self.chaos {
                self.chaos().await;
            } else {
                self.restart_due().await;
            }
            let record = self.record()?;
            if record.status.is_terminal() {
                return Ok(Outcome::of(&record));
            }
            let now = self.now();
            if let Some(at) = cancelled_at
                && now - at > CANCEL_BOUND
            {
                return Err(format!(
                    "a cancel of the parked task, accepted at {}, did not end it within {CANCEL_BOUND} ms: {}",
                    at - EPOCH_MS,
                    faults::brief(&record)
                ));
            }
            let settle = match record.status {
                TaskStatus::InputRequired if !record.pending.is_empty() => {
                    let mut keys: Vec<String> =
                        record.pending.iter().map(|p| p.key.clone()).collect();
                    keys.sort();
                    Some(Settle::Parked(keys))
                }
                TaskStatus::Working if record.lease.is_none() => {
                    record.wake_at_ms.map(Settle::Asleep)
                }
                _ => None,
            };
            if let Some(settle) = settle {
                // The user acts a seeded while after the task settles.
                let wait = match &settled_at {
                    Some((at, until)) if *at == settle => *until,
                    _ => {
                        let until = turn + self.rng.u32(0..4);
                        settled_at = Some((settle.clone(), until));
                        until
                    }
                };
                if turn >= wait {
                    let action = match &last {
                        Some((at, action)) if *at == settle => action.clone(),
                        _ => {
                            let action = chooser.choose(&settle, &record)?;
                            self.event(format!("{settle:?}: {action:?}"));
                            last = Some((settle, action.clone()));
                            action
                        }
                    };
                    if self.act(&record, &action).await && cancelled_at.is_none() {
                        cancelled_at = Some(self.now());
                    }
                }
            }
            self.tick().await;
        }
        Err(format!(
            "no end within {MAX_TICKS} turns of the driver (last action {last:?}): {}",
            faults::brief(&self.record()?)
        ))
    }

    /// After the end: every node down, one restarted, and the task is
    /// still as it ended.
    async fn check_final(&mut self, outcome: &Outcome) -> Result<(), String> {
        self.sim.disarm();
        // The paused nodes thaw after the end and run a while: a step they
        // had in flight must not complete now that the task is over.
        self.resume(i64::MAX);
        for _ in 0..5 {
            self.tick().await;
        }
        for i in 0..self.slots.len() {
            if self.slots[i].engine.is_some() {
                self.kill(i, Stop::Crash).await;
            }
        }
        self.start(0).await;
        for _ in 0..10 {
            self.tick().await;
            let now = Outcome::of(&self.record()?);
            if now != *outcome {
                return Err(format!(
                    "the task ended {outcome:?}, and later read {now:?}"
                ));
            }
        }
        Ok(())
    }

    /// The oracles on what the run's steps and sleeps did.
    fn check_effects(&self) -> Result<(), String> {
        if let Some(v) = self.sim.violations().first() {
            return Err(v.clone());
        }
        let allowance = self.sim.allowance();
        for (name, runs) in self.sim.steps() {
            let allowed = 1 + allowance.get(&name).copied().unwrap_or(0);
            if runs.completed.len() > allowed {
                return Err(format!(
                    "step `{name}` completed {} times (on nodes g{:?}), {allowed} allowed",
                    runs.completed.len(),
                    runs.completed
                ));
            }
        }
        // A sleep's deadline is the one journaled: the clock when the run
        // whose entry landed first reached it, plus its span (a run that
        // reached it and died before its entry landed set none).
        let journaled: Vec<i64> = self
            .sim
            .memory
            .journal(&self.task)
            .now_or_never()
            .and_then(Result::ok)
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e.kind == StepKind::Sleep)
            .filter_map(|e| e.value.as_i64())
            .collect();
        for (name, runs) in self.sim.sleeps() {
            let Some(&(_, first)) = runs.reached.first() else {
                continue;
            };
            let deadline = runs
                .reached
                .iter()
                .map(|(_, at)| at + runs.span_ms)
                .find(|at| journaled.contains(at))
                .unwrap_or(first + runs.span_ms);
            for &(g, after) in &runs.returned {
                if after < deadline {
                    return Err(format!(
                        "sleep `{name}` returned at {} on g{g}, before its deadline {} ({} ms)",
                        after - EPOCH_MS,
                        deadline - EPOCH_MS,
                        runs.span_ms
                    ));
                }
                let reached = runs
                    .reached
                    .iter()
                    .filter(|(rg, at)| *rg == g && *at <= after)
                    .map(|(_, at)| *at)
                    .max()
                    .unwrap_or(first);
                // Two ticks, and however long the node was paused meanwhile.
                let latest = deadline.max(reached)
                    + 2 * MAX_TICK as i64
                    + self.sim.paused_within(g, reached, after);
                if after > latest {
                    return Err(format!(
                        "sleep `{name}` returned at {} on g{g}, after {} (its deadline {}, reached by that run at {}): \
                         it did not keep its journaled deadline",
                        after - EPOCH_MS,
                        latest - EPOCH_MS,
                        deadline - EPOCH_MS,
                        reached - EPOCH_MS
                    ));
                }
            }
        }
        Ok(())
    }

    fn check_model(
        &self,
        ops: &[Op],
        actions: &[(Settle, Action)],
        outcome: &Outcome,
    ) -> Result<(), String> {
        let mut answers = BTreeMap::new();
        let mut cancelled = false;
        for (i, (_, action)) in actions.iter().enumerate() {
            match action {
                Action::Answer { key, yes } => {
                    let r = if *yes {
                        Resolution::Yes
                    } else {
                        Resolution::No
                    };
                    answers.entry(key.clone()).or_insert((i, r));
                }
                Action::Decline { key } => {
                    answers
                        .entry(key.clone())
                        .or_insert((i, Resolution::Declined));
                }
                Action::Expire { keys } => {
                    for key in keys {
                        answers
                            .entry(key.clone())
                            .or_insert((i, Resolution::TimedOut));
                    }
                }
                Action::Wake => {}
                Action::Cancel => cancelled = true,
            }
        }
        if cancelled {
            if outcome.status != TaskStatus::Cancelled {
                return Err(format!(
                    "the user cancelled, and the task ended {:?}",
                    outcome.status
                ));
            }
            return Ok(());
        }
        if outcome.status != TaskStatus::Completed {
            return Err(format!(
                "the task ended {:?} ({:?}), where the program completes",
                outcome.status, outcome.error
            ));
        }
        let got: Vec<String> = outcome
            .result
            .as_ref()
            .and_then(|r| r.get("content"))
            .and_then(|c| c.get(0))
            .and_then(|c| c.get("text"))
            .and_then(Value::as_str)
            .and_then(|text| serde_json::from_str::<Vec<String>>(text).ok())
            .unwrap_or_default();
        let expected = program::expect(ops, &answers);
        if got.len() != expected.len() {
            return Err(format!(
                "the program returned {got:?}, where the model has {} instructions: {expected:?} (result {:?})",
                expected.len(),
                outcome.result
            ));
        }
        for (i, (got, expected)) in got.iter().zip(&expected).enumerate() {
            if let Some(expected) = expected
                && got != expected
            {
                return Err(format!(
                    "instruction {i} returned {got:?}, where the model says {expected:?}"
                ));
            }
        }
        let steps = self.sim.steps();
        for name in program::must_run(ops, &answers) {
            if steps.get(&name).is_none_or(|r| r.completed.is_empty()) {
                return Err(format!(
                    "step `{name}` never completed, and the task completed"
                ));
            }
        }
        Ok(())
    }

    /// Every node down: their tasks are dropped with the runtime.
    fn stop(&mut self) {
        for slot in &mut self.slots {
            slot.engine = None;
        }
    }
}

/// What one seed runs: its program and its faulty run's plan, which a
/// shrinker may cut down.
#[derive(Debug, Clone)]
struct Setup {
    ops: Vec<Op>,
    plan: Plan,
    fleet: usize,
}

/// The seed's program and faults (or those `MCP_TASKS_SIM_PROGRAM` and
/// `MCP_TASKS_SIM_FAULTS` give).
fn setup(seed: u64) -> Setup {
    let mut rng = fastrand::Rng::with_seed(seed);
    let ops = program::generate(&mut rng, false, false);
    let mut plan = Plan {
        faults: Vec::new(),
        latency: 4,
    };
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed_0003);
    let fleet = rng.usize(1..=3);
    if rng.u8(0..100) < 70 {
        for _ in 0..rng.u8(1..=6) {
            let at = rng.u32(1..=400);
            let landing = if rng.bool() {
                Landing::Before
            } else {
                Landing::After
            };
            let fault = if rng.u8(0..100) < 25 {
                Fault::Crash(landing)
            } else if rng.u8(0..100) < 30 {
                // Past the lease, most often.
                Fault::Pause(rng.u32(700..=3500))
            } else {
                Fault::Fail(landing)
            };
            // A run of one to three failures in a row.
            let run = if matches!(fault, Fault::Fail(_)) {
                rng.u32(1..=3)
            } else {
                1
            };
            for k in 0..run {
                plan.faults.push((at + k, fault));
            }
        }
        plan.faults.sort_by_key(|(at, _)| *at);
        plan.faults.dedup_by_key(|(at, _)| *at);
    }
    let mut setup = Setup { ops, plan, fleet };
    if let Ok(json) = std::env::var("MCP_TASKS_SIM_PROGRAM") {
        setup.ops = serde_json::from_str(&json).expect("MCP_TASKS_SIM_PROGRAM is a program");
    }
    if let Ok(spec) = std::env::var("MCP_TASKS_SIM_FAULTS") {
        setup.plan.faults = parse_faults(&spec);
    }
    setup
}

fn show_faults(faults: &[(u32, Fault)]) -> String {
    faults
        .iter()
        .map(|(at, f)| {
            let f = match f {
                Fault::Fail(Landing::Before) => "fail-before",
                Fault::Fail(Landing::After) => "fail-after",
                Fault::Crash(Landing::Before) => "crash-before",
                Fault::Crash(Landing::After) => "crash-after",
                Fault::Pause(ms) => return format!("{at}:pause-{ms}"),
            };
            format!("{at}:{f}")
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn parse_faults(spec: &str) -> Vec<(u32, Fault)> {
    spec.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            let (at, f) = s.split_once(':').expect("a fault is call:kind");
            let f = match f {
                "fail-before" => Fault::Fail(Landing::Before),
                "fail-after" => Fault::Fail(Landing::After),
                "crash-before" => Fault::Crash(Landing::Before),
                "crash-after" => Fault::Crash(Landing::After),
                other if other.starts_with("pause-") => {
                    Fault::Pause(other["pause-".len()..].parse().expect("pause-MS"))
                }
                other => panic!("unknown fault {other:?}"),
            };
            (at.parse().expect("a call number"), f)
        })
        .collect()
}

/// What one seed did.
#[derive(Default)]
struct Report {
    fleet: usize,
    program: Vec<Op>,
    reference: Vec<String>,
    faulty: Vec<String>,
    plan: String,
    struck: Vec<String>,
    /// Every store call, fault, node move, clock move and user action of
    /// both runs, in order.
    trace: Vec<String>,
}

/// Runs one seed (on this thread, in a runtime of its own): the reference,
/// then the faulty run, and checks them.
fn simulate(seed: u64, setup: &Setup, report: &mut Report) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    seed_ids(Some(seed));
    let result = rt.block_on(simulate_in(seed, setup, report));
    drop(rt);
    seed_ids(None);
    result
}

async fn simulate_in(seed: u64, setup: &Setup, report: &mut Report) -> Result<(), String> {
    let ops = &setup.ops;
    report.fleet = setup.fleet;
    report.program = ops.clone();
    report.plan = format!(
        "faults {} latency 1/{}",
        show_faults(&setup.plan.faults),
        setup.plan.latency
    );

    let mut reference = World::new(seed ^ 0x5eed_0005, 1, Plan::default(), false);
    let mut chooser = Chooser::Reference(fastrand::Rng::with_seed(seed ^ 0x5eed_0001), Vec::new());
    let expected = reference.drive(ops, &mut chooser).await;
    let checked = match &expected {
        Ok(outcome) => reference.check_final(outcome).await,
        Err(_) => Ok(()),
    };
    report.reference = std::mem::take(&mut reference.events);
    report.trace = reference.sim.take_trace();
    reference.stop();
    let expected = expected.map_err(|e| format!("reference run: {e}"))?;
    checked.map_err(|e| format!("reference run: {e}"))?;
    reference
        .check_effects()
        .map_err(|e| format!("reference run: {e}"))?;
    let Chooser::Reference(_, actions) = chooser else {
        unreachable!("the reference chooses")
    };
    reference
        .check_model(ops, &actions, &expected)
        .map_err(|e| format!("reference run, the model: {e}"))?;

    let mut faulty = World::new(seed ^ 0x5eed_0006, setup.fleet, setup.plan.clone(), true);
    let mut chooser = Chooser::Replay(actions.clone().into_iter());
    let outcome = faulty.drive(ops, &mut chooser).await;
    let result = async {
        let outcome = outcome?;
        faulty.check_effects()?;
        faulty
            .check_model(ops, &actions, &outcome)
            .map_err(|e| format!("the model: {e}"))?;
        if outcome != expected {
            return Err(format!(
                "the run ended {outcome:#?}\nwhere the reference ended {expected:#?}"
            ));
        }
        faulty.check_final(&outcome).await?;
        faulty.check_effects()
    }
    .await;
    report.faulty = std::mem::take(&mut faulty.events);
    report.struck = faulty.sim.struck();
    report.trace.push("---- the faulty run".into());
    report.trace.extend(faulty.sim.take_trace());
    faulty.stop();
    result
}

/// Runs `seed` with `setup`, a panic being a violation.
fn run_once(seed: u64, setup: &Setup, report: &mut Report) -> Result<(), String> {
    let panics = PANICS.with(Cell::get);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        simulate(seed, setup, report)
    }))
    .unwrap_or_else(|_| Err("the simulation panicked".into()));
    match result {
        Ok(()) if PANICS.with(Cell::get) != panics => {
            Err("a panic (see the output above) happened while this seed ran".to_owned())
        }
        other => other,
    }
}

/// Runs `seed`; its report when it fails.
fn run_seed(seed: u64) -> Option<String> {
    let setup = setup(seed);
    let mut report = Report::default();
    match run_once(seed, &setup, &mut report) {
        Err(violation) => {
            // At once, for long runs (the reports come at the end).
            eprintln!(
                "seed {seed} FAILED: {}",
                violation.lines().next().unwrap_or_default()
            );
            let mut text = describe(seed, &report, &format!("FAILED: {violation}"));
            if std::env::var("MCP_TASKS_SIM_TRACE").is_ok() {
                text.push_str("\n  trace:\n    ");
                text.push_str(&report.trace.join("\n    "));
            }
            Some(text)
        }
        Ok(()) => {
            if std::env::var("MCP_TASKS_SIM_VERBOSE").is_ok() {
                eprintln!("{}\n", describe(seed, &report, "passed"));
            }
            None
        }
    }
}

/// The seed's setup shrunk, and the command that runs it.
fn shrunk(seed: u64) -> String {
    let shrunk = shrink(seed, setup(seed));
    let program = serde_json::to_string(&shrunk.ops).unwrap_or_default();
    let faults = show_faults(&shrunk.plan.faults);
    format!(
        "seed {seed} shrunk to {} instructions and {} faults: program {program} faults {faults}\n  rerun the shrunk one: \
         MCP_TASKS_SIM_SEED={seed} MCP_TASKS_SIM_PROGRAM='{program}' MCP_TASKS_SIM_FAULTS='{faults}' \
         cargo test -p mcp-tasks-runtime --test simulation generated -- --nocapture",
        shrunk.ops.len(),
        shrunk.plan.faults.len(),
    )
}

/// Greedily takes instructions, then faults, out of `setup` while the seed
/// still fails (at most a few dozen reruns).
fn shrink(seed: u64, mut setup: Setup) -> Setup {
    let fails = |s: &Setup| run_once(seed, s, &mut Report::default()).is_err();
    let mut i = 0;
    while i < setup.ops.len() && setup.ops.len() > 1 {
        let mut smaller = setup.clone();
        smaller.ops.remove(i);
        if fails(&smaller) {
            setup = smaller;
        } else {
            i += 1;
        }
    }
    let mut i = 0;
    while i < setup.plan.faults.len() {
        let mut smaller = setup.clone();
        smaller.plan.faults.remove(i);
        if fails(&smaller) {
            setup = smaller;
        } else {
            i += 1;
        }
    }
    setup
}

/// A seed's report: what it ran, what struck, how it went.
fn describe(seed: u64, report: &Report, verdict: &str) -> String {
    format!(
        "seed {seed} {verdict}\n  fleet: {} nodes\n  program: {}\n  reference: {:?}\n  faulty run: {:?}\n  fault plan: {}\n  faults that struck: {:?}\n  rerun: MCP_TASKS_SIM_SEED={seed} cargo test -p mcp-tasks-runtime --test simulation generated -- --nocapture",
        report.fleet,
        serde_json::to_string(&report.program).unwrap_or_default(),
        report.reference,
        report.faulty,
        report.plan,
        report.struck,
    )
}

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {value:?}")),
    )
}

fn panic_hook() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let default_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.with(|p| p.set(p.get() + 1));
            default_hook(info);
        }));
    });
}

/// Runs `f` for each of `seeds`, [`PARALLEL`] threads at once; the
/// results in the seeds' order.
fn each_seed<T: Send>(seeds: &[u64], f: impl Fn(u64) -> T + Sync) -> Vec<T> {
    panic_hook();
    let next = AtomicU64::new(0);
    let began = Instant::now();
    let total = seeds.len();
    let mut results: Vec<(usize, T)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..PARALLEL)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst) as usize;
                        let Some(&seed) = seeds.get(i) else { break };
                        out.push((i, f(seed)));
                        if (i + 1).is_multiple_of(1000) {
                            eprintln!(
                                "simulation: {} of {total} seeds begun and done in {:.0} s",
                                i + 1,
                                began.elapsed().as_secs_f64()
                            );
                        }
                    }
                    out
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a simulation thread"))
            .collect()
    });
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}

#[test]
fn generated_programs_keep_every_oracle() {
    let seeds: Vec<u64> = match env_u64("MCP_TASKS_SIM_SEED") {
        Some(seed) => vec![seed],
        None => {
            let first = env_u64("MCP_TASKS_SIM_FIRST");
            let n = env_u64("MCP_TASKS_SIM_SEEDS");
            let mut seeds: Vec<u64> = {
                let first = first.unwrap_or(0);
                (first..first.saturating_add(n.unwrap_or(DEFAULT_SEEDS))).collect()
            };
            if first.is_none() && n.is_none() {
                seeds.extend(REGRESSIONS);
            }
            seeds
        }
    };
    let began = Instant::now();
    let results = each_seed(&seeds, run_seed);
    let first_failed = seeds
        .iter()
        .zip(&results)
        .find(|(_, r)| r.is_some())
        .map(|(seed, _)| *seed);
    let failures: Vec<String> = results.into_iter().flatten().collect();
    eprintln!(
        "simulation: {} seeds from {} in {:.1} s, {} failed",
        seeds.len(),
        seeds.first().copied().unwrap_or(0),
        began.elapsed().as_secs_f64(),
        failures.len()
    );
    for f in &failures {
        eprintln!("{f}\n");
    }
    if let Some(seed) = first_failed {
        // The first failure shrunk (greedily: each instruction, then each
        // fault, taken out while the seed still fails).
        eprintln!("{}\n", shrunk(seed));
        eprintln!("first failing seed: {seed}");
    }
    assert!(
        failures.is_empty(),
        "{} of {} seeds failed (the first: {})",
        failures.len(),
        seeds.len(),
        failures
            .first()
            .and_then(|f| f.lines().next())
            .unwrap_or_default()
    );
}

/// The same seed gives the same run, step for step: 50 seeds, each run
/// twice, give the same trace (every store call and its answer, every
/// fault, node move, clock move and user action, in order).
#[test]
fn the_same_seed_gives_the_same_trace() {
    let seeds: Vec<u64> = (0..50).collect();
    let trace = |seed: u64| {
        let mut report = Report::default();
        let _ = run_once(seed, &setup(seed), &mut report);
        report.trace
    };
    let first = each_seed(&seeds, trace);
    let second = each_seed(&seeds, trace);
    for ((seed, a), b) in seeds.iter().zip(&first).zip(&second) {
        assert!(a.len() > 10, "seed {seed} traced only {a:?}");
        if a != b {
            let at = a
                .iter()
                .zip(b)
                .position(|(x, y)| x != y)
                .unwrap_or(a.len().min(b.len()));
            panic!(
                "seed {seed} ran differently the second time: from line {at} of {} and {}:\n  first: {:?}\n  second: {:?}",
                a.len(),
                b.len(),
                &a[at.saturating_sub(3)..(at + 3).min(a.len())],
                &b[at.saturating_sub(3)..(at + 3).min(b.len())],
            );
        }
    }
}
