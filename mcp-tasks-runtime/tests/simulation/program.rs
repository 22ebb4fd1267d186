//! Tool programs as data: a small AST over the task vocabulary, a seeded
//! generator of programs, and the one tool that interprets them. Each
//! checkpoint and spawned step reports to a [`Probe`] when its closure
//! starts and completes, so the simulation can count how often each journal
//! position's work ran.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use futures::future::BoxFuture;
use mcp_tasks_runtime::{
    State, ToolError, checkpoint, confirm,
    durable::{self, Either},
    question::AskError,
    task_tool,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One instruction of a program. Every name and key is unique within a
/// program (numbered in generation order), so a step's name identifies its
/// journal position within a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Op {
    /// `checkpoint(name, ..)`, whose value is its name.
    Checkpoint { name: String },
    /// `confirm(..).key(key)`, with `.timeout(deadline_min minutes)` when set.
    Ask {
        key: String,
        deadline_min: Option<u64>,
    },
    /// A durable `sleep` of this many minutes.
    Sleep { minutes: u64 },
    /// `select` of two single steps.
    Select { left: Box<Op>, right: Box<Op> },
    /// `spawn` of each named step, then their values awaited in order.
    Spawn { names: Vec<String> },
    /// `durable::status(message)`.
    Status { message: String },
    /// `durable::patched(name)`.
    Patched { name: String },
}

/// A random program of one to eight instructions. Some shapes of race
/// can be left out, to run the seeds a bug was found under as they were
/// (see the regression tests in the test): with
/// `checkpoints_first`, no checkpoint is a later branch of a `select` (it
/// becomes a question); with `flat_selects`, no `select` is a branch of
/// another (it becomes its first branch). A seed's program is otherwise
/// the same either way.
pub(crate) fn generate(
    rng: &mut fastrand::Rng,
    checkpoints_first: bool,
    flat_selects: bool,
) -> Vec<Op> {
    let mut ids = 0;
    let n = rng.usize(1..=8);
    let tame = Tame {
        checkpoints_first,
        flat_selects,
    };
    (0..n)
        .map(|_| tame.op(instruction(rng, &mut ids), false, false))
        .collect()
}

/// What [`generate`] leaves out.
#[derive(Clone, Copy)]
struct Tame {
    checkpoints_first: bool,
    flat_selects: bool,
}

impl Tame {
    /// `op` tamed: `later` when it is a later branch of a `select`,
    /// `branch` when it is a branch at all.
    fn op(self, op: Op, later: bool, branch: bool) -> Op {
        match op {
            Op::Checkpoint { name } if later && self.checkpoints_first => Op::Ask {
                key: name.replacen('c', "q", 1),
                deadline_min: None,
            },
            Op::Select { left, .. } if branch && self.flat_selects => self.op(*left, later, true),
            Op::Select { left, right } => Op::Select {
                left: Box::new(self.op(*left, later, true)),
                right: Box::new(self.op(*right, true, true)),
            },
            op => op,
        }
    }
}

fn next_id(ids: &mut u32) -> u32 {
    *ids += 1;
    *ids
}

fn instruction(rng: &mut fastrand::Rng, ids: &mut u32) -> Op {
    match rng.u8(0..100) {
        0..20 => Op::Spawn {
            names: {
                let id = next_id(ids);
                (0..rng.u8(1..=3))
                    .map(|j| format!("s{id}{}", char::from(b'a' + j)))
                    .collect()
            },
        },
        20..35 => Op::Select {
            left: Box::new(single(rng, ids, 1)),
            right: Box::new(single(rng, ids, 1)),
        },
        35..42 => Op::Status {
            message: format!("at {}", next_id(ids)),
        },
        42..48 => Op::Patched {
            name: format!("p{}", next_id(ids)),
        },
        _ => single(rng, ids, 0),
    }
}

/// One journaled step: what a `select` branch may be.
fn single(rng: &mut fastrand::Rng, ids: &mut u32, depth: u8) -> Op {
    match rng.u8(0..100) {
        0..40 => Op::Checkpoint {
            name: format!("c{}", next_id(ids)),
        },
        40..70 => Op::Ask {
            key: format!("q{}", next_id(ids)),
            deadline_min: rng.bool().then(|| rng.u64(30..=240)),
        },
        70..88 => Op::Sleep {
            minutes: rng.u64(60..=600),
        },
        _ if depth < 2 => Op::Select {
            left: Box::new(single(rng, ids, depth + 1)),
            right: Box::new(single(rng, ids, depth + 1)),
        },
        _ => Op::Checkpoint {
            name: format!("c{}", next_id(ids)),
        },
    }
}

