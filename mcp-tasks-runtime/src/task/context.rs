//! A run's context, the replay cursor: what it starts from ([`Run`]), where
//! its live values go ([`Recorder`]), and the journal slot it hands each
//! step ([`Slot`]). When and why the run must stop (its standing:
//! cancelled, lost) is in `standing`; how the run is driven and ends in
//! `drive`; an inline call becoming its task mid-run, and what the run
//! holds of its task, in `becoming`; the replay check's mode in `check`,
//! and the guard of a step dropped unfinished in `unfinished`.

use std::{
    collections::{BTreeMap, HashSet},
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
};

use futures::{future::BoxFuture, task::AtomicWaker};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio::sync::{Notify, watch};

use crate::{
    error::RpcError,
    input::InputCapabilities,
    journal::{JournalEntry, PendingInput, StepKind},
    store::TaskRecord,
};

use super::{becoming::Held, info::TaskInfo};

/// What became of a live step's value.
#[derive(Debug)]
pub(crate) enum Recorded {
    /// It is journaled.
    Written,
    /// The position already held this entry: the run goes on with it.
    Kept(JournalEntry),
    /// The run no longer holds the task (another instance claimed it, or
    /// the store could not be reached for as long as the lease lasts): it
    /// stops, writing nothing more.
    Lost,
}

/// Where live steps record their values.
pub(crate) trait Recorder: Send + Sync + 'static {
    /// Records `entry` durably (retrying a failing store).
    fn record(&self, task_id: &str, entry: JournalEntry) -> BoxFuture<'static, Recorded>;
    /// Sets the status message (ordered, best effort).
    fn status(&self, task_id: &str, message: String);
    /// Applies `change` as the run's holder (retrying a failing store):
    /// the task as stored after it, or `None` when it was refused or could
    /// not be stored.
    fn transition(
        &self,
        task_id: &str,
        change: crate::store::Transition,
    ) -> BoxFuture<'static, Option<TaskRecord>>;
}

/// What a run's context starts from.
pub(crate) struct Run {
    /// The task's id (empty for an inline call).
    pub(crate) task_id: String,
    /// What the task recorded before.
    pub(crate) journal: Vec<JournalEntry>,
    /// What the caller can answer.
    pub(crate) caps: InputCapabilities,
    /// Where live values go (`None`: an inline call, recorded in memory).
    pub(crate) recorder: Option<Arc<dyn Recorder>>,
    /// The task as stored, kept current (`None`: an inline call): the one
    /// source of cancellation and of the task's end.
    pub(crate) record: Option<watch::Receiver<TaskRecord>>,
    /// Inline: the answers that came with the call, by key.
    pub(crate) answers: Map<String, Value>,
    /// The claim the run holds: the instance and the fence it claimed with
    /// (`None`: an inline call).
    pub(crate) holder: Option<(String, u64)>,
    /// Set when the engine lets the task go: the run stops at its next
    /// step (`None`: an inline call).
    pub(crate) let_go: Option<Arc<AtomicBool>>,
    /// What the run's code may read about its task.
    pub(crate) info: TaskInfo,
    /// The engine's clock.
    pub(crate) clock: Arc<crate::clock::Clock>,
    /// How many entries the journal may hold: a new step at this position
    /// or later fails the run
    /// ([`Limits::max_journal_entries`](crate::engine::Limits::max_journal_entries)).
    pub(crate) max_entries: u32,
    /// Durable sleeps of at most this long (ms) wait in the run, their
    /// deadline journaled first; longer ones park the task
    /// ([`EngineBuilder::sleep_in_process_up_to`](crate::engine::EngineBuilder::sleep_in_process_up_to)).
    pub(crate) sleep_in_process_ms: i64,
}

/// The journal position a step takes, and what the run holds there.
pub(super) enum Slot {
    Outside,
    /// Inside a checkpoint's closure: steps run live, covered by it.
    Nested,
    Live(Live),
    Replay(Replay),
    Diverged,
}

impl Slot {
    /// The run and position of a step journaled on its own.
    pub(super) fn at(&self) -> Option<(&Arc<TaskCtx>, u32)> {
        match self {
            Slot::Live(step) => Some((&step.ctx, step.position)),
            Slot::Replay(step) => Some((&step.ctx, step.position)),
            Slot::Outside | Slot::Nested | Slot::Diverged => None,
        }
    }
}

