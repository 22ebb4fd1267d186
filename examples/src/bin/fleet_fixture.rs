//! Test-only: a server whose checkpoint effects can be counted from outside,
//! for the fleet tests (`tests/e2e/fleet.rs`). Not an example to copy.
//!
//! Its tool `steps` runs `steps` checkpoints in a row. Each
//! checkpoint's effect appends two lines to the file named by
//! `MCP_TASKS_EFFECTS` (one `write` each, in append mode, so that several
//! processes can share the file):
//!
//! ```text
//! begin <tag> <step> <nonce> <key>
//! end <tag> <step> <nonce> <key>
//! ```
//!
//! with `step_ms` milliseconds between them. The nonce (this instance's name,
//! then a counter) is the checkpoint's value, so the task's result names the
//! attempt of each step that was journaled; other attempts are runs that died
//! or lost their task before their value was recorded. The key is the step's
//! idempotency key (`mcp_tasks_runtime::durable::step_key`), the same for every
//! attempt of one step.
//!
//! Its tool `approve_then_steps` asks for approval first, then runs like
//! `steps`: for the `requestState` replay tests (`tests/e2e/hardening.rs`).
//!
//! Its tool `ask_with_deadline` asks a question with a deadline and says
//! which branch it took, for the deadline tests
//! (`tests/e2e/deadlines.rs`).
//!
//! Its tool `hold` records `begin <tag> 0 <nonce>`, waits until a file named
//! like the effects file with the extension `release` exists, then records
//! `end <tag> 0 <nonce>`: for the test that inline calls beyond the limit
//! wait (`tests/e2e/hardening.rs`).
//!
//! Its tool `nap` sleeps on a durable timer for `seconds`, for the metrics
//! test (`tests/e2e/admin.rs`).
//!
//! It takes the examples' command line (`--store`, `--instance`, `--lease`,
//! `--scan-interval`, ...); its default store is `fleet-fixture.db`.

use std::{
    io::Write as _,
    sync::{
        OnceLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use clap::Parser;
use mcp_tasks_runtime::{
    Elicit, ToolError, ask_user, checkpoint,
    durable::{self, Either},
    mcp::TaskServer,
    question::AskError,
    task_tool,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// This instance's name, for nonces and results.
static INSTANCE: OnceLock<String> = OnceLock::new();

fn instance() -> &'static str {
    INSTANCE.get().map_or("?", String::as_str)
}

/// What `steps` returns.
#[derive(Debug, Serialize, JsonSchema)]
struct Steps {
    /// The caller's tag.
    tag: String,
    /// The journaled nonce of each step, in order.
    nonces: Vec<String>,
    /// The instance that ran the task to its end.
    finished_by: String,
}

/// Runs `steps` checkpoints, each an effect counted in `MCP_TASKS_EFFECTS`
/// that takes `step_ms` milliseconds.
#[task_tool(poll_interval = "100ms")]
async fn steps(
    /// Names the task in the effects file.
    tag: String,
    /// How many checkpoints.
    steps: u32,
    /// How long each checkpoint's effect takes, in milliseconds.
    step_ms: u64,
) -> Result<Steps, ToolError> {
    run_steps(tag, steps, step_ms).await
}

/// Sleeps on a durable timer for `seconds`.
#[task_tool(poll_interval = "100ms")]
async fn nap(
    /// How long.
    seconds: u64,
) -> String {
    mcp_tasks_runtime::durable::sleep(Duration::from_secs(seconds)).await;
    "rested".to_owned()
}

/// The checkpoints of `steps` and `approve_then_steps`, and their result.
async fn run_steps(tag: String, steps: u32, step_ms: u64) -> Result<Steps, ToolError> {
    let mut nonces = Vec::new();
    for step in 0..steps {
        let tag = tag.clone();
        let nonce: String =
            checkpoint(format!("step-{step}"), || effect(tag, step, step_ms)).await?;
        nonces.push(nonce);
    }
    Ok(Steps {
        tag,
        nonces,
        finished_by: instance().to_owned(),
    })
}

/// One checkpoint's effect: `begin`, a pause, `end`.
async fn effect(tag: String, step: u32, step_ms: u64) -> Result<String, ToolError> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nonce = format!("{}.{}", instance(), NEXT.fetch_add(1, Ordering::Relaxed));
    let key = durable::step_key().map_or_else(|| "-".to_owned(), |k| k.to_string());
    record(&format!("begin {tag} {step} {nonce} {key}\n"))?;
    tokio::time::sleep(Duration::from_millis(step_ms)).await;
    record(&format!("end {tag} {step} {nonce} {key}\n"))?;
    Ok(nonce)
}

/// Records its start, waits for the release file, records its end.
#[task_tool]
async fn hold(
    /// Names the call in the effects file.
    tag: String,
) -> Result<String, ToolError> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nonce = format!("{}.{}", instance(), NEXT.fetch_add(1, Ordering::Relaxed));
    // The effects file records each run, outside the journal on purpose.
    #[allow_nondeterminism]
    record(&format!("begin {tag} 0 {nonce}\n"))?;
    #[allow_nondeterminism]
    let release = std::env::var_os("MCP_TASKS_EFFECTS")
        .map(|p| std::path::PathBuf::from(p).with_extension("release"));
    while let Some(release) = &release
        && !release.exists()
    {
        // Polls the file: the wait is not part of the result.
        #[allow_nondeterminism]
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    #[allow_nondeterminism]
    record(&format!("end {tag} 0 {nonce}\n"))?;
    Ok(nonce)
}

/// Appends `line` to `MCP_TASKS_EFFECTS` in one write.
fn record(line: &str) -> Result<(), ToolError> {
    let Some(path) = std::env::var_os("MCP_TASKS_EFFECTS") else {
        return Ok(());
    };
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .map_err(|e| ToolError::new(format!("cannot record the effect: {e}")))
}

/// Asks for approval (key `approval`), then runs `steps` checkpoints as
/// `steps` does, each an effect counted in `MCP_TASKS_EFFECTS`: called
/// inline (no tasks extension), the question is an MRTR round, and a
/// replayed `requestState` would show as extra effects.
#[task_tool(poll_interval = "100ms")]
async fn approve_then_steps(
    /// Names the call in the effects file.
    tag: String,
    /// How many checkpoints after the approval.
    steps: u32,
    /// How long each checkpoint's effect takes, in milliseconds.
    step_ms: u64,
) -> Result<Steps, ToolError> {
    let answer = ask_user::<Approve>("Go ahead?").key("approval").await?;
    if !answer.approve {
        return Err(ToolError::new("not approved"));
    }
    run_steps(tag, steps, step_ms).await
}

/// The question `ask_with_deadline` asks.
#[derive(Deserialize, JsonSchema, Elicit)]
struct Approve {
    /// Go ahead?
    approve: bool,
}

/// What `ask_with_deadline` returns.
#[derive(Debug, Serialize, JsonSchema)]
struct Branch {
    /// `answered` or `timed_out`: the branch the question took.
    branch: String,
    /// The answer, when one came in time.
    approve: Option<bool>,
    /// One per round: the branch the run that recorded the round saw when
    /// it replayed the question, and which run of this process that was.
    replays: Vec<Replay>,
}

/// What one round recorded.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Replay {
    /// The branch the run saw.
    branch: String,
    /// The run (counted in this process).
    run: u64,
}

