//! The journaled vocabulary: what a task tool calls instead of the clock,
//! timers, tasks and randomness, so that a replay takes the same path.
//!
//! Each function here records its outcome in the task's journal the first
//! time it runs and reads it back on a replay. Their names follow tokio's
//! (`sleep`, `spawn`, `select`) on purpose, and this module's path tells them
//! apart at the call site: `durable::sleep(..)` is journaled (a short one
//! waits in its run, a longer one parks the task without holding a worker),
//! `tokio::time::sleep(..)` is not journaled (and `#[task_tool]` refuses it
//! in a tool's body).
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use mcp_tasks_runtime::{ToolError, durable, task_tool};
//!
//! /// Waits for a build to settle, then reports when it did.
//! #[task_tool]
//! async fn settle(build: String) -> Result<String, ToolError> {
//!     durable::status(format!("waiting for {build}"));
//!     durable::sleep(Duration::from_secs(60)).await;
//!     let at = durable::now().await;
//!     Ok(format!("{build} settled at {at:?}"))
//! }
//! ```
//!
//! [`checkpoint`] is also at the crate root, where every tool author finds it.
//! The questions a tool asks (also journaled) are in [`question`](crate::question).

pub use futures::future::Either;

pub use crate::task::{
    Spawned, StepFuture, StepKey, StepValue, TaskInfo, ask_in_flight, cancelled, checkpoint, now,
    patched, select, select_all, sleep, spawn, status, step, step_key, task_info, uuid,
};