/// A step the run reaches for the first time, at `position`.
pub(super) struct Live {
    pub(super) ctx: Arc<TaskCtx>,
    pub(super) position: u32,
    pub(super) name: String,
}

/// A step the journal holds at `position`: its recorded value.
pub(super) struct Replay {
    pub(super) ctx: Arc<TaskCtx>,
    pub(super) position: u32,
    pub(super) value: Value,
}

/// A durable timer a run waits on.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timer {
    /// The journal position of the step waiting.
    pub(super) position: u32,
    /// When it fires, Unix ms.
    pub(super) at: i64,
    /// The `select` it is a branch of.
    pub(super) race: Option<u32>,
}

/// The run's own flags, which its standing reads.
#[derive(Default)]
pub(super) struct Flags {
    /// The fn ended itself cancelled ([`ToolError::cancelled`](crate::ToolError::cancelled)).
    pub(super) withdrawn: AtomicBool,
    /// The run has stopped and its fn is being dropped.
    pub(super) exiting: AtomicBool,
    /// A write was refused: the run no longer holds the task.
    pub(super) lost: AtomicBool,
    /// A step in flight can never finish (its value may not be recorded):
    /// the run stops without waiting for the steps in flight.
    pub(super) halted: AtomicBool,
}

pub(crate) struct TaskCtx {
    /// What the run started from (its journal and answers moved to its
    /// state).
    pub(crate) run: Run,
    pub(super) flags: Flags,
    /// Set once an inline call became a task mid-run: what it holds now.
    pub(super) became: std::sync::OnceLock<Held>,
    /// Told when `became` is set.
    pub(super) bound: Notify,
    /// Whether the inline call may become a task (it runs in a window), and
    /// told when it must become one now.
    pub(crate) hurry: Option<Notify>,
    /// A replay check: no step runs live, and the run stops where one would.
    pub(super) check: bool,
    pub(super) waker: AtomicWaker,
    pub(super) state: Mutex<State>,
}

debug_fields!(TaskCtx |ctx| task_id: ctx.task_id());

#[derive(Default)]
pub(super) struct State {
    pub(super) next: u32,
    pub(super) journal: BTreeMap<u32, JournalEntry>,
    /// Questions waiting for an answer.
    pub(super) pending: Vec<PendingInput>,
    /// The durable timers waiting.
    pub(super) timers: Vec<Timer>,
    /// Entries of durable sleeps not yet stored: they are journaled with
    /// the write that puts the task to sleep (see [`TaskCtx::stage_sleep`]).
    pub(super) staged: Vec<JournalEntry>,
    /// Why the run must fail, once it must (the first reason wins).
    pub(super) failed: Option<RpcError>,
    pub(super) inflight: usize,
    /// Questions asked in flight and waiting ([`ask_in_flight`](crate::durable::ask_in_flight)).
    pub(super) asking: usize,
    /// Questions asked in flight by this run so far (their keys count them).
    pub(super) asked: u32,
    /// Keys handed out in this run (replayed questions included).
    pub(super) keys: HashSet<String>,
    /// Inline mode: the answers that came with the call, by key.
    pub(super) answers: Map<String, Value>,
    /// An inline call becoming a task: its journal so far is being stored,
    /// and a step's value waits for the task to record it there.
    pub(super) moving: bool,
    /// A replay check: the position where a step would have run live.
    pub(super) reached: Option<u32>,
    /// A replay check: the position, the entry recorded there, and the step
    /// the code asked for instead, when they differ.
    pub(super) diverged: Option<(u32, JournalEntry, StepKind, String)>,
}

impl State {
    /// The earliest timer, if any.
    pub(super) fn wake_at(&self) -> Option<i64> {
        self.timers.iter().map(|t| t.at).min()
    }
}

impl TaskCtx {
    pub(crate) fn new(run: Run) -> Arc<Self> {
        Self::with_mode(run, false, false)
    }

    /// The context of an inline call that becomes a task if it runs past
    /// its window ([`became_task`](Self::became_task)).
    pub(crate) fn in_window(run: Run) -> Arc<Self> {
        Self::with_mode(run, false, true)
    }

