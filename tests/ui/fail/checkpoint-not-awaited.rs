use mcp_tasks_runtime::{ToolError, checkpoint, task_tool};

#[task_tool]
async fn count() -> Result<String, ToolError> {
    let n: u32 = checkpoint("count", || async { Ok(2) })?;
    Ok(n.to_string())
}

fn main() {}
