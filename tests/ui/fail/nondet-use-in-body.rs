use std::time::Duration;

use mcp_tasks_runtime::task_tool;

/// A `use` in the body is seen: this `sleep` is tokio's, not the runtime's.
#[task_tool]
async fn wait() {
    use tokio::time::sleep;
    sleep(Duration::from_secs(1)).await;
}

fn main() {}
