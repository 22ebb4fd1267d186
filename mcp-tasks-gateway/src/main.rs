//! The gateway: any MCP server's tools as durable tasks.
//!
//! ```sh
//! # An upstream started as a command, spoken to over stdio:
//! cargo run --bin mcp-tasks-gateway -- --addr 127.0.0.1:8080 -- npx -y @modelcontextprotocol/server-everything
//! # An upstream over Streamable HTTP:
//! cargo run --bin mcp-tasks-gateway -- --upstream-url http://127.0.0.1:3001/mcp
//! ```
//!
//! Every option of an mcp-tasks server applies (`mcp_tasks_server::Cli`:
//! `--store`, `--stdio`, `--admin`, `--jwt-issuer`, `--limit`, `--ttl`, …);
//! the gateway adds the upstream,
//! `--repeat-safe TOOL`, `--task-policy TOOL=POLICY`, `--inline-window
//! TOOL=MS` and `--sessions N`. A tool that was
//! running upstream when the gateway stopped is called again only when it
//! declares `idempotentHint: true` or is listed with `--repeat-safe`; any
//! other such task ends `failed` saying so (see the `mcp_tasks_gateway`
//! crate's docs).

use std::time::Duration;

use clap::Parser;
use mcp_tasks_gateway::{Gateway, Upstream};
use mcp_tasks_runtime::{mcp::TaskServer, tool::TaskPolicy};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Serves an MCP server's tools as durable tasks.
#[derive(Debug, Parser)]
#[command(name = "mcp-tasks-gateway")]
struct Args {
    #[command(flatten)]
    cli: mcp_tasks_server::Cli,
    /// The upstream's Streamable HTTP endpoint, instead of a command.
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    upstream_url: Option<String>,
    /// A tool that is safe to call again when the gateway stopped while it
    /// ran upstream (as if it declared `idempotentHint: true`). Repeatable.
    #[arg(long = "repeat-safe", value_name = "TOOL")]
    repeat_safe: Vec<String>,
    /// A tool's task policy, whatever the upstream declares:
    /// `TOOL=required` (only as a task), `TOOL=optional` (a task when the
    /// client declared the tasks extension) or `TOOL=forbidden` (never a
    /// task: passed upstream as it comes). `*=POLICY` sets the policy of
    /// every tool that neither this nor the upstream names (default
    /// `optional`). Repeatable.
    #[arg(long = "task-policy", value_name = "TOOL=POLICY")]
    task_policies: Vec<String>,
    /// Run a call of TOOL for up to MS milliseconds before answering: an
    /// upstream that answers (or asks) within it is answered without a
    /// task, and otherwise the client gets the task, the upstream call
    /// still in flight. `*=MS` sets it for every tool (default 0: the task
    /// at once). Repeatable.
    #[arg(long = "inline-window", value_name = "TOOL=MS")]
    inline_windows: Vec<String>,
    /// At most this many sessions open to the upstream at once, each
    /// carrying one call (over stdio, each is a process of the command);
    /// further calls wait for a free one.
    #[arg(long, value_name = "N", default_value_t = mcp_tasks_gateway::DEFAULT_SESSIONS)]
    sessions: usize,
    /// The upstream command and its arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

fn upstream(args: &Args) -> Result<Upstream, BoxError> {
    if let Some(url) = &args.upstream_url {
        return Ok(Upstream::http(url.clone()));
    }
    let Some((program, rest)) = args.command.split_first() else {
        return Err("name the upstream: `-- COMMAND ARGS…` (stdio) or `--upstream-url URL`".into());
    };
    Ok(Upstream::command(program.clone(), rest.iter().cloned()))
}

fn window(setting: &str) -> Result<(String, Duration), BoxError> {
    let (tool, ms) = setting
        .split_once('=')
        .ok_or_else(|| format!("--inline-window {setting}: expected TOOL=MS"))?;
    let ms: u64 = ms.parse().map_err(|_| {
        format!("--inline-window {setting}: `{ms}` is not a number of milliseconds")
    })?;
    Ok((tool.to_owned(), Duration::from_millis(ms)))
}

fn policy(setting: &str) -> Result<(String, TaskPolicy), BoxError> {
    let (tool, policy) = setting
        .split_once('=')
        .ok_or_else(|| format!("--task-policy {setting}: expected TOOL=POLICY"))?;
    let policy = match policy {
        "required" => TaskPolicy::Required,
        "optional" => TaskPolicy::Optional,
        "forbidden" => TaskPolicy::Forbidden,
        other => {
            return Err(format!(
                "--task-policy {setting}: `{other}` is not a policy (required, optional or forbidden)"
            )
            .into());
        }
    };
    Ok((tool.to_owned(), policy))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let cli = &args.cli;
    let _traces = mcp_tasks_server::init_tracing(cli, "mcp-tasks-gateway")?;
    let mut gateway = Gateway::builder(upstream(&args)?).sessions(args.sessions);
    for tool in &args.repeat_safe {
        gateway = gateway.repeat_safe(tool.clone());
    }
    for setting in &args.task_policies {
        gateway = match policy(setting)? {
            (tool, policy) if tool == "*" => gateway.default_policy(policy),
            (tool, policy) => gateway.policy(tool, policy),
        };
    }
    let gateway = gateway.connect().await?;
    let store = cli.store_location("gateway.db");
    let builder = cli
        .engine("gateway.db")
        .await?
        .registry(gateway.registry()?);
    let engine = cli.check_replay_if_asked(builder).await?.start().await?;
    gateway.follow(&engine);
    let mut server = cli.auth(cli.state_keys(TaskServer::builder(engine))?)?;
    for setting in &args.inline_windows {
        server = match window(setting)? {
            (tool, window) if tool == "*" => server.inline_window(window),
            (tool, window) => server.tool_inline_window(tool, window),
        };
    }
    let server = server
        .extras(gateway.passthrough())
        .name("mcp-tasks-gateway", env!("CARGO_PKG_VERSION"));
    mcp_tasks_server::serve(cli, &store, server).await
}
