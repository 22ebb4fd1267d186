use std::rc::Rc;

use mcp_tasks_runtime::{ToolError, checkpoint, task_tool};

#[task_tool]
async fn count() -> Result<u32, ToolError> {
    let shared = Rc::new(1);
    let n = checkpoint("count", || async { Ok::<_, ToolError>(2) }).await?;
    Ok(n + *shared)
}

fn main() {}