/// Where the steps' closures report, shared by every engine of one run
/// (each engine holds it with its own generation).
#[derive(Debug, Default)]
pub(crate) struct Runs {
    log: Mutex<HashMap<String, StepRuns>>,
}

/// How often one step's closure started and completed, by engine generation.
#[derive(Debug, Default, Clone)]
pub(crate) struct StepRuns {
    /// The program's instruction the step belongs to.
    pub(crate) instruction: usize,
    pub(crate) started: Vec<u32>,
    pub(crate) completed: Vec<u32>,
}

impl Runs {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, StepRuns>> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every step's runs so far, by step name.
    pub(crate) fn snapshot(&self) -> HashMap<String, StepRuns> {
        self.lock().clone()
    }
}

/// What the interpreting tool takes as state: the shared [`Runs`] and the
/// generation of the engine it runs on.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    pub(crate) runs: Arc<Runs>,
    pub(crate) generation: u32,
    /// The instruction being interpreted.
    pub(crate) instruction: usize,
}

impl Probe {
    fn started(&self, name: &str) {
        let mut log = self.runs.lock();
        let runs = log.entry(name.to_owned()).or_default();
        runs.instruction = self.instruction;
        runs.started.push(self.generation);
    }

    fn completed(&self, name: &str) {
        let mut log = self.runs.lock();
        log.entry(name.to_owned())
            .or_default()
            .completed
            .push(self.generation);
    }

    /// The work of a step: reports its start, yields (a crash may land
    /// here), reports its end, and returns its name as its value.
    async fn work(self, name: String) -> Result<String, ToolError> {
        self.started(&name);
        tokio::task::yield_now().await;
        self.completed(&name);
        Ok(name)
    }
}

/// Runs a program; returns what each instruction saw, in order.
#[task_tool]
pub(crate) async fn program(probe: State<Probe>, ops: Vec<Op>) -> Result<Vec<String>, ToolError> {
    // Each run of a program has its own `Runs` and one task: a step's name
    // is its journal position.
    let probe = Probe::clone(&probe);
    let mut trace = Vec::with_capacity(ops.len());
    for (instruction, op) in ops.into_iter().enumerate() {
        let probe = Probe {
            instruction,
            ..probe.clone()
        };
        trace.push(interpret(probe, op).await?);
    }
    Ok(trace)
}

/// One instruction, as a future that starts its step when first polled.
fn interpret(probe: Probe, op: Op) -> BoxFuture<'static, Result<String, ToolError>> {
    Box::pin(async move {
        match op {
            Op::Checkpoint { name } => checkpoint(name.clone(), move || probe.work(name)).await,
            Op::Ask { key, deadline_min } => {
                let mut question = confirm(format!("{key}?")).key(key.as_str());
                if let Some(min) = deadline_min {
                    question = question.timeout(Duration::from_secs(min * 60));
                }
                match question.await {
                    Ok(yes) => Ok(format!("{key}={yes}")),
                    Err(AskError::Declined) => Ok(format!("{key} declined")),
                    Err(AskError::TimedOut) => Ok(format!("{key} timed out")),
                    Err(e) => Err(ToolError::new(format!("{key}: {e}"))),
                }
            }
            Op::Sleep { minutes } => {
                durable::sleep(Duration::from_secs(minutes * 60)).await;
                Ok(format!("slept {minutes}"))
            }
            Op::Select { left, right } => {
                match durable::select(interpret(probe.clone(), *left), interpret(probe, *right))
                    .await
                {
                    Either::Left(v) => Ok(format!("left({})", v?)),
                    Either::Right(v) => Ok(format!("right({})", v?)),
                }
            }
            Op::Spawn { names } => {
                let handles: Vec<_> = names
                    .into_iter()
                    .map(|name| {
                        let probe = probe.clone();
                        durable::spawn(name.clone(), move || probe.work(name))
                    })
                    .collect();
                let mut values = Vec::with_capacity(handles.len());
                for handle in handles {
                    values.push(handle.await?);
                }
                Ok(values.join("+"))
            }
            Op::Status { message } => {
                durable::status(message.clone());
                Ok(format!("status {message}"))
            }
            Op::Patched { name } => Ok(format!("{name}={}", durable::patched(name.clone()).await)),
        }
    })
}
