use mcp_tasks_runtime::{ToolError, checkpoint, task_tool};

#[task_tool]
async fn race() -> Result<String, ToolError> {
    let fast = checkpoint("fast", || async { Ok(1) });
    let slow = checkpoint("slow", || async { Ok(2) });
    let n: u32 = tokio::select! {
        n = fast => n?,
        n = slow => n?,
    };
    Ok(n.to_string())
}

fn main() {}
