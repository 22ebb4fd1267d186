//! The silent case: `sleep` imported from tokio at module level, which the
//! macro cannot see. A bare `sleep` is refused, naming `durable::sleep`.

use std::time::Duration;

use mcp_tasks_runtime::task_tool;
use tokio::time::sleep;

#[task_tool]
async fn wait() {
    sleep(Duration::from_secs(1)).await;
}

fn main() {}