    pub(super) fn with_mode(mut run: Run, check: bool, movable: bool) -> Arc<Self> {
        let journal = std::mem::take(&mut run.journal);
        let journal = journal.into_iter().map(|e| (e.position, e)).collect();
        let answers = std::mem::take(&mut run.answers);
        Arc::new(Self {
            flags: Flags::default(),
            became: std::sync::OnceLock::new(),
            bound: Notify::new(),
            hurry: movable.then(Notify::new),
            check,
            waker: AtomicWaker::new(),
            state: Mutex::new(State {
                journal,
                answers,
                ..State::default()
            }),
            run,
        })
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the run is still replaying: recorded steps lie ahead of it.
    pub(super) fn replaying(&self) -> bool {
        let s = self.lock();
        s.journal.range(s.next..).next().is_some()
    }

    /// The key of the question at `position`: `preferred` (or the kind and
    /// position, such as `ask-3`), with the position appended when the task
    /// used it before, and then a counter while that is taken too: a key is
    /// never given twice in a task's life, whether the key it would take was
    /// generated or named by the tool (tasks ext. § Input Requests: keys). The replay claims the keys of
    /// the questions before this one in the same order, so a question keeps
    /// its key across runs.
    pub(super) fn claim_key(
        &self,
        kind: StepKind,
        preferred: Option<&str>,
        position: u32,
    ) -> String {
        let mut s = self.lock();
        let base = preferred.map_or_else(|| format!("{}-{position}", kind.as_str()), str::to_owned);
        let mut key = base.clone();
        if s.keys.contains(&key) {
            key = format!("{base}-{position}");
        }
        let mut n = 2u32;
        while s.keys.contains(&key) {
            key = format!("{base}-{position}-{n}");
            n = n.saturating_add(1);
        }
        s.keys.insert(key.clone());
        key
    }

    /// A key for a question asked in flight by the run holding `fence`:
    /// `ask-f3.1` is the first such question of the third claim (keys of
    /// questions the fn parks on never hold a dot unless the fn names them
    /// so; a key taken already moves the count on).
    pub(super) fn in_flight_key(&self, kind: StepKind, fence: u64) -> String {
        let mut s = self.lock();
        loop {
            s.asked = s.asked.saturating_add(1);
            let key = format!("{}-f{fence}.{}", kind.as_str(), s.asked);
            if s.keys.insert(key.clone()) {
                return key;
            }
        }
    }

    /// Takes the inline answer for `key`, if one came with the call (the
    /// question checks it: one that does not fit is asked again).
    pub(super) fn take_inline_answer(&self, key: &str) -> Option<Value> {
        self.lock().answers.remove(key)
    }

    /// Marks the run as ended `cancelled` by its own code.
    pub(crate) fn withdraw(&self) {
        self.flags.withdrawn.store(true, Ordering::SeqCst);
    }

    /// The whole journal: what the run started from and what it recorded
    /// (for the inline mode's `requestState`).
    pub(crate) fn take_journal(&self) -> Vec<JournalEntry> {
        std::mem::take(&mut self.lock().journal)
            .into_values()
            .collect()
    }

    /// Parks the run on `question` once no step is in flight.
    pub(super) fn park(&self, question: PendingInput) {
        self.lock().pending.push(question);
        self.waker.wake();
    }

    /// Puts the run to sleep until `at` (the earliest of its timers wins),
    /// for the step at `position`, a branch of the `select` at `race` if any.
    pub(super) fn sleep_until(&self, position: u32, at: i64, race: Option<u32>) {
        self.lock().timers.push(Timer { position, at, race });
        self.waker.wake();
    }

    /// Takes back what the step at `position` left for the run's end (its
    /// question, its timer, its staged entry): a [`select`](crate::durable::select)
    /// another branch of which won is dropping it.
    pub(super) fn take_back(&self, position: u32) {
        let mut s = self.lock();
        s.pending.retain(|p| p.position != position);
        s.timers.retain(|t| t.position != position);
        s.staged.retain(|e| e.position != position);
        drop(s);
        self.waker.wake();
    }

    /// Puts the run to sleep until `entry`'s deadline `at` without storing
    /// `entry` first: the write that ends the run (its sleep, or its park
    /// when a question came too) journals it, in one write with the
    /// transition. Declines (`false`) where the entry must be stored on its
    /// own: in an inline run, or while another step of the run is being
    /// recorded (its entry must not land without the earlier one).
    ///
    /// A run that stops any other way drops the entry, so a replay runs the
    /// sleep again from its start: nothing the fn did after the sleep began
    /// can have been recorded, as no other step may start once the run is
    /// suspending.
    pub(super) fn stage_sleep(&self, entry: JournalEntry, at: i64, race: Option<u32>) -> bool {
        let mut s = self.lock();
        if self.recorder().is_none() || s.inflight > 0 || s.failed.is_some() {
            return false;
        }
        let position = entry.position;
        s.staged.push(entry);
        s.timers.push(Timer { position, at, race });
        drop(s);
        self.waker.wake();
        true
    }

    /// The entries [`stage_sleep`](Self::stage_sleep) left for the run's
    /// last write.
    pub(crate) fn take_staged(&self) -> Vec<JournalEntry> {
        std::mem::take(&mut self.lock().staged)
    }

    /// Fails the run (the first reason wins).
    pub(super) fn fail(&self, error: RpcError) {
        self.lock().failed.get_or_insert(error);
        self.waker.wake();
    }

    /// Stores the entries of durable sleeps that [`stage_sleep`](Self::stage_sleep)
    /// kept for the run's last write, now: a step about to start beside
    /// them must not land in the journal before them. When the run cannot
    /// store them (it lost the task, or the position holds another step),
    /// this never returns.
    pub(super) async fn flush_staged(&self) {
        let staged = std::mem::take(&mut self.lock().staged);
        for e in staged {
            self.record_value(e.position, e.kind, e.name, e.value).await;
        }
    }

    /// Takes the next position and looks it up in the journal.
    pub(super) fn slot(self: &Arc<Self>, kind: StepKind, name: String) -> Slot {
        let mut s = self.lock();
        let position = s.next;
        s.next += 1;
        match s.journal.get(&position) {
            None => self.unrecorded(s, position, kind, name),
            Some(e) if e.kind == kind && e.name == name => {
                crate::metrics::replayed();
                Slot::Replay(Replay {
                    ctx: self.clone(),
                    position,
                    value: e.value.clone(),
                })
            }
            Some(e) => {
                let error = divergence(position, e, kind, &name);
                if self.check {
                    let recorded = e.clone();
                    s.diverged.get_or_insert((position, recorded, kind, name));
                }
                drop(s);
                self.fail(error);
                Slot::Diverged
            }
        }
    }

    /// [`slot`](Self::slot) for a [`patched`](crate::durable::patched) marker: the
    /// next position, unless the journal holds another step there (the
    /// run replays a journal recorded before the marker existed). Then it
    /// returns `None` and the position stays for that step.
    pub(super) fn marker_slot(self: &Arc<Self>, name: String) -> Option<Slot> {
        let mut s = self.lock();
        let position = s.next;
        let slot = match s.journal.get(&position) {
            None => {
                s.next += 1;
                return Some(self.unrecorded(s, position, StepKind::Patch, name));
            }
            Some(e) if e.kind == StepKind::Patch && e.name == name => {
                crate::metrics::replayed();
                Slot::Replay(Replay {
                    ctx: self.clone(),
                    position,
                    value: e.value.clone(),
                })
            }
            Some(_) => return None,
        };
        s.next += 1;
        Some(slot)
    }

    /// The slot of a step at `position`, which the journal has no entry
    /// for (`s` is the state, locked, its `next` already moved past it): a
    /// replay check stops there, a journal at its cap fails the run, and
    /// otherwise the step runs live.
    fn unrecorded(
        self: &Arc<Self>,
        mut s: MutexGuard<'_, State>,
        position: u32,
        kind: StepKind,
        name: String,
    ) -> Slot {
        if self.check {
            s.reached.get_or_insert(position);
            drop(s);
            self.waker.wake();
            return Slot::Diverged;
        }
        drop(s);
        if position >= self.run.max_entries {
            self.fail(journal_full(position, kind, &name, self.run.max_entries));
            return Slot::Diverged;
        }
        Slot::Live(Live {
            ctx: self.clone(),
            position,
            name,
        })
    }

    async fn record_entry(&self, entry: JournalEntry) -> Recorded {
        loop {
            {
                let mut s = self.lock();
                if self.recorder().is_none() && !s.moving {
                    // Inline: the journal travels back to the caller.
                    s.journal.insert(entry.position, entry);
                    return Recorded::Written;
                }
            }
            if let Some(r) = self.recorder() {
                return r.record(self.task_id(), entry).await;
            }
            // Becoming a task: the value is the task's to record.
            self.became().await;
        }
    }

    /// Records a live step's value and returns the value the run goes on
    /// with: its own, or the one already stored at the position. When the
    /// run must stop instead (the stored entry is another step, or the run
    /// lost the task), it never returns.
    pub(super) async fn record_value(
        &self,
        position: u32,
        kind: StepKind,
        name: String,
        value: Value,
    ) -> Value {
        let entry = JournalEntry {
            position,
            kind,
            name,
            value,
        };
        let (kind, name, value) = (entry.kind, entry.name.clone(), entry.value.clone());
        // A run that must fail (a step dropped unfinished, say) journals
        // nothing more: its verdict does not depend on what else got done.
        if self.lock().failed.is_some() {
            self.halt().await
        }
        match self.record_entry(entry).await {
            Recorded::Written => value,
            Recorded::Kept(kept) if kept.kind == kind && kept.name == name => kept.value,
            Recorded::Kept(kept) => {
                self.fail(divergence(position, &kept, kind, &name));
                self.halt().await
            }
            Recorded::Lost => {
                self.flags.lost.store(true, Ordering::SeqCst);
                self.waker.wake();
                forever().await
            }
        }
    }

    /// Never returns: the step calling it cannot finish, and the run stops
    /// without waiting for it (or for any other step in flight).
    async fn halt(&self) -> ! {
        self.flags.halted.store(true, Ordering::SeqCst);
        self.waker.wake();
        forever().await
    }

    pub(super) fn decode_or_fail<T: DeserializeOwned>(
        &self,
        value: Value,
        what: &str,
    ) -> Option<T> {
        match serde_json::from_value(value) {
            Ok(v) => Some(v),
            Err(e) => {
                self.fail(RpcError::internal(format!(
                    "the journaled value of {what} no longer decodes: {e}"
                )));
                None
            }
        }
    }
}

pub(super) async fn forever() -> ! {
    std::future::pending::<()>().await;
    unreachable!("a pending future never completes")
}

/// Counts a live step as in flight, so the runner never drops the fn mid-step.
pub(super) struct InFlight(Arc<TaskCtx>);

impl InFlight {
    pub(super) fn enter(ctx: &Arc<TaskCtx>) -> Self {
        ctx.lock().inflight += 1;
        Self(ctx.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.lock().inflight -= 1;
        self.0.waker.wake();
    }
}

/// The error of a new step that the journal has no room for
/// ([`Limits::max_journal_entries`](crate::engine::Limits::max_journal_entries)).
fn journal_full(position: u32, kind: StepKind, name: &str, max: u32) -> RpcError {
    RpcError::internal(format!(
        "the journal is full: {} `{name}` would be entry {} of a journal capped at {max} \
         entries (max_journal_entries); split the work into several tasks, or checkpoint \
         items in batches",
        kind.as_str(),
        u64::from(position) + 1,
    ))
    .with_data(json!({
        "limit": "max_journal_entries",
        "max": max,
        "position": position,
        "step": name,
    }))
}

/// The error of a replay that meets another step at a recorded position.
fn divergence(position: u32, recorded: &JournalEntry, kind: StepKind, name: &str) -> RpcError {
    crate::metrics::nondeterminism();
    RpcError::internal(format!(
        "non-deterministic replay at journal position {position}: expected {} `{}`, found {} `{name}`",
        recorded.kind.as_str(),
        recorded.name,
        kind.as_str(),
    ))
    .with_data(json!({
        "position": position,
        "expected": {"kind": recorded.kind.as_str(), "name": recorded.name},
        "found": {"kind": kind.as_str(), "name": name},
    }))
}
