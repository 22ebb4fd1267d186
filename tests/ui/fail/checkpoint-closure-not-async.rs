use mcp_tasks_runtime::{ToolError, checkpoint, task_tool};

#[task_tool]
async fn count() -> Result<String, ToolError> {
    let n: u32 = checkpoint("count", || Ok(2)).await?;
    Ok(n.to_string())
}

fn main() {}
