//! Test-only: a server whose checkpoint effects can be counted from outside,
//! for the fleet tests (`examples/tests/fleet.rs`). Not an example to copy.
//!
//! Its one tool, `steps`, runs `steps` checkpoints in a row. Each
//! checkpoint's effect appends two lines to the file named by
//! `MCP_TASKS_EFFECTS` (one `write` each, in append mode, so that several
//! processes can share the file):
//!
//! ```text
//! begin <tag> <step> <nonce>
//! end <tag> <step> <nonce>
//! ```
//!
//! with `step_ms` milliseconds between them. The nonce (this instance's name,
//! then a counter) is the checkpoint's value, so the task's result names the
//! attempt of each step that was journaled; other attempts are runs that died
//! or lost their task before their value was recorded.
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
use mcp_tasks_runtime::{ToolError, checkpoint, mcp::TaskServer, task_tool};
use schemars::JsonSchema;
use serde::Serialize;

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
    record(&format!("begin {tag} {step} {nonce}\n"))?;
    tokio::time::sleep(Duration::from_millis(step_ms)).await;
    record(&format!("end {tag} {step} {nonce}\n"))?;
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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    mcp_tasks_examples::init_logging();
    let cli = mcp_tasks_examples::Cli::parse();
    let store = cli.store_location("fleet-fixture.db");
    let engine = cli.engine("fleet-fixture.db").await?.start().await?;
    let _ = INSTANCE.set(engine.instance().to_owned());
    let server = TaskServer::builder(engine)
        .name("mcp-tasks-fleet-fixture", env!("CARGO_PKG_VERSION"))
        .build();
    mcp_tasks_examples::serve(&cli, &store, server).await
}
