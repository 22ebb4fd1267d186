//! One run of a task: book it in this process, wait for a worker, claim it
//! in the store (or start from the claim its creation made), replay the fn
//! from its journal, and store how the run ended, every write fenced by the
//! claim.

use std::{sync::Arc, time::Duration};

use futures::{FutureExt, future::BoxFuture};
use tracing::Instrument;

use super::Inner;
use crate::{
    error::{Result, RpcError},
    journal::{JournalEntry, StepKind},
    store::{Appended, TaskRecord, TaskStatus, Transition},
    task::{Exit, Held, Recorded, Recorder, Run, TaskCtx, TaskInfo},
    tool::ToolFuture,
};

/// Where a run starts from.
pub(super) enum Start {
    /// A task just created by a call: its record and the call's prepared fn
    /// (the arguments were decoded once, by the call; nothing to read).
    Fresh {
        record: Box<TaskRecord>,
        fut: ToolFuture,
    },
    /// A stored task that was found runnable (by the scan, the store's
    /// feed, or a call that left it for a free worker): read its record and
    /// journal. Claiming one that already ran under another claim is taking
    /// it over.
    Resume,
    /// A stored task whose last run here gave up on a store error, perhaps
    /// leaving it leased to this instance: read as [`Start::Resume`] does,
    /// even when it was left for a newer version of its tool (giving its
    /// lease up is what may have failed).
    Retake,
    /// A stored task whose questions were all answered here.
    Answered,
    /// A stored task whose durable timer fired here, or whose questions
    /// timed out.
    Woken,
}

impl Inner {
    /// Starts a run of task `id` unless one is queued or under way in this
    /// process; returns whether it started one.
    pub(super) fn spawn(self: &Arc<Self>, id: String, start: Start) -> bool {
        // A task recorded by a newer version of its tool is left alone (not
        // on a retake: giving its lease up may be what failed).
        if !matches!(start, Start::Retake) && self.versions.skipped(&id) {
            return false;
        }
        // Booked before anything is read: a change stored after the read
        // reaches the run (see `watch`).
        if !self.watch.book(&id) {
            return false;
        }
        let booking = Booking(self.clone(), id.clone());
        self.launch(run_span(&id), id, self.clone().run(booking, start));
        true
    }

    /// Runs `run`, a run of task `id`, on a tokio task of its own, in
    /// `span`. A run that fails is logged, and its task given up here: its
    /// claim, or a write under it, may have landed.
    fn launch(
        self: &Arc<Self>,
        span: tracing::Span,
        id: String,
        run: impl Future<Output = Result<()>> + Send + 'static,
    ) {
        let inner = self.clone();
        tokio::spawn(
            async move {
                if let Err(e) = run.await {
                    tracing::error!(error = %crate::id::Redacted(&e), "task run failed");
                    inner.watch.give_up(&id);
                }
            }
            .instrument(span),
        );
    }

    /// Stores how run `ctx` of the task `booking` holds ended (`exit`,
    /// under `fence`).
    async fn finish(
        &self,
        booking: Booking,
        ctx: Arc<TaskCtx>,
        exit: Exit,
        fence: u64,
    ) -> Result<()> {
        tracing::Span::current().record("exit", exit.name());
        let staged = ctx.take_staged();
        drop(ctx);
        // Released before the end is stored: an answer to a park, or the
        // timer of a sleep, may start the next run at once.
        let id = booking.release();
        self.end(&id, exit, fence, staged).await
    }

    /// Carries on, as the run of task `record` (just stored, claimed by
    /// this instance), an inline call that `ctx` ran until its window
    /// ended: `driving` is its fn in mid-run, `permit` the inline slot it
    /// keeps until it ends.
    pub(super) fn carry_on(
        self: &Arc<Self>,
        record: &TaskRecord,
        ctx: Arc<TaskCtx>,
        driving: std::pin::Pin<Box<dyn Future<Output = Exit> + Send>>,
        permit: impl Send + 'static,
    ) {
        let id = record.id.clone();
        // A new task: no other run of it can be booked.
        self.watch.book(&id);
        let fence = record.fence;
        ctx.became_task(Held {
            task_id: id.clone(),
            recorder: Arc::new(EngineRecorder {
                inner: self.clone(),
                fence,
            }),
            record: self.watch.attach(record),
            holder: (self.config.owner.clone(), fence),
            let_go: self.watch.let_go(&id),
            info: TaskInfo::of_task(record),
        });
        let booking = Booking(self.clone(), id.clone());
        let span = run_span(&id);
        span.record("tool", record.tool.as_str());
        span.record("attempt", fence);
        let inner = self.clone();
        self.launch(span, id, async move {
            let _permit = permit;
            let _running = crate::metrics::Gauged::running();
            let exit = driving.await;
            inner.finish(booking, ctx, exit, fence).await
        });
    }

