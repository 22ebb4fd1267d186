//! Status messages, written in order and coalesced: one write in flight per
//! task, and the last message that arrived meanwhile goes next. A run's end
//! waits for its task's writes, so a message never lands after the change it
//! came before.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use tokio::sync::Notify;

use super::Inner;
use crate::store::Transition;

/// The status writes in flight, by task.
#[derive(Debug, Default)]
pub(super) struct StatusWrites {
    slots: Mutex<HashMap<String, Slot>>,
}

#[derive(Debug, Default)]
struct Slot {
    /// The message to write once the one in flight is stored.
    next: Option<String>,
    /// Wakes those waiting for the task's writes to be stored.
    flushed: Arc<Notify>,
}

impl StatusWrites {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets task `id`'s status message, as the run holding `fence`.
    pub(super) fn write(&self, inner: &Arc<Inner>, id: &str, fence: u64, message: String) {
        {
            let mut slots = self.lock();
            if let Some(slot) = slots.get_mut(id) {
                slot.next = Some(message);
                return;
            }
            slots.insert(id.to_owned(), Slot::default());
        }
        let inner = inner.clone();
        let id = id.to_owned();
        tokio::spawn(async move {
            let mut next = Some(message);
            while let Some(m) = next {
                let change = Transition::StatusMessage(m);
                if let Err(e) = inner.transition(&id, change, Some(fence)).await {
                    tracing::warn!(task = %crate::id::task_ref(&id), error = %crate::id::Redacted(&e), "status message not saved");
                }
                next = inner.status.taken(&id);
            }
        });
    }

    /// The next message for `id`, or `None` once all are written.
    fn taken(&self, id: &str) -> Option<String> {
        let mut slots = self.lock();
        let slot = slots.get_mut(id)?;
        let next = slot.next.take();
        if next.is_none()
            && let Some(done) = slots.remove(id)
        {
            done.flushed.notify_waiters();
        }
        next
    }

    /// Waits until task `id`'s messages are written.
    pub(super) async fn flushed(&self, id: &str) {
        let Some(flushed) = self.lock().get(id).map(|slot| slot.flushed.clone()) else {
            return;
        };
        // Wakes from here on, even before it is first polled.
        let wait = flushed.notified();
        let pending = self
            .lock()
            .get(id)
            .is_some_and(|slot| Arc::ptr_eq(&slot.flushed, &flushed));
        if pending {
            wait.await;
        }
    }
}
