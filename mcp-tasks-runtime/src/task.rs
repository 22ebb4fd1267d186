//! What a tool fn calls while it runs as a task: journaled steps
//! ([`checkpoint`] and friends) and questions to the client ([`ask_user`] and
//! friends).
//!
//! A tool fn runs inside a task context. Every journaled step takes the next
//! journal position when it is *called*. On a live run the step does its work
//! and records the value durably before returning it; on replay it returns the
//! recorded value without doing the work. A step that must wait (an unanswered
//! question, a durable timer) or must stop (cancellation, a diverged history)
//! *suspends* the fn: its future never completes, and the runner drops it as
//! soon as no checkpoint is in flight, then parks or ends the task. A parked
//! task therefore holds no future and no worker.
//!
//! Outside a task (a plain unit test of the fn) the steps run live and record
//! nothing; questions fail with [`AskError::NoTask`].

mod ask;
mod info;
mod patch;
mod replay;
mod scope;
mod select;
mod spawn;
mod steps;

pub use ask::{AskError, Question, UrlAnswer, ask_url, ask_user, confirm, list_roots, sample};
pub(crate) use info::withdraw;
pub use info::{TaskInfo, task_info};
pub use patch::patched;
pub(crate) use replay::{Exit, Recorded, Recorder, Run, TaskCtx};
pub use select::{select, select_all};
pub use spawn::{Spawned, spawn};
pub use steps::{
    StepFuture, StepKey, cancelled, checkpoint, now, sleep, status, step, step_key, uuid,
};