    async fn run(self: Arc<Self>, booking: Booking, start: Start) -> Result<()> {
        let id = booking.1.as_str();
        // The semaphore is never closed.
        let queued = crate::metrics::Gauged::queued();
        let Ok(_permit) = self.permits.clone().acquire_owned().await else {
            return Ok(());
        };
        queued.end();
        // A draining engine starts no run: the task stays for the next claim.
        if self.shutting_down.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        let _running = crate::metrics::Gauged::running();
        // A fresh task was created claimed by this instance; any other is
        // claimed now, and only if no other instance holds it.
        let (record, journal, fut) = match start {
            Start::Fresh { record, fut } => (*record, Vec::new(), fut),
            resume => match self.load(id).await? {
                Some(loaded) => {
                    log_resume(&resume, &loaded.0);
                    loaded
                }
                None => return Ok(()),
            },
        };
        let fence = record.fence;
        let span = tracing::Span::current();
        span.record("tool", record.tool.as_str());
        span.record("attempt", fence);
        let watched = self.watch.attach(&record);
        drop(record);
        // What the run needs of the record as the watch holds it, read in
        // place (not the whole record cloned).
        let (caps, info, cancel) = {
            let stored = watched.borrow();
            if stored.status != TaskStatus::Working || stored.fence != fence {
                return Ok(());
            }
            let info = TaskInfo::of_task(&stored);
            (stored.client_capabilities, info, stored.cancel_requested)
        };
        if cancel {
            self.transition(id, Transition::Cancel, Some(fence)).await?;
            return Ok(());
        }
        let ctx = TaskCtx::new(Run {
            task_id: id.to_owned(),
            journal,
            caps,
            recorder: Some(Arc::new(EngineRecorder {
                inner: self.clone(),
                fence,
            })),
            record: Some(watched),
            answers: serde_json::Map::new(),
            holder: Some((self.config.owner.clone(), fence)),
            let_go: Some(self.watch.let_go(id)),
            info,
            clock: self.clock.clone(),
            max_entries: self.max_journal_entries(),
            sleep_in_process_ms: self.config.sleep_in_process_ms(),
        });
        let exit = ctx.drive(fut).await;
        self.finish(booking, ctx, exit, fence).await
    }

    /// Claims a stored task and reads what its run needs: its record, its
    /// journal, and its fn prepared from the stored arguments. A task that
    /// cannot run any more (its tool is gone, its arguments no longer fit)
    /// ends `failed`.
    async fn load(&self, id: &str) -> Result<Option<(TaskRecord, Vec<JournalEntry>, ToolFuture)>> {
        let now = self.clock.now_ms();
        let until = now.saturating_add(self.config.lease_ms());
        let claimed = self.store.claim(id, &self.config.owner, now, until).await?;
        // The store answered: a run given up here before is followed by this
        // one, or the task is no longer this instance's.
        self.watch.taken_up(id);
        let Some((record, journal)) = claimed else {
            return Ok(None);
        };
        // The tools as they are now (see `Engine::set_registry`).
        let tools = self.tools.current();
        let prepared = match tools.get(&record.tool) {
            None => Err(RpcError::internal(format!(
                "tool `{}` is no longer registered on this server",
                record.tool
            ))),
            Some(tool) if !tool.descriptor().replays(record.tool_version) => {
                let descriptor = tool.descriptor();
                if record.tool_version < descriptor.replays_from() {
                    Err(super::versions::too_old(&record, descriptor))
                } else {
                    // Recorded by a newer version: never replayed here.
                    self.versions.leave(&record, descriptor);
                    let change = Transition::Release;
                    self.transition(id, change, Some(record.fence)).await?;
                    return Ok(None);
                }
            }
            Some(tool) => tool
                .descriptor()
                .prepare(record.arguments.clone(), &self.state)
                .map_err(|m| {
                    RpcError::invalid_params(format!(
                        "the stored arguments no longer fit tool `{}`: {m}",
                        record.tool
                    ))
                }),
        };
        match prepared {
            Ok(fut) => Ok(Some((record, journal, fut))),
            Err(e) => {
                self.transition(id, Transition::Fail(e), Some(record.fence))
                    .await?;
                Ok(None)
            }
        }
    }

