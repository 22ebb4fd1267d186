//! The replay cursor: a run's context, which hands each step its journal
//! position, records live values, and says when and why the run must stop.

use std::{
    collections::{BTreeMap, HashSet},
    fmt,
    future::{Future, poll_fn},
    panic::AssertUnwindSafe,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    task::Poll,
};

use futures::{FutureExt, future::BoxFuture, task::AtomicWaker};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use crate::{
    error::RpcError,
    input::InputCapabilities,
    journal::{JournalEntry, PendingInput, StepKind},
    store::TaskRecord,
    tool::{ToolFuture, ToolOutcome},
};

use super::{
    info::TaskInfo,
    scope::{Slot, in_scope, race, withdrawing},
};

/// A durable timer a run waits on.
#[derive(Debug, Clone, Copy)]
struct Timer {
    /// The journal position of the step waiting.
    position: u32,
    /// When it fires, Unix ms.
    at: i64,
    /// The `select` it is a branch of.
    race: Option<u32>,
}

/// How a run ended: the fn returned, or it stopped early and why.
#[derive(Debug)]
pub(crate) enum Exit {
    /// The fn returned.
    Done(ToolOutcome),
    /// Waiting for answers to these questions.
    Park(Vec<PendingInput>),
    /// Asleep until this time (Unix ms).
    Sleep(i64),
    /// The run must end `failed` with this error.
    Fail(RpcError),
    /// A cancel was requested.
    Cancelled,
    /// The task ended elsewhere (cancelled while queued, expired).
    Ended,
    /// Stopped at a step boundary to continue as a task.
    Handoff,
    /// The run no longer holds the task: it stops without a word.
    Lost,
    /// A replay check reached the end of the journal: the next step would
    /// run live (see [`TaskCtx::check`]).
    Replayed,
}

impl Exit {
    /// How the run ended, in a word (for traces).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Done(Ok(_)) => "done",
            Self::Done(Err(_)) | Self::Fail(_) => "failed",
            Self::Park(_) => "parked",
            Self::Sleep(_) => "asleep",
            Self::Cancelled => "cancelled",
            Self::Ended => "ended elsewhere",
            Self::Handoff => "handed off",
            Self::Lost => "lost its lease",
            Self::Replayed => "replayed its journal",
        }
    }
}

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
    /// The task as stored, kept current (`None`: an inline call).
    pub(crate) record: Option<watch::Receiver<TaskRecord>>,
    /// Inline: the answers that came with the call, by key.
    pub(crate) answers: Map<String, Value>,
    /// The claim the run holds: the instance and the fence it claimed with
    /// (`None`: an inline call).
    pub(crate) holder: Option<(String, u64)>,
    /// What the run's code may read about its task.
    pub(crate) info: TaskInfo,
    /// The engine's clock.
    pub(crate) clock: Arc<crate::id::Clock>,
}

pub(crate) struct TaskCtx {
    pub(crate) task_id: String,
    pub(super) recorder: Option<Arc<dyn Recorder>>,
    pub(super) caps: InputCapabilities,
    /// The one source of cancellation and of the task's end: its record.
    record: Option<watch::Receiver<TaskRecord>>,
    holder: Option<(String, u64)>,
    pub(super) info: TaskInfo,
    pub(super) clock: Arc<crate::id::Clock>,
    /// The fn ended itself cancelled ([`ToolError::cancelled`](crate::ToolError::cancelled)).
    withdrawn: AtomicBool,
    /// The run has stopped and its fn is being dropped.
    exiting: AtomicBool,
    /// A write was refused: the run no longer holds the task.
    lost: AtomicBool,
    /// A step in flight can never finish (its value may not be recorded):
    /// the run stops without waiting for the steps in flight.
    halted: AtomicBool,
    handoff: AtomicBool,
    /// A replay check: no step runs live, and the run stops where one would.
    check: bool,
    waker: AtomicWaker,
    state: Mutex<State>,
}

