use std::time::Duration;

use mcp_tasks_runtime::{ToolError, confirm, task_tool};

#[task_tool]
async fn approve() -> Result<bool, ToolError> {
    match tokio::time::timeout(Duration::from_secs(60), confirm("Go ahead?")).await {
        Ok(answer) => Ok(answer?),
        Err(_) => Ok(false),
    }
}

fn main() {}