    /// Stores how a run ended (after its status messages), as the holder of
    /// `fence`, with the entries its durable sleeps staged when it goes to
    /// sleep or parks; a run that lost its task stores nothing.
    async fn end(&self, id: &str, exit: Exit, fence: u64, staged: Vec<JournalEntry>) -> Result<()> {
        self.status.flushed(id).await;
        let change = match exit {
            Exit::Done(Ok(result)) => match self.cap_result(result) {
                Ok(result) => Transition::Complete(result),
                Err(error) => Transition::Fail(error),
            },
            Exit::Done(Err(error)) | Exit::Fail(error) => Transition::Fail(error),
            Exit::Park(pending) => Transition::Park(pending),
            Exit::Sleep(at) => Transition::Sleep { wake_at_ms: at },
            Exit::Cancelled => Transition::Cancel,
            // No longer ours as this instance measures it (a lease past its
            // expiry before the renewal's answer came, say): the store may
            // still hold the task for this instance, whose renewals would
            // keep that lease live with no run behind it. Marked given up,
            // it is claimed again here after the next renewal, a claim the
            // store refuses if another instance holds it.
            Exit::Lost => {
                self.watch.give_up(id);
                return Ok(());
            }
            // Ended elsewhere.
            Exit::Ended | Exit::Replayed => return Ok(()),
        };
        let suspends = matches!(change, Transition::Sleep { .. } | Transition::Park(_));
        let applied = self
            .retry(|| async {
                let now = self.clock.now_ms();
                if suspends && !staged.is_empty() {
                    self.store
                        .transition_journaled(id, staged.clone(), change.clone(), now, fence)
                        .await
                } else {
                    self.store
                        .transition(id, change.clone(), now, Some(fence))
                        .await
                }
            })
            .await;
        match applied {
            Ok(Some(record)) => {
                log_suspended(&record);
                self.announce(&record);
                // A sleep's wake time, or a parked question's deadline.
                self.timers.follow(&record);
            }
            // Refused: the task ended elsewhere or is no longer ours, or an
            // earlier attempt did commit before its answer was lost. Watchers
            // get what is stored either way.
            Ok(None) => {
                if let Ok(Some(record)) = self.store.get(id).await {
                    self.watch.notify(&record);
                }
            }
            // The store stayed down for a whole lease: the task is left
            // working, held here, and runs again here once the store answers
            // (or on another instance, if this one's lease runs out first).
            Err(e) => {
                tracing::warn!(task = %crate::id::task_ref(id), error = %crate::id::Redacted(&e), "the end of a run was not stored");
                self.watch.give_up(id);
            }
        }
        Ok(())
    }

