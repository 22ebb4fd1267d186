use std::time::Duration;

use mcp_tasks_runtime::{durable, task_tool};

#[task_tool]
async fn poll() {
    let mut ticks = tokio::time::interval(Duration::from_secs(10));
    for _ in 0..3 {
        ticks.tick().await;
        durable::status("still waiting");
    }
}

fn main() {}
