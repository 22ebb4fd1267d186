//! One run of a task: claim it, wait for a worker, replay the fn from its
//! journal, and store how the run ended. Also the inline run of a call.

use std::{sync::Arc, time::Duration};

use futures::{FutureExt, future::BoxFuture};

use super::{Inner, call::Call};
use crate::{
    error::{Result, RpcError},
    id,
    journal::JournalEntry,
    store::{TaskRecord, TaskStatus, Transition},
    task::{Exit, Recorder, Run, TaskCtx},
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
    /// A stored task: read its record and journal.
    Resume,
}

impl Inner {
    /// Starts a run of task `id` unless one is under way in this process.
    pub(super) fn spawn(self: &Arc<Self>, id: String, start: Start) {
        // Claimed before anything is read: a change stored after the read
        // reaches the run (see `watch`).
        if !self.watch.claim(&id) {
            return;
        }
        let claim = Claim(self.clone(), id);
        tokio::spawn(async move {
            if let Err(e) = claim.0.clone().run(claim, start).await {
                tracing::error!(error = %e, "task run failed");
            }
        });
    }

    async fn run(self: Arc<Self>, claim: Claim, start: Start) -> Result<()> {
        let id = claim.1.as_str();
        // The semaphore is never closed.
        let Ok(_permit) = self.permits.clone().acquire_owned().await else {
            return Ok(());
        };
        let (record, journal, fut) = match start {
            Start::Fresh { record, fut } => (*record, Vec::new(), fut),
            Start::Resume => match self.load(id).await? {
                Some(loaded) => loaded,
                None => return Ok(()),
            },
        };
        let record = self.watch.attach(&record);
        let stored = record.borrow().clone();
        if stored.status != TaskStatus::Working {
            return Ok(());
        }
        if stored.cancel_requested {
            self.transition(id, Transition::Cancel).await?;
            return Ok(());
        }
        if let Some(at) = stored.wake_at_ms
            && at > id::now_ms()
        {
            let id = claim.release();
            self.timers.wake_at(at, &id);
            return Ok(());
        }
        let ctx = TaskCtx::new(Run {
            task_id: id.to_owned(),
            journal,
            caps: stored.client_capabilities,
            recorder: Some(Arc::new(EngineRecorder(self.clone()))),
            record: Some(record),
            answers: serde_json::Map::new(),
        });
        let exit = ctx.drive(fut).await;
        drop(ctx);
        // Released before the end is stored: an answer to a park, or the
        // timer of a sleep, may start the next run at once.
        let id = claim.release();
        self.end(&id, exit).await
    }

    /// Reads what a stored task's run needs: its record, its journal, and
    /// its fn prepared from the stored arguments. A task that cannot run any
    /// more (its tool is gone, its arguments no longer fit) ends `failed`.
    async fn load(&self, id: &str) -> Result<Option<(TaskRecord, Vec<JournalEntry>, ToolFuture)>> {
        let Some(record) = self.store.get(id).await? else {
            return Ok(None);
        };
        if record.status != TaskStatus::Working {
            return Ok(None);
        }
        let prepared = match self.registry.get(&record.tool) {
            None => Err(RpcError::internal(format!(
                "tool `{}` is no longer registered on this server",
                record.tool
            ))),
            Some(tool) => tool
                .descriptor()
                .prepare(record.arguments.clone())
                .map_err(|m| {
                    RpcError::invalid_params(format!(
                        "the stored arguments no longer fit tool `{}`: {m}",
                        record.tool
                    ))
                }),
        };
        match prepared {
            Ok(fut) => Ok(Some((record, self.store.journal(id).await?, fut))),
            Err(e) => {
                self.transition(id, Transition::Fail(e)).await?;
                Ok(None)
            }
        }
    }

    /// Stores how a run ended (after its status messages).
    async fn end(&self, id: &str, exit: Exit) -> Result<()> {
        self.status.flushed(id).await;
        let change = match exit {
            Exit::Done(Ok(result)) => Transition::Complete(result),
            Exit::Done(Err(error)) | Exit::Fail(error) => Transition::Fail(error),
            Exit::Park(pending) => Transition::Park(pending),
            Exit::Sleep(at) => Transition::Sleep { wake_at_ms: at },
            Exit::Cancelled => Transition::Cancel,
            // Ended elsewhere; an inline handoff never happens to a task.
            Exit::Ended | Exit::Handoff => return Ok(()),
        };
        let sleep_at = match &change {
            Transition::Sleep { wake_at_ms } => Some(*wake_at_ms),
            _ => None,
        };
        let applied = self.transition(id, change).await?;
        if let (Some(at), Some(_)) = (sleep_at, applied) {
            self.timers.wake_at(at, id);
        }
        Ok(())
    }

    /// Runs a call inline (no task): for at most `window` when there is one,
    /// then it stops at its next step boundary with [`Exit::Handoff`]. Returns
    /// how it ended and the whole journal.
    pub(super) async fn run_inline(
        &self,
        call: &mut Call,
        fut: ToolFuture,
        window: Option<Duration>,
    ) -> (Exit, Vec<JournalEntry>) {
        let ctx = TaskCtx::new(Run {
            task_id: String::new(),
            journal: std::mem::take(&mut call.journal),
            caps: call.capabilities,
            recorder: None,
            record: None,
            answers: std::mem::take(&mut call.answers),
        });
        let exit = match window {
            None => ctx.drive(fut).await,
            Some(window) => {
                let handoff = {
                    let ctx = ctx.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(window).await;
                        ctx.request_handoff();
                    })
                };
                let exit = ctx.drive(fut).await;
                handoff.abort();
                exit
            }
        };
        (exit, ctx.take_journal())
    }
}

/// A run's claim on its task in this process; released when dropped.
pub(super) struct Claim(Arc<Inner>, String);

impl Claim {
    /// Releases the claim now; returns the task id.
    fn release(mut self) -> String {
        let id = std::mem::take(&mut self.1);
        self.0.watch.release(&id);
        id
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.1.is_empty() {
            self.0.watch.release(&self.1);
        }
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
        self.0.status.write(&self.0, task_id, message);
    }
}
