//! The simulated store and what every engine of one run shares: the
//! seeded random numbers, the trace, the nodes (live, paused or dead), the
//! fault schedule and the oracles' records.
//!
//! [`SimStore`] wraps the run's one [`MemoryStore`] for one engine (one
//! node generation). Each call of every kind (reads, claims, renewals and
//! writes alike):
//!
//! 1. waits while its node is paused (the SIGSTOP model: nothing the node
//!    does reaches the store, and no answer reaches the node), and never
//!    returns once its node is dead (the process is gone);
//! 2. takes a seeded latency of simulated time (most calls none);
//! 3. is counted, and meets the fault the schedule holds for its number,
//!    if any: it fails (before it lands, or after with its answer lost),
//!    or the node crashes there (before or after the call landed);
//! 4. is written to the trace with its answer.
//!
//! Everything runs on one thread: the order of these draws and calls is
//! the same for the same seed.

use std::{
    collections::BTreeMap,
    future::Future,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use async_trait::async_trait;
use futures::FutureExt;
use mcp_tasks_runtime::{
    Result,
    store::{
        Answered, Appended, FrontDoorStore, JournalEntry, ListCursor, MemoryStore, Store,
        StoreError, TaskRecord, Transition,
    },
    testing::TestClock,
};
use serde_json::{Map, Value};

/// When a fault strikes: the call lands first, or not at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Landing {
    Before,
    After,
}

/// One planned fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The call fails.
    Fail(Landing),
    /// The node crashes at the call: it never answers, nor does anything
    /// else of that node.
    Crash(Landing),
    /// The node is paused (SIGSTOP) for this many ms of the clock at the
    /// first write (`append`, `transition`, `transition_journaled`,
    /// `claim`, `answer`, `time_out`) from this call on, before it lands.
    Pause(u32),
}

/// The faults of one run, by the number of the store call (from 1, counted
/// over every node once the plan is armed). A list, so that a shrinker can
/// take faults out one by one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) faults: Vec<(u32, Fault)>,
    /// Most calls take no time; one in `1/latency` takes 1 to 40 ms
    /// (0: none).
    pub(crate) latency: u32,
}

/// What a node (one engine: one generation of an instance) is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeState {
    Live,
    /// Stopped (SIGSTOP): its calls and effects wait until it resumes.
    Paused,
    /// Gone: its calls and effects never return.
    Dead,
}

/// How often one step's closure started and completed, by node generation.
#[derive(Debug, Default, Clone)]
pub(crate) struct StepRuns {
    /// The program's instruction the step belongs to.
    pub(crate) instruction: usize,
    pub(crate) started: Vec<u32>,
    pub(crate) completed: Vec<u32>,
}

/// One durable sleep of the program as its runs saw it: the clock when
/// each run reached it, and when it returned.
#[derive(Debug, Default, Clone)]
pub(crate) struct SleepRuns {
    pub(crate) span_ms: i64,
    /// `(generation, clock)` each time a run reached the sleep.
    pub(crate) reached: Vec<(u32, i64)>,
    /// `(generation, clock)` each time it returned.
    pub(crate) returned: Vec<(u32, i64)>,
}

#[derive(Debug)]
struct State {
    rng: fastrand::Rng,
    plan: Plan,
    armed: bool,
    calls: u32,
    nodes: BTreeMap<u32, (String, NodeState)>,
    /// When each paused node resumes (clock ms), for pauses the plan made.
    resume_at: BTreeMap<u32, i64>,
    /// `(generation, from, to)` of every pause, for the sleeps' bound.
    pauses: Vec<(u32, i64, i64)>,
    /// A planned pause waiting for the next write.
    pause_next_write: Option<u32>,
    /// Extra completions allowed per step: the deaths and pauses it was in
    /// flight at.
    allowance: BTreeMap<String, usize>,
    trace: Vec<String>,
    steps: BTreeMap<String, StepRuns>,
    sleeps: BTreeMap<String, SleepRuns>,
    violations: Vec<String>,
    /// The fence of each node's latest claim (or create) that it heard of.
    fences: BTreeMap<u32, u64>,
    /// What struck, for the report.
    struck: Vec<String>,
    task: String,
    /// Calls taking their latency now.
    slow: u32,
}

