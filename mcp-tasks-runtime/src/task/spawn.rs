//! [`spawn`]: a checkpoint that runs on a tokio task of its own, in parallel
//! with the fn, and is journaled like any other.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use futures::FutureExt;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::{
    context::{InFlight, Live, Slot, TaskCtx},
    drive::panic_message,
    scope::{current_scope, in_scope, slot},
    steps::{StepFuture, StepValue, journal_ok, step_span},
};
use crate::{ToolError, journal::StepKind};

/// Runs a step on a tokio task of its own, in parallel with the fn, and
/// journals its value: [`checkpoint`](crate::checkpoint) for work that should
/// not wait its turn. Use it instead of `tokio::spawn`, whose future leaves
/// the task (steps in it run unjournaled, once per replay).
///
/// The journal position is taken here, when `spawn` is called, so the
/// order of the fn's steps stays the same in every run however long the
/// work takes. The work starts at once; await the [`Spawned`] handle for its
/// value. Its `Ok` value is journaled when it finishes, and a replay gets it
/// from the journal without running `f` again (nor spawning anything); an
/// `Err` is not journaled, as with a checkpoint.
///
/// The run does not park, sleep or end while spawned work is unfinished,
/// even if the handle was dropped: the value is recorded first. Inside `f`,
/// steps are covered by the spawned step's value, as inside a checkpoint's
/// closure. A panic in `f` comes back from the handle as a [`ToolError`].
/// Outside a task it is a plain `tokio::spawn` of `f()`.
///
/// ```
/// use mcp_tasks_runtime::{ToolError, checkpoint, durable, task_tool};
///
/// #[task_tool]
/// async fn release(version: String) -> Result<String, ToolError> {
///     // Both builds run at once, each on a worker of its own. The work is
///     // `'static`, as with `tokio::spawn`: it owns what it uses.
///     let v = version.clone();
///     let linux = durable::spawn("build-linux", move || async move { Ok(format!("linux-{v}.tar.gz")) });
///     let v = version.clone();
///     let mac = durable::spawn("build-mac", move || async move { Ok(format!("mac-{v}.zip")) });
///     let (linux, mac) = (linux.await?, mac.await?);
///     checkpoint("publish", || async { Ok(format!("published {linux} and {mac}")) }).await
/// }
/// ```
///
/// # Panics
///
/// When called outside a tokio runtime (as `tokio::spawn` does).
pub fn spawn<F, Fut, T>(name: impl Into<String>, f: F) -> Spawned<T>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: StepFuture<Result<T, ToolError>> + 'static,
    T: StepValue + Send + 'static,
{
    let name = name.into();
    let inner = match slot(StepKind::Checkpoint, name.clone()) {
        Slot::Outside => Inner::Running(tokio::spawn(async move { f().await })),
        Slot::Nested => {
            // Inside a checkpoint's closure: the work stays covered by it.
            let scope = current_scope();
            Inner::Running(tokio::spawn(async move { in_scope(scope, f()).await }))
        }
        Slot::Diverged => Inner::Diverged,
        Slot::Replay(step) => {
            step_span(step.position, StepKind::Checkpoint, &name, true).in_scope(|| ());
            Inner::Replayed(Some((step.ctx, step.value, name)))
        }
        // The run is about to park or stop: the work starts in the run that
        // gets past this point.
        Slot::Live(step) if step.ctx.suspending() => Inner::Diverged,
        Slot::Live(step) => {
            // In flight from now, not from when the tokio task first runs:
            // the run must not park before the work is recorded.
            let guard = InFlight::enter(&step.ctx);
            Inner::Running(tokio::spawn(live(step, guard, f)))
        }
    };
    Spawned { inner }
}

/// The spawned step's work: runs `f` as a checkpoint's closure and records
/// its `Ok`.
async fn live<F, Fut, T>(step: Live, guard: InFlight, f: F) -> Result<T, ToolError>
where
    F: FnOnce() -> Fut + Send,
    Fut: Future<Output = Result<T, ToolError>> + Send,
    T: Serialize + DeserializeOwned + Send,
{
    let Live {
        ctx,
        position,
        name,
    } = step;
    let span = step_span(position, StepKind::Checkpoint, &name, false);
    let work = in_scope(Some((ctx.clone(), Some(position))), f());
    let Some(out) = ctx.while_held(position, work).instrument(span).await else {
        // The run stops without a word: nobody reads this.
        return Err(ToolError::new("this instance lost the task's lease"));
    };
    let what = format!("the spawned step `{name}`");
    journal_ok(&ctx, guard, position, name, &what, out)
        .await
        .unwrap_or_else(|why| Err(ToolError::new(why)))
}

/// The handle of a [`spawn`]ed step: a future of its value.
///
/// Dropping it does not stop the work: the value is still journaled.
#[must_use = "the work runs anyway; await the handle for its value"]
pub struct Spawned<T> {
    inner: Inner<T>,
}

enum Inner<T> {
    Running(JoinHandle<Result<T, ToolError>>),
    Replayed(Option<(Arc<TaskCtx>, Value, String)>),
    Diverged,
}

impl<T> std::fmt::Debug for Spawned<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.inner {
            Inner::Running(_) => "running",
            Inner::Replayed(_) => "replayed",
            Inner::Diverged => "diverged",
        };
        f.debug_struct("Spawned").field("state", &state).finish()
    }
}

impl<T: DeserializeOwned + Send + 'static> Future for Spawned<T> {
    type Output = Result<T, ToolError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.inner {
            Inner::Running(handle) => handle.poll_unpin(cx).map(|joined| match joined {
                Ok(out) => out,
                Err(e) if e.is_panic() => Err(ToolError::new(format!(
                    "the spawned step panicked: {}",
                    panic_message(&*e.into_panic())
                ))),
                Err(_) => Err(ToolError::new("the spawned step was stopped")),
            }),
            Inner::Replayed(taken) => {
                let Some((ctx, value, name)) = taken.take() else {
                    return Poll::Pending;
                };
                match ctx.decode_or_fail(value, &format!("the spawned step `{name}`")) {
                    Some(v) => Poll::Ready(Ok(v)),
                    // The run fails; this handle never finishes.
                    None => Poll::Pending,
                }
            }
            Inner::Diverged => Poll::Pending,
        }
    }
}
