//! `#[task_tool(allow_nondeterminism)]` turns the body's check off.

use std::time::{Duration, Instant};

use mcp_tasks_runtime::task_tool;

/// Reports how long a local probe takes; the value is not journaled, and a
/// replay measures again, which is what this tool wants.
#[task_tool(allow_nondeterminism)]
async fn probe() -> String {
    let started = Instant::now();
    tokio::time::sleep(Duration::from_millis(1)).await;
    format!("{:?}", started.elapsed())
}

fn main() {
    let _ = probe_tool();
}