impl fmt::Debug for TaskCtx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskCtx")
            .field("task_id", &self.task_id)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    next: u32,
    journal: BTreeMap<u32, JournalEntry>,
    /// Questions waiting for an answer.
    pending: Vec<PendingInput>,
    /// The durable timers waiting.
    timers: Vec<Timer>,
    /// Entries of durable sleeps not yet stored: they are journaled with
    /// the write that puts the task to sleep (see [`TaskCtx::stage_sleep`]).
    staged: Vec<JournalEntry>,
    /// Why the run must fail, once it must (the first reason wins).
    failed: Option<RpcError>,
    inflight: usize,
    /// Keys handed out in this run (replayed questions included).
    keys: HashSet<String>,
    /// Inline mode: the answers that came with the call, by key.
    answers: Map<String, Value>,
    /// A replay check: the position where a step would have run live.
    reached: Option<u32>,
    /// A replay check: the position, the entry recorded there, and the step
    /// the code asked for instead, when they differ.
    diverged: Option<(u32, JournalEntry, StepKind, String)>,
}

impl State {
    /// The earliest timer, if any.
    fn wake_at(&self) -> Option<i64> {
        self.timers.iter().map(|t| t.at).min()
    }
}

impl TaskCtx {
    pub(crate) fn new(run: Run) -> Arc<Self> {
        Self::with_mode(run, false)
    }

    /// A context that replays `run`'s journal and runs nothing live: the
    /// first step past the journal stops the run ([`Exit::Replayed`]), and
    /// nothing is written anywhere. What the replay check runs a task in.
    pub(crate) fn check(run: Run) -> Arc<Self> {
        Self::with_mode(run, true)
    }

