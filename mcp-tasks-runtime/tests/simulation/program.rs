//! Tool programs as data: a small AST over the task vocabulary, a seeded
//! generator of programs, the one tool that interprets them, and the model:
//! what a program must return given what the user did, computed from the
//! program alone. Each checkpoint and spawned step reports to the run's
//! [`Sim`] when its closure starts and completes, and each sleep when a run
//! reaches it and when it returns, for the oracles.

use std::{sync::Arc, time::Duration};

use futures::future::BoxFuture;
use mcp_tasks_runtime::{
    State, ToolError, checkpoint, confirm,
    durable::{self, Either},
    question::AskError,
    task_tool,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::faults::Sim;

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
    /// A durable `sleep` of this many milliseconds (short ones wait in
    /// their run, unless raced).
    Sleep { name: String, ms: u64 },
    /// `durable::now()`.
    Now,
    /// `durable::uuid()`.
    Uuid,
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
    let mut ops: Vec<Op> = (0..n)
        .map(|_| tame.op(instruction(rng, &mut ids), false, false))
        .collect();
    untie(&mut ops, &mut std::collections::BTreeSet::new());
    ops
}

/// Makes the questions' deadlines distinct (a minute later each, without a
/// draw, so the rest of the program stays as drawn). Two questions of a
/// `select` whose deadlines pass at the same instant both time out, and the
/// branch that wins is the one the store's timer sweep records first: a
/// run with other latencies may take the other, and both are right.
fn untie(ops: &mut [Op], taken: &mut std::collections::BTreeSet<u64>) {
    for op in ops {
        match op {
            Op::Ask {
                deadline_min: Some(min),
                ..
            } => {
                while !taken.insert(*min) {
                    *min += 1;
                }
            }
            Op::Select { left, right } => {
                untie(std::slice::from_mut(left.as_mut()), taken);
                untie(std::slice::from_mut(right.as_mut()), taken);
            }
            _ => {}
        }
    }
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
        42..46 => Op::Patched {
            name: format!("p{}", next_id(ids)),
        },
        46..48 => Op::Now,
        48..50 => Op::Uuid,
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
        70..80 => Op::Sleep {
            name: format!("z{}", next_id(ids)),
            ms: rng.u64(60..=600) * 60_000,
        },
        // Short sleeps wait in their run, outside races only: in a race
        // the winner would depend on when the user acts.
        80..88 if depth == 0 => Op::Sleep {
            name: format!("z{}", next_id(ids)),
            ms: rng.u64(50..=1500),
        },
        80..88 => Op::Sleep {
            name: format!("z{}", next_id(ids)),
            ms: rng.u64(60..=600) * 60_000,
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

/// What the interpreting tool takes as state: the run's [`Sim`] and the
/// generation of the node it runs on.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    pub(crate) sim: Arc<Sim>,
    pub(crate) generation: u32,
    /// The instruction being interpreted.
    pub(crate) instruction: usize,
}

impl Probe {
    /// The work of a step: reports its start, takes a seeded while of
    /// simulated time (a pause or a crash may land here), waits while its
    /// node is paused (and forever once it is dead), reports its end, and
    /// returns its name as its value.
    async fn work(self, name: String) -> Result<String, ToolError> {
        self.sim
            .step_started(&name, self.instruction, self.generation);
        let ms = self.sim.draw(300);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        self.sim.gate(self.generation).await;
        self.sim.step_completed(&name, self.generation);
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
        probe
            .sim
            .trace(format!("g{} instruction {instruction}", probe.generation));
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
            Op::Sleep { name, ms } => {
                let span = i64::try_from(ms).unwrap_or(i64::MAX);
                probe.sim.sleep_reached(&name, span, probe.generation);
                durable::sleep(Duration::from_millis(ms)).await;
                probe.sim.sleep_returned(&name, probe.generation);
                Ok(format!("slept {name}"))
            }
            Op::Now => {
                let now = durable::now().await;
                Ok(format!("now {}", now > std::time::UNIX_EPOCH))
            }
            Op::Uuid => Ok(format!("uuid of {}", durable::uuid().await.len())),
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

/// What the user did to a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resolution {
    Yes,
    No,
    Declined,
    TimedOut,
}

/// The model: what each instruction of `ops` must return, given how each
/// question was resolved and in which order (`answers`: key to the index
/// of the user's action and what it did), computed from the program
/// alone. `None` where the program alone does not decide it (a race won
/// by time, say); the differential oracle covers those.
pub(crate) fn expect(
    ops: &[Op],
    answers: &std::collections::BTreeMap<String, (usize, Resolution)>,
) -> Vec<Option<String>> {
    ops.iter().map(|op| value(op, answers)).collect()
}

/// When a branch of a race is ready: at once, at the user's action of this
/// index, or not decided by the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ready {
    AtOnce,
    Action(usize),
}

fn ready(
    op: &Op,
    answers: &std::collections::BTreeMap<String, (usize, Resolution)>,
) -> Option<Ready> {
    match op {
        Op::Checkpoint { .. } => Some(Ready::AtOnce),
        Op::Ask { key, .. } => match answers.get(key) {
            Some((i, Resolution::Yes | Resolution::No | Resolution::Declined)) => {
                Some(Ready::Action(*i))
            }
            _ => None,
        },
        _ => None,
    }
}

fn value(
    op: &Op,
    answers: &std::collections::BTreeMap<String, (usize, Resolution)>,
) -> Option<String> {
    Some(match op {
        Op::Checkpoint { name } => name.clone(),
        Op::Ask { key, .. } => match answers.get(key)?.1 {
            Resolution::Yes => format!("{key}=true"),
            Resolution::No => format!("{key}=false"),
            Resolution::Declined => format!("{key} declined"),
            Resolution::TimedOut => format!("{key} timed out"),
        },
        Op::Sleep { name, .. } => format!("slept {name}"),
        Op::Now => "now true".into(),
        Op::Uuid => "uuid of 32".into(),
        Op::Status { message } => format!("status {message}"),
        Op::Patched { name } => format!("{name}=true"),
        Op::Spawn { names } => names.join("+"),
        Op::Select { left, right } => {
            let l = ready(left, answers);
            let r = ready(right, answers);
            match (l, r) {
                // The first branch, ready at once, wins.
                (Some(Ready::AtOnce), _) => format!("left({})", value(left, answers)?),
                // Two questions: the one the user answered first.
                (Some(Ready::Action(a)), Some(Ready::Action(b))) if a < b => {
                    format!("left({})", value(left, answers)?)
                }
                (Some(Ready::Action(a)), Some(Ready::Action(b))) if b < a => {
                    format!("right({})", value(right, answers)?)
                }
                _ => return None,
            }
        }
    })
}

/// The steps whose closures must have completed at least once when the
/// program ended `completed`: those of its instructions and of the races'
/// winners the model decides.
pub(crate) fn must_run(
    ops: &[Op],
    answers: &std::collections::BTreeMap<String, (usize, Resolution)>,
) -> Vec<String> {
    fn walk(
        op: &Op,
        answers: &std::collections::BTreeMap<String, (usize, Resolution)>,
        out: &mut Vec<String>,
    ) {
        match op {
            Op::Checkpoint { name } => out.push(name.clone()),
            Op::Spawn { names } => out.extend(names.iter().cloned()),
            Op::Select { left, right } => match value(op, answers) {
                Some(v) if v.starts_with("left(") => walk(left, answers, out),
                Some(_) => walk(right, answers, out),
                None => {}
            },
            _ => {}
        }
    }
    let mut out = Vec::new();
    for op in ops {
        walk(op, answers, &mut out);
    }
    out
}
