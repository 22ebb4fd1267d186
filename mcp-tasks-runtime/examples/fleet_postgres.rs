//! Several server processes sharing their tasks through PostgreSQL.
//!
//! ```sh
//! export DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
//! cargo run -p mcp-tasks-runtime --example fleet_postgres -- 127.0.0.1:8080 a
//! cargo run -p mcp-tasks-runtime --example fleet_postgres -- 127.0.0.1:8081 b
//! ```
//!
//! Start a `nightly_export` on one instance and read it (`tasks/get`) on the
//! other: every instance answers for every task. Kill the instance running
//! it (`kill -9`) and another claims it once its lease runs out, then goes
//! on from its last checkpoint; stop one with Ctrl-C and it hands its tasks
//! over at once. `MCP_TASKS_SCHEMA` picks the Postgres schema of the tables
//! (default `mcp_tasks`; created and migrated on start).

use std::time::Duration;

use mcp_tasks_runtime::{
    Engine, ToolError, checkpoint, durable,
    mcp::{self, TaskServer},
    store::PostgresStore,
    task_tool,
};
use schemars::JsonSchema;
use serde::Serialize;

/// What the export returns.
#[derive(Serialize, JsonSchema)]
struct Exported {
    /// The batches written.
    batches: u32,
    /// The instances that ran a part of the task.
    ran_on: Vec<String>,
}

/// Exports a table in batches, pausing between them.
#[task_tool(ttl = "1d", poll_interval = "1s")]
async fn nightly_export(
    /// How many batches to write.
    batches: u32,
) -> Result<Exported, ToolError> {
    let mut ran_on: Vec<String> = Vec::new();
    for batch in 1..=batches {
        durable::status(format!("batch {batch} of {batches}"));
        // Journaled: a batch written before a takeover is not written again.
        let instance = checkpoint(format!("batch-{batch}"), || async {
            Ok::<_, ToolError>(instance_name())
        })
        .await?;
        if !ran_on.contains(&instance) {
            ran_on.push(instance);
        }
        // A durable pause: the task holds no worker and no lease meanwhile,
        // and whichever instance finds it due first goes on with it.
        durable::sleep(Duration::from_millis(200)).await;
    }
    Ok(Exported { batches, ran_on })
}

/// This process's name in the fleet (its leases carry it).
fn instance_name() -> String {
    std::env::args()
        .nth(2)
        .unwrap_or_else(|| format!("pid-{}", std::process::id()))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let schema = std::env::var("MCP_TASKS_SCHEMA").unwrap_or_else(|_| "mcp_tasks".to_owned());
    let store = PostgresStore::builder(url).schema(schema).connect().await?;
    let engine = Engine::builder(store)
        .instance(instance_name()) // unique per instance
        .lease(Duration::from_secs(10)) // how long a silent instance keeps its tasks
        .start()
        .await?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("serving http://{}/mcp", listener.local_addr()?);
    mcp::serve(listener, TaskServer::new(engine))
        // Ctrl-C: no new task, running steps finish, then this instance's
        // leases are released, so that the others take its tasks over now
        // rather than when the leases run out.
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
