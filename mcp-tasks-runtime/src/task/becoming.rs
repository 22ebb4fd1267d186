//! An inline call that becomes its task in the middle of its run (its
//! window ended, or a question asked in flight needs a task): what the run
//! holds of its task ([`Held`], read through [`TaskCtx::recorder`] and its
//! siblings whichever way the run began), and the hand-over itself
//! ([`TaskCtx::moving`], then [`TaskCtx::became_task`]), during which a
//! step's value waits to be recorded in the task.

use std::sync::{Arc, atomic::AtomicBool};

use tokio::sync::watch;

use crate::{journal::JournalEntry, store::TaskRecord};

use super::{
    context::{Recorder, TaskCtx},
    info::TaskInfo,
};

/// What an inline call holds once it became a task in the middle of its run
/// ([`TaskCtx::became_task`]): the task's counterparts of [`Run`](super::Run)'s fields,
/// which it had none of.
pub(crate) struct Held {
    pub(crate) task_id: String,
    pub(crate) recorder: Arc<dyn Recorder>,
    pub(crate) record: watch::Receiver<TaskRecord>,
    pub(crate) holder: (String, u64),
    pub(crate) let_go: Arc<AtomicBool>,
    pub(crate) info: TaskInfo,
}

impl TaskCtx {
    /// Where live values go: the run's recorder, or the task's once an
    /// inline call became one (`None`: an inline call, recorded in memory).
    pub(crate) fn recorder(&self) -> Option<&Arc<dyn Recorder>> {
        (self.run.recorder.as_ref()).or_else(|| self.became.get().map(|h| &h.recorder))
    }

    /// The task as stored, kept current (`None`: an inline call).
    pub(crate) fn record(&self) -> Option<&watch::Receiver<TaskRecord>> {
        (self.run.record.as_ref()).or_else(|| self.became.get().map(|h| &h.record))
    }

    /// The claim the run holds (`None`: an inline call).
    pub(crate) fn holder(&self) -> Option<&(String, u64)> {
        (self.run.holder.as_ref()).or_else(|| self.became.get().map(|h| &h.holder))
    }

    /// Set when the engine lets the task go (`None`: an inline call).
    pub(super) fn let_go(&self) -> Option<&Arc<AtomicBool>> {
        (self.run.let_go.as_ref()).or_else(|| self.became.get().map(|h| &h.let_go))
    }

    /// The task's id (empty for an inline call).
    pub(crate) fn task_id(&self) -> &str {
        match self.became.get() {
            Some(held) => &held.task_id,
            None => &self.run.task_id,
        }
    }

    /// What the run's code may read about its task.
    pub(crate) fn info(&self) -> &TaskInfo {
        self.became.get().map_or(&self.run.info, |h| &h.info)
    }

    /// Begins an inline call's becoming a task: from now until
    /// [`became_task`](Self::became_task), a step's value waits to be
    /// recorded in the task. Returns the journal recorded so far, for the
    /// task to be stored with.
    pub(crate) fn moving(&self) -> Vec<JournalEntry> {
        let mut s = self.lock();
        s.moving = true;
        s.journal.values().cloned().collect()
    }

    /// The inline call is a task now, stored with the journal that
    /// [`moving`](Self::moving) returned: its run goes on as the task's,
    /// recording in it, stopping on a cancel or a lost claim.
    pub(crate) fn became_task(&self, held: Held) {
        let mut s = self.lock();
        // Set once only: a second call keeps the first task.
        let _ = self.became.set(held);
        s.moving = false;
        drop(s);
        self.bound.notify_waiters();
        self.waker.wake();
    }

    /// Asks an inline call that may become a task to become one now (a
    /// question asked in flight needs one); whether it may.
    pub(super) fn become_task_now(&self) -> bool {
        let Some(hurry) = &self.hurry else {
            return false;
        };
        hurry.notify_one();
        true
    }

    /// Waits until the inline call became a task.
    pub(super) async fn became(&self) {
        loop {
            let notified = self.bound.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.became.get().is_some() {
                return;
            }
            notified.await;
        }
    }
}