/// Everything the nodes of one run share.
#[derive(Debug)]
pub(crate) struct Sim {
    state: Mutex<State>,
    /// Wakes the calls and effects waiting on a paused node.
    moved: tokio::sync::Notify,
    pub(crate) clock: TestClock,
    pub(crate) memory: Arc<MemoryStore>,
}

impl Sim {
    pub(crate) fn new(seed: u64, plan: Plan, clock: TestClock) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                rng: fastrand::Rng::with_seed(seed),
                plan,
                armed: false,
                calls: 0,
                nodes: BTreeMap::new(),
                resume_at: BTreeMap::new(),
                pauses: Vec::new(),
                pause_next_write: None,
                allowance: BTreeMap::new(),
                trace: Vec::new(),
                steps: BTreeMap::new(),
                sleeps: BTreeMap::new(),
                violations: Vec::new(),
                fences: BTreeMap::new(),
                struck: Vec::new(),
                task: String::new(),
                slow: 0,
            }),
            moved: tokio::sync::Notify::new(),
            clock,
            memory: Arc::new(MemoryStore::new()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts counting calls and striking faults (once the task exists).
    pub(crate) fn arm(&self, task: &str) {
        let mut s = self.lock();
        s.armed = true;
        s.task = task.to_owned();
    }

    /// Stops every fault (the check after the end).
    pub(crate) fn disarm(&self) {
        self.lock().armed = false;
    }

    pub(crate) fn task(&self) -> String {
        self.lock().task.clone()
    }

    /// Writes `line` to the trace, with the clock.
    pub(crate) fn trace(&self, line: impl AsRef<str>) {
        let now = self.clock.now_ms();
        let line = format!("{now} {}", line.as_ref());
        self.lock().trace.push(line);
    }

    /// How many calls are taking their latency now.
    pub(crate) fn slow_calls(&self) -> u32 {
        self.lock().slow
    }

    pub(crate) fn take_trace(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().trace)
    }

    pub(crate) fn violation(&self, what: String) {
        self.trace(format!("VIOLATION {what}"));
        self.lock().violations.push(what);
    }

    pub(crate) fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    pub(crate) fn struck(&self) -> Vec<String> {
        self.lock().struck.clone()
    }

    /// A draw from the run's generator.
    pub(crate) fn draw(&self, below: u64) -> u64 {
        self.lock().rng.u64(..below.max(1))
    }

    pub(crate) fn add_node(&self, generation: u32, name: &str) {
        self.lock()
            .nodes
            .insert(generation, (name.to_owned(), NodeState::Live));
    }

    pub(crate) fn node(&self, generation: u32) -> (String, NodeState) {
        self.lock()
            .nodes
            .get(&generation)
            .cloned()
            .unwrap_or_else(|| (String::new(), NodeState::Dead))
    }

    pub(crate) fn set_node(&self, generation: u32, state: NodeState) {
        if let Some(node) = self.lock().nodes.get_mut(&generation) {
            node.1 = state;
        }
        self.trace(format!("node g{generation} {state:?}"));
        self.moved.notify_waiters();
    }

    /// Returns once node `generation` is live; never while it is dead.
    pub(crate) async fn gate(&self, generation: u32) {
        loop {
            let moved = self.moved.notified();
            match self.node(generation).1 {
                NodeState::Live => return,
                NodeState::Dead => std::future::pending::<()>().await,
                NodeState::Paused => moved.await,
            }
        }
    }

    /// Pauses node `generation` for `ms` of the clock.
    pub(crate) fn pause(&self, generation: u32, ms: i64) {
        let now = self.clock.now_ms();
        let at = now + ms;
        {
            let mut s = self.lock();
            s.resume_at.insert(generation, at);
            s.pauses.push((generation, now, at));
        }
        self.set_node(generation, NodeState::Paused);
        // A pause past the lease is a crash that comes back: another node
        // may run again what was in flight here.
        self.allow_in_flight(generation);
    }

    /// The paused nodes whose pause is over at `now`; they are live again.
    pub(crate) fn resume_due(&self, now: i64) -> Vec<u32> {
        let due: Vec<u32> = {
            let mut s = self.lock();
            let due: Vec<u32> = s
                .resume_at
                .iter()
                .filter(|(_, at)| **at <= now)
                .map(|(g, _)| *g)
                .collect();
            for g in &due {
                s.resume_at.remove(g);
            }
            due
        };
        for &g in &due {
            if self.node(g).1 == NodeState::Paused {
                self.set_node(g, NodeState::Live);
            }
        }
        due
    }

    /// Node `generation` died or was paused: each step whose closure
    /// started there, whose value is not journaled, and after which the
    /// program began no later instruction (it does so only once the value
    /// is journaled) was in flight, and may complete once more elsewhere.
    pub(crate) fn allow_in_flight(&self, generation: u32) {
        let task = self.task();
        if task.is_empty() {
            return;
        }
        let journaled: Vec<String> = self
            .memory
            .journal(&task)
            .now_or_never()
            .and_then(Result::ok)
            .unwrap_or_default()
            .into_iter()
            .map(|e| e.name)
            .collect();
        let mut s = self.lock();
        let latest = s
            .steps
            .values()
            .filter(|runs| runs.started.contains(&generation))
            .map(|runs| runs.instruction)
            .max();
        let in_flight: Vec<String> = s
            .steps
            .iter()
            .filter(|(name, runs)| {
                runs.started.contains(&generation)
                    && !journaled.contains(name)
                    && Some(runs.instruction) >= latest
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in in_flight {
            *s.allowance.entry(name).or_default() += 1;
        }
    }

    /// How long node `generation` was paused between `from` and `to`.
    pub(crate) fn paused_within(&self, generation: u32, from: i64, to: i64) -> i64 {
        self.lock()
            .pauses
            .iter()
            .filter(|(g, _, _)| *g == generation)
            .map(|&(_, a, b)| (b.min(to) - a.max(from)).max(0))
            .sum()
    }

    pub(crate) fn allowance(&self) -> BTreeMap<String, usize> {
        self.lock().allowance.clone()
    }

    pub(crate) fn steps(&self) -> BTreeMap<String, StepRuns> {
        self.lock().steps.clone()
    }

    pub(crate) fn sleeps(&self) -> BTreeMap<String, SleepRuns> {
        self.lock().sleeps.clone()
    }

    pub(crate) fn step_started(&self, name: &str, instruction: usize, generation: u32) {
        self.trace(format!("g{generation} effect {name} starts"));
        // The simulation holds only a paused node's store calls: a step
        // that starts there is one in flight when its node stopped.
        let paused = self.node(generation).1 == NodeState::Paused;
        let mut s = self.lock();
        let runs = s.steps.entry(name.to_owned()).or_default();
        runs.instruction = instruction;
        runs.started.push(generation);
        if paused {
            *s.allowance.entry(name.to_owned()).or_default() += 1;
        }
    }

    /// A step's closure completes on node `generation`: the node must hold
    /// the task's lease, as the store has it now.
    pub(crate) fn step_completed(&self, name: &str, generation: u32) {
        self.trace(format!("g{generation} effect {name} completes"));
        let (instance, _) = self.node(generation);
        let task = self.task();
        let now = self.clock.now_ms();
        let held = self.lock().fences.get(&generation).copied();
        let record = self.memory.get(&task).now_or_never();
        if let Some(Ok(Some(record))) = &record {
            if let Some(fence) = held
                && record.fence != fence
            {
                self.violation(format!(
                    "step `{name}` completed on {instance} (g{generation}), which had lost its claim: \
                     it holds fence {fence}, the task is at fence {} (now {now})",
                    record.fence
                ));
            } else if !record.status.is_terminal()
                && let Some(lease) = &record.lease
                && (lease.owner != instance || lease.expires_at_ms <= now)
            {
                self.violation(format!(
                    "step `{name}` completed on {instance} (g{generation}), which had lost its lease: \
                     the store has it held by {} until {} (now {now})",
                    lease.owner, lease.expires_at_ms
                ));
            }
        }
        self.lock()
            .steps
            .entry(name.to_owned())
            .or_default()
            .completed
            .push(generation);
    }

    pub(crate) fn sleep_reached(&self, name: &str, span_ms: i64, generation: u32) {
        let now = self.clock.now_ms();
        self.trace(format!("g{generation} sleep {name} reached"));
        let mut s = self.lock();
        let runs = s.sleeps.entry(name.to_owned()).or_default();
        runs.span_ms = span_ms;
        runs.reached.push((generation, now));
    }

    pub(crate) fn sleep_returned(&self, name: &str, generation: u32) {
        let now = self.clock.now_ms();
        self.trace(format!("g{generation} sleep {name} returns"));
        self.lock()
            .sleeps
            .entry(name.to_owned())
            .or_default()
            .returned
            .push((generation, now));
    }

    /// The latency and the fault for the next call.
    fn draw_call(&self, what: &str, generation: u32) -> (Duration, Option<Fault>) {
        let mut s = self.lock();
        let every = s.plan.latency;
        let latency = if every > 0 && s.rng.u32(..every) == 0 {
            Duration::from_millis(s.rng.u64(1..=40))
        } else {
            Duration::ZERO
        };
        if !s.armed {
            return (latency, None);
        }
        s.calls += 1;
        let n = s.calls;
        let mut fault = s
            .plan
            .faults
            .iter()
            .find(|(at, _)| *at == n)
            .map(|(_, f)| *f);
        if let Some(Fault::Pause(ms)) = fault {
            s.pause_next_write = Some(ms);
            fault = None;
        }
        let write = matches!(
            what,
            "append" | "transition" | "transition_journaled" | "claim" | "answer" | "time_out"
        );
        if write
            && fault.is_none()
            && let Some(ms) = s.pause_next_write.take()
        {
            fault = Some(Fault::Pause(ms));
        }
        if let Some(fault) = fault {
            let line = format!("call {n} (g{generation} {what}): {fault:?}");
            s.struck.push(line);
        }
        (latency, fault)
    }
}

/// The run's memory store as one node sees it.
#[derive(Debug)]
pub(crate) struct SimStore {
    pub(crate) sim: Arc<Sim>,
    pub(crate) generation: u32,
}

fn injected(what: &str) -> mcp_tasks_runtime::Error {
    StoreError::new(format!("injected fault: could not {what}")).into()
}

impl SimStore {
    fn inner(&self) -> &MemoryStore {
        &self.sim.memory
    }

    async fn call<T>(
        &self,
        what: &str,
        detail: String,
        call: impl Future<Output = Result<T>>,
        show: impl Fn(&T) -> String,
    ) -> Result<T> {
        let g = self.generation;
        self.sim.gate(g).await;
        let (latency, fault) = self.sim.draw_call(what, g);
        if !latency.is_zero() {
            self.sim.lock().slow += 1;
            tokio::time::sleep(latency).await;
            self.sim.lock().slow -= 1;
            self.sim.gate(g).await;
        }
        let shown = |r: &Result<T>| match r {
            Ok(v) => show(v),
            Err(e) => format!("error {e}"),
        };
        if let Some(Fault::Pause(ms)) = fault {
            self.sim
                .trace(format!("g{g} {what}({detail}) PAUSE {ms} ms"));
            self.sim.pause(g, i64::from(ms));
            self.sim.gate(g).await;
        }
        match fault {
            None | Some(Fault::Pause(_)) => {
                let r = call.await;
                self.sim
                    .trace(format!("g{g} {what}({detail}) -> {}", shown(&r)));
                r
            }
            Some(Fault::Fail(landing)) => {
                if landing == Landing::After {
                    let r = call.await;
                    self.sim.trace(format!(
                        "g{g} {what}({detail}) -> {}, answer lost: FAULT",
                        shown(&r)
                    ));
                } else {
                    self.sim.trace(format!("g{g} {what}({detail}) FAULT"));
                }
                Err(injected(what))
            }
            Some(Fault::Crash(landing)) => {
                if landing == Landing::After {
                    let r = call.await;
                    self.sim
                        .trace(format!("g{g} {what}({detail}) -> {}, CRASH", shown(&r)));
                } else {
                    self.sim.trace(format!("g{g} {what}({detail}) CRASH"));
                }
                self.sim.set_node(g, NodeState::Dead);
                self.sim.allow_in_flight(g);
                std::future::pending().await
            }
        }
    }
}

fn rec(r: &Option<TaskRecord>) -> String {
    match r {
        None => "none".into(),
        Some(r) => brief(r),
    }
}

/// A record as the trace shows it.
pub(crate) fn brief(r: &TaskRecord) -> String {
    format!(
        "{} v{} f{} {:?} wake {:?} pending {} cancel {}",
        r.status.as_str(),
        r.version,
        r.fence,
        r.lease.as_ref().map(|l| (&l.owner, l.expires_at_ms)),
        r.wake_at_ms,
        r.pending.len(),
        r.cancel_requested
    )
}

fn entry(e: &JournalEntry) -> String {
    format!("{} {} {}={}", e.position, e.kind.as_str(), e.name, e.value)
}

#[async_trait]
impl Store for SimStore {
    async fn create(&self, task: TaskRecord) -> Result<()> {
        let fence = task.lease.is_some().then_some(task.fence);
        let created = self
            .call("create", String::new(), self.inner().create(task), |()| {
                "ok".into()
            })
            .await;
        if let (Ok(()), Some(fence)) = (&created, fence) {
            self.sim.lock().fences.insert(self.generation, fence);
        }
        created
    }

    async fn create_with_journal(
        &self,
        task: TaskRecord,
        journal: Vec<JournalEntry>,
    ) -> Result<()> {
        self.call(
            "create_with_journal",
            String::new(),
            self.inner().create_with_journal(task, journal),
            |()| "ok".into(),
        )
        .await
    }

    async fn get(&self, id: &str) -> Result<Option<TaskRecord>> {
        self.call("get", String::new(), self.inner().get(id), rec)
            .await
    }

    async fn versions(&self, ids: &[String]) -> Result<Vec<(String, u64)>> {
        self.call(
            "versions",
            ids.len().to_string(),
            self.inner().versions(ids),
            |v| format!("{:?}", v.iter().map(|(_, v)| v).collect::<Vec<_>>()),
        )
        .await
    }

    async fn journal(&self, id: &str) -> Result<Vec<JournalEntry>> {
        self.call("journal", String::new(), self.inner().journal(id), |j| {
            format!("{} entries", j.len())
        })
        .await
    }

    async fn append(&self, id: &str, entry_: JournalEntry, fence: u64) -> Result<Appended> {
        let detail = format!("{} fence {fence}", entry(&entry_));
        let sim = self.sim.clone();
        let id_ = id.to_owned();
        let checked = async move {
            // The fence the store holds as the append is made: an append
            // with another must not land.
            let held = sim
                .memory
                .get(&id_)
                .now_or_never()
                .and_then(|r| r.ok().flatten())
                .map(|r| r.fence);
            let r = sim.memory.append(&id_, entry_, fence).await;
            if let (Some(held), Ok(Appended::Recorded | Appended::Kept(_))) = (held, &r)
                && held != fence
            {
                sim.violation(format!(
                    "a journal append with fence {fence} landed while the store's fence was {held}"
                ));
            }
            r
        };
        self.call("append", detail, checked, |a| match a {
            Appended::Recorded => "recorded".into(),
            Appended::Kept(e) => format!("kept {}", entry(e)),
            Appended::Fenced => "fenced".into(),
            other => format!("{other:?}"),
        })
        .await
    }

    async fn transition(
        &self,
        id: &str,
        change: Transition,
        now_ms: i64,
        fence: Option<u64>,
    ) -> Result<Option<TaskRecord>> {
        let detail = format!("{} fence {fence:?}", transition_name(&change));
        self.call(
            "transition",
            detail,
            self.inner().transition(id, change, now_ms, fence),
            rec,
        )
        .await
    }

    async fn transition_journaled(
        &self,
        id: &str,
        entries: Vec<JournalEntry>,
        change: Transition,
        now_ms: i64,
        fence: u64,
    ) -> Result<Option<TaskRecord>> {
        let detail = format!(
            "{} [{}] fence {fence}",
            transition_name(&change),
            entries.iter().map(entry).collect::<Vec<_>>().join(", ")
        );
        self.call(
            "transition_journaled",
            detail,
            self.inner()
                .transition_journaled(id, entries, change, now_ms, fence),
            rec,
        )
        .await
    }

    async fn claim(
        &self,
        id: &str,
        owner: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<Option<(TaskRecord, Vec<JournalEntry>)>> {
        self.call(
            "claim",
            format!("{owner} until {until_ms}"),
            self.inner().claim(id, owner, now_ms, until_ms),
            |c| match c {
                None => "refused".into(),
                Some((r, j)) => format!("{} journal {}", brief(r), j.len()),
            },
        )
        .await
        .inspect(|claimed| {
            if let Some((r, _)) = claimed {
                self.sim.lock().fences.insert(self.generation, r.fence);
            }
        })
    }

    async fn renew(&self, owner: &str, now_ms: i64, until_ms: i64) -> Result<Vec<(String, u64)>> {
        self.call(
            "renew",
            format!("{owner} until {until_ms}"),
            self.inner().renew(owner, now_ms, until_ms),
            |v| format!("{:?}", v.iter().map(|(_, f)| f).collect::<Vec<_>>()),
        )
        .await
    }

    async fn release(&self, owner: &str) -> Result<()> {
        self.call(
            "release",
            owner.to_owned(),
            self.inner().release(owner),
            |()| "ok".into(),
        )
        .await
    }

    async fn claimable(&self, now_ms: i64, limit: usize) -> Result<Vec<String>> {
        self.call(
            "claimable",
            String::new(),
            self.inner().claimable(now_ms, limit),
            |v| v.len().to_string(),
        )
        .await
    }

    async fn answer(
        &self,
        id: &str,
        responses: Map<String, Value>,
        now_ms: i64,
    ) -> Result<Option<Answered>> {
        let keys: Vec<&String> = responses.keys().collect();
        let detail = format!("{keys:?}");
        self.call(
            "answer",
            detail,
            self.inner().answer(id, responses, now_ms),
            |a| format!("{}", a.is_some()),
        )
        .await
    }

    async fn time_out(&self, id: &str, now_ms: i64) -> Result<Option<Answered>> {
        self.call(
            "time_out",
            String::new(),
            self.inner().time_out(id, now_ms),
            |a| format!("{}", a.is_some()),
        )
        .await
    }

    async fn overdue(&self, now_ms: i64, limit: usize) -> Result<Vec<String>> {
        self.call(
            "overdue",
            String::new(),
            self.inner().overdue(now_ms, limit),
            |v| v.len().to_string(),
        )
        .await
    }

    async fn unfinished(&self) -> Result<Vec<TaskRecord>> {
        self.call(
            "unfinished",
            String::new(),
            self.inner().unfinished(),
            |v| v.len().to_string(),
        )
        .await
    }

    async fn purge_expired(&self, now_ms: i64, limit: usize) -> Result<Vec<String>> {
        self.call(
            "purge_expired",
            String::new(),
            self.inner().purge_expired(now_ms, limit),
            |v| v.len().to_string(),
        )
        .await
    }

    async fn next_expiry(&self) -> Result<Option<i64>> {
        self.call(
            "next_expiry",
            String::new(),
            self.inner().next_expiry(),
            |v| format!("{v:?}"),
        )
        .await
    }

    async fn list(
        &self,
        principal: Option<&str>,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>> {
        self.call(
            "list",
            String::new(),
            self.inner().list(principal, after, limit),
            |v| v.len().to_string(),
        )
        .await
    }

    async fn list_all(&self, after: Option<&ListCursor>, limit: usize) -> Result<Vec<TaskRecord>> {
        self.call(
            "list_all",
            String::new(),
            self.inner().list_all(after, limit),
            |v| v.len().to_string(),
        )
        .await
    }

    async fn count_unfinished(&self, principal: Option<&str>) -> Result<usize> {
        self.call(
            "count_unfinished",
            String::new(),
            self.inner().count_unfinished(principal),
            |v| v.to_string(),
        )
        .await
    }

    fn front_door(self: Arc<Self>) -> Option<Arc<dyn FrontDoorStore>> {
        // The memory store's front door (sessions, the create quota) is
        // not what the simulation tests: it is left unfaulted.
        self.sim.memory.clone().front_door()
    }
}

fn transition_name(t: &Transition) -> String {
    let s = format!("{t:?}");
    s.split(['(', ' ', '{'])
        .next()
        .unwrap_or_default()
        .to_owned()
}
