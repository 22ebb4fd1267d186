use std::time::Duration;

use mcp_tasks_runtime::{status, task_tool};

#[task_tool]
async fn poll() {
    let mut ticks = tokio::time::interval(Duration::from_secs(10));
    for _ in 0..3 {
        ticks.tick().await;
        status("still waiting");
    }
}

fn main() {}
