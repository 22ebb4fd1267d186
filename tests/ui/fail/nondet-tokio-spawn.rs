use mcp_tasks_runtime::{ToolError, checkpoint, task_tool};

#[task_tool]
async fn build() -> Result<String, ToolError> {
    let handle = tokio::spawn(async { checkpoint("build", || async { Ok(1) }).await });
    let n: u32 = handle.await.map_err(|e| ToolError::new(e.to_string()))??;
    Ok(n.to_string())
}

fn main() {}
