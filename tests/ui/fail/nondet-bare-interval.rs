use std::time::Duration;

use mcp_tasks_runtime::task_tool;
use tokio::time::interval;

#[task_tool]
async fn tick() {
    interval(Duration::from_secs(1)).tick().await;
}

fn main() {}
