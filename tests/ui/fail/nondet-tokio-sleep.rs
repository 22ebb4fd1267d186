use std::time::Duration;

use mcp_tasks_runtime::task_tool;

#[task_tool]
async fn wait() {
    tokio::time::sleep(Duration::from_secs(60)).await;
}

fn main() {}
