//! A server whose one tool, `report`, comes in three versions, to show (and
//! test, in `tests/e2e/versions.rs`) a deploy with tasks in flight.
//!
//! `MCP_TASKS_REPORT_VERSION` (1, 2 or 3; default 3) picks the version this
//! process serves, as deploying that build would: each version's fn is
//! compiled in, but the registry is built by hand with that one alone (two
//! tools of one name cannot share a registry, so
//! `Registry::from_inventory` is not used here).
//!
//! - Version 1 asks whether to send the report, then sends it as text.
//! - Version 2 sends HTML. Tasks that version 1 started keep the text path:
//!   `durable::patched("html")` comes first, so their journal, which holds the
//!   question at that position, replays `false`.
//! - Version 3 drops the text path and replays only versions 2 and 3
//!   (`replays_from = 2`): when it starts, it fails the unfinished tasks of
//!   version 1, naming the versions.
//!
//! It takes the examples' command line (`--store`, `--addr`, ...); its
//! default store is `versioned-report.db`.

use clap::Parser;
use mcp_tasks_runtime::{
    Elicit, ToolError, ask_user, checkpoint, durable,
    mcp::TaskServer,
    task_tool,
    tool::{Registry, ToolDescriptor},
};
use schemars::JsonSchema;
use serde::Deserialize;

/// Whether to send the report.
#[derive(Debug, Deserialize, JsonSchema, Elicit)]
struct Approval {
    /// Send it now?
    send: bool,
}

/// Asks whether to send the report.
async fn approval() -> Result<bool, ToolError> {
    let answer: Approval = ask_user("Send the report?").key("send").await?;
    Ok(answer.send)
}

/// Sends a team's report (version 1: as text).
#[task_tool(name = "report")]
async fn report_v1(team: String) -> Result<String, ToolError> {
    if !approval().await? {
        return Ok("not sent".into());
    }
    let sent = checkpoint("send-text", || async {
        Ok(format!("text report for {team}"))
    })
    .await?;
    Ok(format!("sent the {sent}"))
}

/// Sends a team's report (version 2: as HTML; tasks of version 1 finish as
/// text).
#[task_tool(name = "report", version = 2)]
async fn report_v2(team: String) -> Result<String, ToolError> {
    let html = durable::patched("html").await;
    if !approval().await? {
        return Ok("not sent".into());
    }
    let sent = if html {
        checkpoint("send-html", || async {
            Ok(format!("HTML report for {team}"))
        })
        .await?
    } else {
        checkpoint("send-text", || async {
            Ok(format!("text report for {team}"))
        })
        .await?
    };
    Ok(format!("sent the {sent}"))
}

/// Sends a team's report (version 3: HTML only; replays versions 2 and 3).
#[task_tool(name = "report", version = 3, replays_from = 2)]
async fn report_v3(team: String) -> Result<String, ToolError> {
    durable::patched("html").await;
    if !approval().await? {
        return Ok("not sent".into());
    }
    let sent = checkpoint("send-html", || async {
        Ok(format!("HTML report for {team}"))
    })
    .await?;
    Ok(format!("sent the {sent}"))
}

/// The version `MCP_TASKS_REPORT_VERSION` names.
fn served() -> Result<&'static ToolDescriptor, String> {
    let version = std::env::var("MCP_TASKS_REPORT_VERSION").unwrap_or_else(|_| "3".into());
    match version.as_str() {
        "1" => Ok(report_v1_tool()),
        "2" => Ok(report_v2_tool()),
        "3" => Ok(report_v3_tool()),
        other => Err(format!(
            "MCP_TASKS_REPORT_VERSION={other}: expected 1, 2 or 3"
        )),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let cli = mcp_tasks_server::Cli::parse();
    // Kept to the end: when it drops, the spans still buffered are sent.
    let _traces = mcp_tasks_server::init_tracing(&cli, "mcp-tasks-versioned-report")?;
    let store = cli.store_location("versioned-report.db");
    let builder = cli
        .engine("versioned-report.db")
        .await?
        .registry(Registry::new().with(served()?)?);
    let engine = cli.check_replay_if_asked(builder).await?.start().await?;
    let server =
        TaskServer::builder(engine).name("mcp-tasks-versioned-report", env!("CARGO_PKG_VERSION"));
    mcp_tasks_server::serve(&cli, &store, server).await
}
