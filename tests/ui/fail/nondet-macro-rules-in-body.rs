use std::time::Duration;

use mcp_tasks_runtime::task_tool;

#[task_tool]
async fn settle() {
    macro_rules! pause {
        ($d:expr) => {
            tokio::time::sleep($d)
        };
    }
    pause!(Duration::from_secs(1)).await;
}

fn main() {}