    /// Runs `op` until it succeeds, backing off between failures, for as
    /// long as a lease lasts; then gives its last error.
    pub(super) async fn retry<T, F, Fut>(&self, op: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let deadline = tokio::time::Instant::now() + self.config.lease;
        let mut pause = Duration::from_millis(20);
        loop {
            match op().await {
                Ok(v) => return Ok(v),
                Err(e) if tokio::time::Instant::now() + pause >= deadline => return Err(e),
                Err(e) => {
                    crate::metrics::store_retry();
                    tracing::warn!(error = %crate::id::Redacted(&e), retry_in = ?pause, "store write failed; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
            }
        }
    }
}

/// One span per run: the tool, a reference to the task that is not its id
/// (a bearer secret), the claim it runs under, and how it ended.
fn run_span(id: &str) -> tracing::Span {
    tracing::info_span!(
        "task_run",
        task = %crate::id::task_ref(id),
        tool = tracing::field::Empty,
        attempt = tracing::field::Empty,
        exit = tracing::field::Empty,
    )
}

/// Says at INFO that a stored task runs again here (the run's span names
/// the task by reference).
fn log_resume(start: &Start, record: &TaskRecord) {
    match start {
        Start::Answered => tracing::info!(after = %"answers", "task resumed"),
        Start::Woken => tracing::info!(after = %"timer", "task resumed"),
        // Its last run here gave up on a store error.
        Start::Retake => tracing::info!(after = %"store error", "task resumed"),
        // Claimed before by a run elsewhere (or before a restart) that let
        // it go or died holding it.
        Start::Resume if record.fence > 1 => {
            tracing::info!(attempt = record.fence, "task taken over");
        }
        Start::Resume | Start::Fresh { .. } => tracing::debug!("task started"),
    }
}

/// Says at INFO that a run stored its task parked on questions or asleep
/// on a durable timer.
fn log_suspended(record: &TaskRecord) {
    if record.status == TaskStatus::InputRequired {
        tracing::info!(questions = record.pending.len(), "task parked");
    } else if record.status == TaskStatus::Working
        && let Some(at) = record.wake_at_ms
    {
        tracing::info!(wake_at_ms = at, "task asleep");
    }
}

/// A run's booking of its task in this process; released when dropped.
pub(super) struct Booking(Arc<Inner>, String);

impl Booking {
    /// Releases the booking now; returns the task id.
    fn release(mut self) -> String {
        let id = std::mem::take(&mut self.1);
        self.0.unbook(&id);
        id
    }
}

impl Drop for Booking {
    fn drop(&mut self) {
        if !self.1.is_empty() {
            self.0.unbook(&self.1);
        }
    }
}

impl Inner {
    /// `result`, or the error that fails its task when it is over
    /// [`Limits::max_result_bytes`](super::Limits::max_result_bytes).
    pub(super) fn cap_result(
        &self,
        result: serde_json::Map<String, serde_json::Value>,
    ) -> std::result::Result<serde_json::Map<String, serde_json::Value>, crate::error::RpcError>
    {
        let max = self.config.limits.max_result_bytes;
        let len = super::limits::json_len(&result);
        if len > max {
            return Err(super::limits::size_error(
                "max_result_bytes",
                "the result",
                len,
                max,
            ));
        }
        Ok(result)
    }

    /// The journal cap as a run's context counts positions.
    pub(super) fn max_journal_entries(&self) -> u32 {
        u32::try_from(self.config.limits.max_journal_entries).unwrap_or(u32::MAX)
    }

    /// A run here ended: its booking goes, and a scan waiting on a backlog
    /// of claimable tasks is woken for the worker that is now free.
    fn unbook(&self, id: &str) {
        self.watch.release(id);
        if self.backlog.load(std::sync::atomic::Ordering::SeqCst) {
            self.scan_wake.notify_one();
        }
    }
}

/// The engine as seen by a running task's context: its writes carry the
/// run's fence.
struct EngineRecorder {
    inner: Arc<Inner>,
    fence: u64,
}

impl Recorder for EngineRecorder {
    fn record(&self, task_id: &str, entry: JournalEntry) -> BoxFuture<'static, Recorded> {
        let (inner, fence, id) = (self.inner.clone(), self.fence, task_id.to_owned());
        async move {
            let max = inner.config.limits.max_journal_entry_bytes;
            let len = super::limits::json_len(&entry.value);
            if len > max {
                let error = super::limits::size_error(
                    "max_journal_entry_bytes",
                    &format!("the value of step `{}`", entry.name),
                    len,
                    max,
                );
                if let Err(e) = inner.transition(&id, Transition::Fail(error), Some(fence)).await {
                    tracing::warn!(task = %crate::id::task_ref(&id), error = %crate::id::Redacted(&e), "could not fail a task over a limit");
                    inner.watch.give_up(&id);
                }
                return Recorded::Lost;
            }
            // A timer's deadline: the run waits for the time, not the write.
            let unhurried = entry.kind == StepKind::Sleep;
            let appended = inner
                .retry(|| {
                    if unhurried {
                        inner.store.append_unhurried(&id, entry.clone(), fence)
                    } else {
                        inner.store.append(&id, entry.clone(), fence)
                    }
                })
                .await;
            match appended {
                Ok(Appended::Recorded) => Recorded::Written,
                Ok(Appended::Kept(kept)) => Recorded::Kept(kept),
                Ok(Appended::Fenced) => Recorded::Lost,
                Err(e) => {
                    tracing::warn!(task = %crate::id::task_ref(&id), error = %crate::id::Redacted(&e), "could not journal a step; the run stops");
                    inner.watch.give_up(&id);
                    Recorded::Lost
                }
            }
        }
        .boxed()
    }

    fn status(&self, task_id: &str, message: String) {
        let message =
            super::limits::cap_status(message, self.inner.config.limits.max_status_message_bytes);
        self.inner
            .status
            .write(&self.inner, task_id, self.fence, message);
    }

    fn transition(
        &self,
        task_id: &str,
        change: Transition,
    ) -> BoxFuture<'static, Option<TaskRecord>> {
        let (inner, fence, id) = (self.inner.clone(), self.fence, task_id.to_owned());
        async move {
            let applied = inner
                .retry(|| inner.transition(&id, change.clone(), Some(fence)))
                .await;
            match applied {
                Ok(record) => record,
                Err(e) => {
                    tracing::warn!(task = %crate::id::task_ref(&id), error = %crate::id::Redacted(&e), "a change of a running task was not stored");
                    None
                }
            }
        }
        .boxed()
    }
}
