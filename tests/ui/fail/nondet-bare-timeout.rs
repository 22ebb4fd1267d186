use std::time::Duration;

use mcp_tasks_runtime::task_tool;
use tokio::time::timeout;

#[task_tool]
async fn bounded() {
    let _ = timeout(Duration::from_secs(1), async {}).await;
}

fn main() {}
