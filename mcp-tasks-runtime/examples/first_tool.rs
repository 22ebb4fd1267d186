//! A first task tool, served over Streamable HTTP.
//!
//! ```sh
//! cargo run -p mcp-tasks-runtime --example first_tool            # http://127.0.0.1:8080/mcp
//! cargo run -p mcp-tasks-runtime --example first_tool -- 127.0.0.1:9000
//! ```
//!
//! `#[task_tool]` turns the `async fn` into an MCP tool. A client that
//! declares the tasks extension gets a task at once and polls it; any other
//! client gets the result when the call returns. Each `checkpoint` is
//! journaled in `first_tool.db`: stop the server mid-task, start it again,
//! and the task carries on after its last finished step.

use std::time::Duration;

use mcp_tasks_runtime::{
    Engine, ToolError, checkpoint, durable,
    mcp::{self, TaskServer},
    store::SqliteStore,
    task_tool,
};
use schemars::JsonSchema;
use serde::Serialize;

/// What the tool returns (its `structuredContent`, described by an
/// `outputSchema` derived from this type).
#[derive(Serialize, JsonSchema)]
struct Count {
    /// The lines counted.
    lines: usize,
    /// The words on them.
    words: usize,
}

/// Counts the words of a text, one line at a time.
///
/// The doc comment is the tool's description, and each parameter's doc
/// comment describes that argument in the tool's input schema.
#[task_tool]
async fn count_words(
    /// The text to count.
    text: String,
) -> Result<Count, ToolError> {
    let lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut words = 0;
    for (n, line) in lines.iter().enumerate() {
        // Shown to the client as the task's `statusMessage`.
        durable::status(format!("line {} of {}", n + 1, lines.len()));
        // A step: run once, its value journaled. After a restart the value
        // comes from the journal and the closure does not run again.
        words += checkpoint(format!("line-{n}"), || async move {
            tokio::time::sleep(Duration::from_millis(50)).await; // slow work
            Ok::<_, ToolError>(line.split_whitespace().count())
        })
        .await?;
    }
    Ok(Count {
        lines: lines.len(),
        words,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    // Every `#[task_tool]` in the program, its tasks kept in a SQLite file.
    let engine = Engine::builder(SqliteStore::open("first_tool.db").await?)
        .start()
        .await?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("serving http://{}/mcp", listener.local_addr()?);
    mcp::serve(listener, TaskServer::new(engine))
        // Ctrl-C: no new task; running steps finish; then the tasks are let go.
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
