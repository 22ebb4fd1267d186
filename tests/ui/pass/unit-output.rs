//! No return type, or `()` in a `Result`: an empty result.

use mcp_tasks_runtime::{ToolError, task_tool};

#[task_tool]
async fn nothing() {}

#[task_tool]
async fn fallible_nothing() -> Result<(), ToolError> {
    Ok(())
}

fn main() {
    assert_eq!(nothing_tool().output_schema(), None);
    assert_eq!(fallible_nothing_tool().output_schema(), None);
}
