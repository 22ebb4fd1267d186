use mcp_tasks_runtime::{ToolError, task_tool};

#[task_tool]
async fn hash() -> Result<u64, ToolError> {
    let n = tokio::task::spawn_blocking(|| 40 + 2)
        .await
        .map_err(|e| ToolError::new(e.to_string()))?;
    Ok(n)
}

fn main() {}
