//! A server whose one tool, `digest`, is changed by a deploy, to show (and
//! test, in `tests/e2e/replay_check.rs`) the replay check that gates
//! it: `versioned-digest --check-replay --store FILE` with the new build,
//! before the deploy.
//!
//! `MCP_TASKS_DIGEST_VERSION` picks the build this process is:
//!
//! - `1`: fetches the team's members, computes its stats, then waits (a
//!   question, or a day's durable sleep with `asleep: true`) and sends.
//! - `2-unpatched`: version 2 as first written, computing the stats before
//!   fetching, with no `patched`. Tasks of version 1 in flight would fail
//!   as non-deterministic when they resume: the check names each one with
//!   the position and both steps, and exits 1.
//! - `2` (the default): the new order behind `durable::patched("stats-first")`;
//!   tasks of version 1 keep their order, and the check passes.
//!
//! It takes the examples' command line (`--store`, `--addr`,
//! `--check-replay`, ...); its default store is `versioned-digest.db`.

use std::time::Duration;

use clap::Parser;
use mcp_tasks_runtime::{
    ToolError, checkpoint, confirm, durable,
    mcp::TaskServer,
    task_tool,
    tool::{Registry, ToolDescriptor},
};

async fn members(team: &str) -> Result<usize, ToolError> {
    checkpoint("fetch-members", || async { Ok(team.len()) }).await
}

async fn stats(team: &str) -> Result<String, ToolError> {
    checkpoint("compute-stats", || async {
        Ok(format!("{team}: 3 releases"))
    })
    .await
}

/// Waits a day, or asks; then sends.
async fn wait_and_send(team: &str, asleep: bool) -> Result<String, ToolError> {
    if asleep {
        durable::sleep(Duration::from_secs(24 * 3600)).await;
    } else if !confirm(format!("Send {team}'s digest?")).await? {
        return Ok("not sent".into());
    }
    checkpoint("send", || async { Ok(format!("sent {team}'s digest")) }).await
}

/// Sends a team's digest (version 1: members, then stats).
#[task_tool(name = "digest")]
async fn digest_v1(team: String, asleep: bool) -> Result<String, ToolError> {
    let n = members(&team).await?;
    let s = stats(&team).await?;
    let sent = wait_and_send(&team, asleep).await?;
    Ok(format!("{sent} ({n} members, {s})"))
}

/// Sends a team's digest (version 2 as first written: stats first, and no
/// `patched`, so version 1's tasks diverge).
#[task_tool(name = "digest", version = 2)]
async fn digest_v2_unpatched(team: String, asleep: bool) -> Result<String, ToolError> {
    let s = stats(&team).await?;
    let n = members(&team).await?;
    let sent = wait_and_send(&team, asleep).await?;
    Ok(format!("{sent} ({n} members, {s})"))
}

/// Sends a team's digest (version 2: stats first for new tasks; tasks of
/// version 1 keep their order).
#[task_tool(name = "digest", version = 2)]
async fn digest_v2(team: String, asleep: bool) -> Result<String, ToolError> {
    let (n, s) = if durable::patched("stats-first").await {
        let s = stats(&team).await?;
        (members(&team).await?, s)
    } else {
        (members(&team).await?, stats(&team).await?)
    };
    let sent = wait_and_send(&team, asleep).await?;
    Ok(format!("{sent} ({n} members, {s})"))
}

/// The build `MCP_TASKS_DIGEST_VERSION` names.
fn served() -> Result<&'static ToolDescriptor, String> {
    let version = std::env::var("MCP_TASKS_DIGEST_VERSION").unwrap_or_else(|_| "2".into());
    match version.as_str() {
        "1" => Ok(digest_v1_tool()),
        "2-unpatched" => Ok(digest_v2_unpatched_tool()),
        "2" => Ok(digest_v2_tool()),
        other => Err(format!(
            "MCP_TASKS_DIGEST_VERSION={other}: expected 1, 2-unpatched or 2"
        )),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let cli = mcp_tasks_server::Cli::parse();
    let _traces = mcp_tasks_server::init_tracing(&cli, "mcp-tasks-versioned-digest")?;
    let store = cli.store_location("versioned-digest.db");
    let builder = cli
        .engine("versioned-digest.db")
        .await?
        .registry(Registry::new().with(served()?)?);
    let engine = cli.check_replay_if_asked(builder).await?.start().await?;
    let server =
        TaskServer::builder(engine).name("mcp-tasks-versioned-digest", env!("CARGO_PKG_VERSION"));
    mcp_tasks_server::serve(&cli, &store, server).await
}
