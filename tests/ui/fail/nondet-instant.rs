use std::time::Instant;

use mcp_tasks_runtime::{ToolError, checkpoint, task_tool};

#[task_tool]
async fn timed() -> Result<String, ToolError> {
    let started = Instant::now();
    checkpoint("work", || async { Ok(()) }).await?;
    Ok(format!("took {:?}", started.elapsed()))
}

fn main() {}
