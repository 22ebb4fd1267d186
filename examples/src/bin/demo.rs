//! The demo server: a realistic long tool, `deploy`, that builds, asks for
//! approval, and rolls out, with checkpoints and status messages throughout.
//!
//! Run it with `cargo run --bin demo` (HTTP on 127.0.0.1:8080/mcp, tasks in
//! `demo.db`), or `cargo run --bin demo -- --stdio`. Kill it at any point and
//! start it again: unfinished deploys carry on from their last checkpoint.
//!
//! The tool reaches its (fake) cloud through a `Cloud` client handed to it as
//! state, the way a real one would reach its CI and cloud APIs.

use std::time::Duration;

use clap::Parser;
use mcp_tasks_runtime::{
    Elicit, State, ToolError, ask_user, checkpoint, durable, mcp::TaskServer, question::AskError,
    task_tool,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The result of a deploy.
#[derive(Debug, Serialize, JsonSchema)]
struct DeployReport {
    /// The service deployed.
    service: String,
    /// The build that went out.
    build: String,
    /// How many instances run it now.
    instances: u32,
}

/// The operator's answer before a rollout.
#[derive(Debug, Deserialize, JsonSchema, Elicit)]
struct Approval {
    /// Roll the build out to production?
    approve: bool,
    /// Optional note for the deploy log.
    note: Option<String>,
}

/// A build, as the CI step returns it (journaled, so it is never built twice).
#[derive(Debug, Serialize, Deserialize)]
struct Build {
    id: String,
    artifacts: u32,
}

/// How long the operator has to approve a rollout.
const APPROVAL_WINDOW: Duration = Duration::from_secs(30 * 60);

/// Builds a service at a git ref, asks the operator for approval (for 30
/// minutes at most), and rolls it out to production in waves. Takes about a
/// minute.
#[task_tool(ttl = "2h", poll_interval = "2s", destructive, open_world)]
async fn deploy(
    cloud: State<Cloud>,
    /// The service to deploy, e.g. `billing`.
    service: String,
    /// The git ref to build (branch, tag or commit).
    git_ref: String,
) -> Result<DeployReport, ToolError> {
    durable::status(format!("building {service}@{git_ref}"));
    let build: Build = checkpoint("build", || cloud.build(&service, &git_ref)).await?;
    durable::status(format!(
        "built {} ({} artifacts); waiting for approval",
        build.id, build.artifacts
    ));

    let question = ask_user(format!(
        "Roll {service}@{git_ref} (build {}) out to production?",
        build.id
    ));
    let answer: Approval = match question.key("approval").timeout(APPROVAL_WINDOW).await {
        Err(AskError::TimedOut) => {
            return Err(ToolError::new(format!(
                "no approval within 30 minutes: {} was not rolled out",
                build.id
            )));
        }
        answer => answer?,
    };
    let note = answer.note.unwrap_or_default();
    if !answer.approve {
        return Err(ToolError::new(
            format!("rollout of {} declined {note}", build.id)
                .trim_end()
                .to_owned(),
        ));
    }
    if !note.is_empty() {
        durable::status(format!("approved: {note}"));
    }

    let mut instances = 0;
    for wave in 1..=3 {
        durable::status(format!("rolling out wave {wave}/3"));
        instances +=
            checkpoint(format!("wave-{wave}"), || cloud.rollout_wave(&build, wave)).await?;
        // A durable pause between waves: the task holds no worker meanwhile.
        durable::sleep(cloud.paced(5)).await;
    }
    Ok(DeployReport {
        service,
        build: build.id,
        instances,
    })
}

/// A stand-in for the CI system and cloud API a real deploy tool would call,
/// handed to `deploy` as state (`EngineBuilder::state`).
#[derive(Debug)]
struct Cloud {
    /// Scales every wait: `MCP_TASKS_DEMO_PACE` (default 1; the tests run
    /// the demo at a fraction of real time).
    pace: f64,
}

impl Cloud {
    fn from_env() -> Self {
        let pace = std::env::var("MCP_TASKS_DEMO_PACE")
            .ok()
            .and_then(|p| p.parse::<f64>().ok())
            .filter(|p| p.is_finite() && *p >= 0.0)
            .unwrap_or(1.0);
        Self { pace }
    }

    /// `secs` seconds at this cloud's pace.
    fn paced(&self, secs: u64) -> Duration {
        Duration::from_secs_f64(secs as f64 * self.pace)
    }

    /// Builds `service` at `git_ref`: takes a while, then yields a build.
    async fn build(&self, service: &str, git_ref: &str) -> Result<Build, ToolError> {
        tokio::time::sleep(self.paced(10)).await;
        let short: String = git_ref.chars().take(7).collect();
        Ok(Build {
            id: format!(
                "{service}-{short}-{}",
                mcp_tasks_runtime::durable::uuid()
                    .await
                    .get(..6)
                    .unwrap_or("0")
            ),
            artifacts: 3,
        })
    }

    /// One wave of a rollout.
    async fn rollout_wave(&self, _build: &Build, wave: u32) -> Result<u32, ToolError> {
        tokio::time::sleep(self.paced(5)).await;
        Ok(wave * 2)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let cli = mcp_tasks_server::Cli::parse();
    // Kept to the end: when it drops, the spans still buffered are sent.
    let _traces = mcp_tasks_server::init_tracing(&cli, "mcp-tasks-demo")?;
    let store = cli.store_location("demo.db");
    let builder = cli.engine("demo.db").await?.state(Cloud::from_env());
    let engine = cli.check_replay_if_asked(builder).await?.start().await?;
    let server = cli
        .auth(cli.state_keys(TaskServer::builder(engine))?)?
        .name("mcp-tasks-demo", env!("CARGO_PKG_VERSION"))
        .instructions("Call `deploy` to build and roll out a service; it runs as a task and asks for approval before the rollout.")
        ;
    mcp_tasks_server::serve(&cli, &store, server).await
}

/// `deploy`, tested with the runtime's testing kit: an in-memory engine with a
/// clock of its own, and a cloud that takes no time.
#[cfg(test)]
mod tests {
    use std::time::Duration;

    use mcp_tasks_runtime::testing::{TestTask, ToolTest};
    use serde_json::json;

    use super::{Cloud, deploy_tool};

    async fn deploy() -> TestTask {
        let test = ToolTest::new(deploy_tool()).state(Cloud { pace: 0.0 });
        let started = test.start().await;
        started
            .call(json!({"service": "billing", "git_ref": "v2.3.0"}))
            .await
    }

    #[tokio::test]
    async fn an_approved_deploy_rolls_out_every_wave() {
        let task = deploy().await;
        assert_eq!(task.question().await.key(), "approval");
        task.answer("approval", json!({"approve": true})).await;
        let report: serde_json::Value = task.output().await.unwrap();
        assert_eq!(
            (report["service"].as_str(), report["instances"].as_u64()),
            (Some("billing"), Some(12))
        );
    }

    #[tokio::test]
    async fn a_declined_deploy_rolls_nothing_out() {
        let task = deploy().await;
        task.answer("approval", json!({"approve": false, "note": "not today"}))
            .await;
        let error = task.output::<serde_json::Value>().await.unwrap_err();
        assert!(
            error.starts_with("rollout of billing-v2.3.0-")
                && error.ends_with("declined not today"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_deploy_nobody_approves_gives_up_after_30_minutes() {
        let task = deploy().await;
        task.question().await;
        task.advance(Duration::from_secs(30 * 60)).await;
        let error = task.output::<serde_json::Value>().await.unwrap_err();
        assert!(
            error.starts_with("no approval within 30 minutes"),
            "{error}"
        );
    }
}
