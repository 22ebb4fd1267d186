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
//!
//! # What keeps a replay on the first run's path
//!
//! A journaled step dropped unfinished while the fn goes on fails the run,
//! in every run and whatever order a `tokio::select!` polled its branches
//! in (see `unfinished::Unfinished`); what the runtime cannot see (tokio's
//! timers, `tokio::spawn`, clocks, random numbers) is refused by the macro.
//! [`select`]'s documentation says which is which, for users.
//!
//! # When a step runs again
//!
//! A step's value is journaled once; its work runs again only when the run
//! doing it stopped before its value landed: the process died, or this
//! instance lost the task's lease (it was paused past the lease by SIGSTOP,
//! a long GC or a suspended machine, or could not reach the store) and
//! another instance took the task over. A paused instance that wakes does
//! not go on with the step: before each poll of a step's work the run checks
//! its lease as this instance measures it (renewed by the engine while the
//! step runs, so long steps are not affected), and drops the work at its
//! next `.await` once the lease has lapsed. Work between two `.await`s (a
//! blocking call) cannot be stopped halfway. [`step_key`] gives the step an
//! idempotency key, the same on every attempt, to hand to the services it
//! calls.

mod ask;
mod becoming;
mod check;
mod context;
mod drive;
mod in_flight;
mod info;
mod patch;
mod scope;
mod select;
mod spawn;
mod standing;
mod steps;
mod unfinished;

pub use ask::{AskError, Question, UrlAnswer, ask, ask_url, ask_user, confirm, list_roots, sample};
pub(crate) use becoming::Held;
pub(crate) use context::{Recorded, Recorder, Run, TaskCtx};
pub(crate) use drive::{Exit, PANICKED};
pub use in_flight::ask_in_flight;
pub use info::TaskInfo;
pub use patch::patched;
pub use scope::task_info;
pub(crate) use scope::withdraw;
pub use select::{select, select_all};
pub use spawn::{Spawned, spawn};
pub use steps::{
    StepFuture, StepKey, StepValue, cancelled, checkpoint, now, sleep, status, step, step_key, uuid,
};