    fn with_mode(run: Run, check: bool) -> Arc<Self> {
        let journal = run.journal.into_iter().map(|e| (e.position, e)).collect();
        Arc::new(Self {
            task_id: run.task_id,
            recorder: run.recorder,
            caps: run.caps,
            record: run.record,
            holder: run.holder,
            info: run.info,
            clock: run.clock,
            withdrawn: AtomicBool::new(false),
            exiting: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            halted: AtomicBool::new(false),
            handoff: AtomicBool::new(false),
            check,
            waker: AtomicWaker::new(),
            state: Mutex::new(State {
                journal,
                answers: run.answers,
                ..State::default()
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Polls the fn's future inside this context until it returns or must
    /// stop. A panic in the fn ends it like an internal error.
    pub(crate) async fn drive(self: &Arc<Self>, fut: ToolFuture) -> Exit {
        let fut = in_scope(
            Some((self.clone(), None)),
            AssertUnwindSafe(fut).catch_unwind(),
        );
        let mut fut = std::pin::pin!(fut);
        let mut driving = std::pin::pin!(poll_fn(|cx| {
            self.waker.register(cx.waker());
            match fut.as_mut().poll(cx) {
                Poll::Ready(Ok(_)) if self.withdrawn.load(Ordering::SeqCst) => {
                    Poll::Ready(Exit::Cancelled)
                }
                Poll::Ready(Ok(outcome)) => Poll::Ready(Exit::Done(outcome)),
                Poll::Ready(Err(panic)) => Poll::Ready(Exit::Done(Err(panicked(&*panic)))),
                Poll::Pending => self.exit().map_or(Poll::Pending, Poll::Ready),
            }
        }));
        // A change to the stored task (a cancel request, its end) wakes the
        // run so that it can stop.
        let mut changes = self.record.clone();
        let exit = loop {
            tokio::select! {
                exit = &mut driving => break exit,
                changed = changed(changes.as_mut()) => if !changed { changes = None },
            }
        };
        // The fn's future is dropped on return: steps it leaves unfinished
        // are dropped by the runner, not abandoned by the fn.
        self.exiting.store(true, Ordering::SeqCst);
        exit
    }

    /// Whether the runner is dropping the fn (so an unfinished step being
    /// dropped is no mistake of the fn's).
    pub(super) fn exiting(&self) -> bool {
        self.exiting.load(Ordering::SeqCst)
    }

    /// Whether the run is still replaying: recorded steps lie ahead of it.
    pub(super) fn replaying(&self) -> bool {
        let s = self.lock();
        s.journal.range(s.next..).next().is_some()
    }

    /// Whether a cancel was requested (or the task ended elsewhere).
    pub(crate) fn cancel_requested(&self) -> bool {
        self.record.as_ref().is_some_and(|r| {
            let r = r.borrow();
            r.cancel_requested || r.status.is_terminal()
        })
    }

    fn ended(&self) -> bool {
        self.record
            .as_ref()
            .is_some_and(|r| r.borrow().status.is_terminal())
    }

    /// Whether the run no longer holds its task: a write was refused, or
    /// the record shows another claim (or none). A lease past its expiry is
    /// lost too, even before anyone says so: a process that was stopped for
    /// longer than its lease must not start another step.
    fn lost(&self) -> bool {
        self.gone(true)
    }

    /// Whether the run must stop even in the middle of a step: as
    /// [`lost`](Self::lost), except that a record with no lease (the engine
    /// draining, say) lets the step in flight finish: the lease still holds
    /// in the store. A lease renewed by the engine never lapses while the
    /// instance runs.
    fn usurped(&self) -> bool {
        self.gone(false)
    }

    /// A refused write, another claim, or a lapsed lease; `no_lease` is
    /// what a record without a lease counts as.
    fn gone(&self, no_lease: bool) -> bool {
        if self.lost.load(Ordering::SeqCst) {
            return true;
        }
        let (Some(record), Some((owner, fence))) = (&self.record, &self.holder) else {
            return false;
        };
        let r = record.borrow();
        !r.status.is_terminal()
            && (r.fence != *fence
                || r.lease.as_ref().map_or(no_lease, |l| {
                    l.owner != *owner || l.expires_at_ms <= self.clock.now_ms()
                }))
    }

    fn handing_off(&self) -> bool {
        self.handoff.load(Ordering::SeqCst)
    }

    /// What the runner should do now that the fn is pending: `None` to keep
    /// polling, or why it stops.
    fn exit(&self) -> Option<Exit> {
        let mut s = self.lock();
        // A run that no longer holds its task stops even mid-step: the step's
        // work must not go on, and its value could not be recorded.
        if self.usurped() {
            return Some(Exit::Lost);
        }
        if s.inflight > 0 && !self.halted.load(Ordering::SeqCst) {
            return None;
        }
        if self.ended() {
            return Some(Exit::Ended);
        }
        if self.lost() {
            return Some(Exit::Lost);
        }
        if let Some(e) = &s.failed {
            return Some(Exit::Fail(e.clone()));
        }
        if self.cancel_requested() {
            return Some(Exit::Cancelled);
        }
        if self.handing_off() {
            return Some(Exit::Handoff);
        }
        if s.reached.is_some() {
            return Some(Exit::Replayed);
        }
        // A question and a timer at once: park; the replay after the answer
        // sleeps again on the journaled deadline. A question raced against
        // a timer (in one `select`) times out when the timer fires, which
        // ends the race; the replay finds the timer's branch decided.
        if !s.pending.is_empty() {
            let mut pending = std::mem::take(&mut s.pending);
            for p in &mut pending {
                let raced = s
                    .timers
                    .iter()
                    .filter(|t| t.race.is_some() && t.race == p.race)
                    .map(|t| t.at)
                    .min();
                if let Some(at) = raced {
                    p.deadline_ms = Some(p.deadline_ms.map_or(at, |own| own.min(at)));
                }
            }
            return Some(Exit::Park(pending));
        }
        let at = s.wake_at();
        s.timers.clear();
        at.map(Exit::Sleep)
    }

    /// The key of the question at `position`: `preferred` (or the kind and
    /// position, such as `ask-3`), with the position appended when the task
    /// used it before, and then a counter while that is taken too: a key is
    /// never given twice in a task's life, whether the key it would take was
    /// generated or named by the tool (R76). The replay claims the keys of
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

    /// Takes the inline answer for `key`, if one came with the call (the
    /// question checks it: one that does not fit is asked again).
    pub(super) fn take_inline_answer(&self, key: &str) -> Option<Value> {
        self.lock().answers.remove(key)
    }

    /// Marks the run as ended `cancelled` by its own code.
    pub(crate) fn withdraw(&self) {
        self.withdrawn.store(true, Ordering::SeqCst);
    }

    /// Asks the run to stop at the next step boundary so that the task can
    /// carry on elsewhere from its journal (an inline call becoming a task).
    pub(crate) fn request_handoff(&self) {
        self.handoff.store(true, Ordering::SeqCst);
        self.waker.wake();
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
    /// for the step at `position`.
    pub(super) fn sleep_until(&self, position: u32, at: i64) {
        let race = race();
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
    pub(super) fn stage_sleep(&self, entry: JournalEntry, at: i64) -> bool {
        let mut s = self.lock();
        if self.recorder.is_none() || s.inflight > 0 || s.failed.is_some() {
            return false;
        }
        let position = entry.position;
        s.staged.push(entry);
        s.timers.push(Timer {
            position,
            at,
            race: race(),
        });
        drop(s);
        self.waker.wake();
        true
    }

    /// What a replay check found once its run stopped: where the code and
    /// the journal differ (the position, the entry recorded there, the step
    /// asked for), and the first position the run did not get to.
    pub(crate) fn checked(&self) -> (Option<(u32, JournalEntry, StepKind, String)>, u32) {
        let s = self.lock();
        (s.diverged.clone(), s.next)
    }

    /// The journal the run started from (what a replay check compares
    /// with), by position.
    pub(crate) fn recorded_after(&self, position: u32) -> Option<JournalEntry> {
        self.lock()
            .journal
            .range(position..)
            .next()
            .map(|(_, e)| e.clone())
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

    /// Whether the run is about to stop, so a live checkpoint must not start.
    pub(super) fn suspending(&self) -> bool {
        {
            let s = self.lock();
            if !s.pending.is_empty() || !s.timers.is_empty() || s.failed.is_some() {
                return true;
            }
        }
        self.cancel_requested() || self.handing_off() || self.lost()
    }

    /// Whether a new question must not be asked, nor a live checkpoint
    /// started outside a `select`: the run is failing, being cancelled or
    /// handed off, or no longer holds its task. A question already waiting
    /// (or a timer) does not stop it: questions asked together (`join!`)
    /// park together, and a checkpoint polled beside a waiting question runs
    /// before the run parks.
    pub(super) fn stopping(&self) -> bool {
        self.lock().failed.is_some() || self.cancel_requested() || self.handing_off() || self.lost()
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

    /// Polls `work`, a live step's work, for as long as the run holds its
    /// task. Before each poll it checks the lease as this instance measures
    /// it (renewed by the engine's lease renewal) and the stored claim: once
    /// the lease has run out unrenewed (the process was paused, say, by
    /// SIGSTOP, a long GC or a suspended laptop, or the store was out of
    /// reach) or another instance claimed the task, `work` is dropped
    /// without being polled again, and `None` comes back: the run ends
    /// without recording the step, which the instance that holds the task
    /// runs again.
    pub(super) async fn while_held<F: Future>(&self, position: u32, work: F) -> Option<F::Output> {
        let mut work = std::pin::pin!(Some(work));
        poll_fn(|cx| {
            if self.usurped() {
                work.set(None);
                self.lost.store(true, Ordering::SeqCst);
                self.waker.wake();
                tracing::warn!(
                    task = %crate::id::task_ref(&self.task_id),
                    position,
                    "lease lost inside a step: its work is dropped unfinished"
                );
                return Poll::Ready(None);
            }
            match work.as_mut().as_pin_mut() {
                Some(w) => w.poll(cx).map(Some),
                None => Poll::Ready(None),
            }
        })
        .await
    }

    /// Takes the next position and looks it up in the journal.
    pub(super) fn slot(self: &Arc<Self>, kind: StepKind, name: String) -> Slot {
        let mut s = self.lock();
        let position = s.next;
        s.next += 1;
        match s.journal.get(&position) {
            None if self.check => {
                s.reached.get_or_insert(position);
                drop(s);
                self.waker.wake();
                Slot::Diverged
            }
            None => Slot::Live {
                ctx: self.clone(),
                position,
                name,
            },
            Some(e) if e.kind == kind && e.name == name => {
                crate::metrics::replayed();
                Slot::Replay {
                    ctx: self.clone(),
                    value: e.value.clone(),
                    position,
                }
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
            None if self.check => {
                s.reached.get_or_insert(position);
                drop(s);
                self.waker.wake();
                return Some(Slot::Diverged);
            }
            None => Slot::Live {
                ctx: self.clone(),
                position,
                name,
            },
            Some(e) if e.kind == StepKind::Patch && e.name == name => {
                crate::metrics::replayed();
                Slot::Replay {
                    ctx: self.clone(),
                    value: e.value.clone(),
                    position,
                }
            }
            Some(_) => return None,
        };
        s.next += 1;
        Some(slot)
    }

    async fn record(&self, entry: JournalEntry) -> Recorded {
        match &self.recorder {
            Some(r) => r.record(&self.task_id, entry).await,
            None => {
                // Inline: the journal travels back to the caller.
                self.lock().journal.insert(entry.position, entry);
                Recorded::Written
            }
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
        match self.record(entry).await {
            Recorded::Written => value,
            Recorded::Kept(kept) if kept.kind == kind && kept.name == name => kept.value,
            Recorded::Kept(kept) => {
                self.fail(divergence(position, &kept, kind, &name));
                self.halt().await
            }
            Recorded::Lost => {
                self.lost.store(true, Ordering::SeqCst);
                self.waker.wake();
                forever().await
            }
        }
    }

    /// Never returns: the step calling it cannot finish, and the run stops
    /// without waiting for it (or for any other step in flight).
    async fn halt(&self) -> ! {
        self.halted.store(true, Ordering::SeqCst);
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

/// Fails the run when a journaled step is dropped before it finished while
/// the fn goes on: the loser of a `tokio::select!`, or a `timeout` that
/// elapsed. Which branch wins is not journaled, so a replay could take the
/// other one (or run the loser's work again). Armed when the step is
/// *created* (a checkpoint, a question) or first polled (a durable sleep),
/// not when it starts its work, so that the verdict does not depend on the
/// order a `select!` polls its branches in: a step dropped before it was
/// polled fails the run as one dropped halfway does. Disarmed once the step
/// is done.
pub(super) struct Unfinished {
    ctx: Arc<TaskCtx>,
    position: Option<u32>,
    what: String,
    armed: bool,
}

impl Unfinished {
    pub(super) fn new(ctx: &Arc<TaskCtx>, position: Option<u32>, what: String) -> Self {
        Self {
            ctx: ctx.clone(),
            position,
            what,
            armed: true,
        }
    }

    /// The guard of the step at `slot` (`None` for a step that is not
    /// journaled on its own: outside a task, inside a checkpoint's closure,
    /// or after the run diverged).
    pub(super) fn of(slot: &Slot, what: impl FnOnce() -> String) -> Option<Self> {
        match slot {
            Slot::Live { ctx, position, .. } | Slot::Replay { ctx, position, .. } => {
                Some(Self::new(ctx, Some(*position), what()))
            }
            Slot::Outside | Slot::Nested | Slot::Diverged => None,
        }
    }

    /// Names the step as the error will, should it be dropped unfinished.
    pub(super) fn rename(&mut self, what: String) {
        self.what = what;
    }

    /// The step finished (or the run is stopping on its own): nothing to report.
    pub(super) fn done(mut self) {
        self.armed = false;
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if !self.armed || self.ctx.exiting() {
            return;
        }
        if withdrawing() {
            if let Some(position) = self.position {
                self.ctx.take_back(position);
            }
        } else {
            self.ctx.fail(abandoned(self.position, &self.what));
        }
    }
}

/// The error of a journaled step dropped before it finished.
fn abandoned(position: Option<u32>, what: &str) -> RpcError {
    let at = position
        .map(|p| format!(" at journal position {p}"))
        .unwrap_or_default();
    RpcError::internal(format!(
        "{what}{at} was dropped before it finished while the tool went on (the loser of a \
         `tokio::select!`, or a `timeout` that elapsed?): which branch wins is not journaled, so \
         a replay could take the other one. Race journaled steps with \
         `durable::select` or `durable::select_all`, which journal the winner; race plain work \
         inside one step, `checkpoint(name, || async {{ tokio::select! {{ .. }} }})`; give a \
         question a deadline with `Question::timeout`"
    ))
    .with_data(json!({"position": position, "step": what}))
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

/// Waits for the next change of the stored task; `false` once no more can
/// come (or there is no stored task: an inline call).
async fn changed(record: Option<&mut watch::Receiver<TaskRecord>>) -> bool {
    match record {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// The error a panicking fn ends with.
fn panicked(panic: &(dyn std::any::Any + Send)) -> RpcError {
    RpcError::internal(format!("{PANICKED}: {}", panic_message(panic)))
}

/// How the error of a panicking fn begins.
pub(crate) const PANICKED: &str = "the tool panicked";

/// A panic's message, when its payload is a string.
pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-string payload".into())
}
