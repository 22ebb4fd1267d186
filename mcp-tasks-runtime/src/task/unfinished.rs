//! The guard of a journaled step dropped before it finished while the fn
//! goes on ([`Unfinished`]).

use std::sync::Arc;

use serde_json::json;

use super::{
    context::{Slot, TaskCtx},
    scope::withdrawing,
};
use crate::error::RpcError;

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
        slot.at()
            .map(|(ctx, position)| Self::new(ctx, Some(position), what()))
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
         `mcp_tasks_runtime::durable::select` or `select_all`, which journal the winner; race plain work \
         inside one step, `checkpoint(name, || async {{ tokio::select! {{ .. }} }})`; give a \
         question a deadline with `Question::timeout`"
    ))
    .with_data(json!({"position": position, "step": what}))
}