/// Asks for approval (key `approval`) with a deadline `deadline_ms` from
/// when it is first asked. Then, when `follow_up`, asks a second question
/// (key `next`, no deadline). Then `rounds` rounds: each journals the branch
/// its run saw and asks a question (key `r0`, `r1`, ...), so that every
/// round is recorded by a new run, started by the answer to the round
/// before, which replayed the first question from the journal. With `race`,
/// the question has no deadline of its own: it is raced against a durable
/// `sleep` of `deadline_ms` with `select` (the question stays at journal
/// position 0; the race's winner is journaled at 1).
#[task_tool(poll_interval = "100ms")]
async fn ask_with_deadline(
    /// The question's deadline, in milliseconds.
    deadline_ms: u64,
    /// Ask a second question after the first.
    follow_up: bool,
    /// How many rounds replay the question.
    rounds: u32,
    /// Race the question against a durable sleep instead.
    race: Option<bool>,
) -> Result<Branch, ToolError> {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    let deadline = Duration::from_millis(deadline_ms);
    let question = ask_user::<Approve>("Go ahead?").key("approval");
    let answer = if race == Some(true) {
        match durable::select(question, mcp_tasks_runtime::durable::sleep(deadline)).await {
            Either::Left(answer) => answer,
            Either::Right(()) => Err(AskError::TimedOut),
        }
    } else {
        question.timeout(deadline).await
    };
    let (branch, approve) = match answer {
        Ok(a) => ("answered", Some(a.approve)),
        Err(AskError::TimedOut) => ("timed_out", None),
        Err(e) => return Err(ToolError::new(e.to_string())),
    };
    if follow_up {
        ask_user::<Approve>("And then?")
            .key("next")
            .await
            .map_err(|e| ToolError::new(e.to_string()))?;
    }
    let mut replays = Vec::new();
    for round in 0..rounds {
        let seen = durable::step(format!("round-{round}"), || async move {
            Replay {
                branch: branch.to_owned(),
                run,
            }
        })
        .await;
        replays.push(seen);
        ask_user::<Approve>(format!("Round {round}?"))
            .key(format!("r{round}"))
            .await
            .map_err(|e| ToolError::new(e.to_string()))?;
    }
    Ok(Branch {
        branch: branch.to_owned(),
        approve,
        replays,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let cli = mcp_tasks_server::Cli::parse();
    // Kept to the end: when it drops, the spans still buffered are sent.
    let _traces = mcp_tasks_server::init_tracing(&cli, "mcp-tasks-fleet-fixture")?;
    let store = cli.store_location("fleet-fixture.db");
    let builder = cli.engine("fleet-fixture.db").await?;
    let engine = cli.check_replay_if_asked(builder).await?.start().await?;
    let _ = INSTANCE.set(engine.instance().to_owned());
    let server = cli
        .state_keys(TaskServer::builder(engine))?
        .name("mcp-tasks-fleet-fixture", env!("CARGO_PKG_VERSION"));
    mcp_tasks_server::serve(&cli, &store, server).await
}
