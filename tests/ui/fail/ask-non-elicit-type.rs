use mcp_tasks_runtime::{ToolError, ask_user, task_tool};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct Approval {
    approve: bool,
}

#[task_tool]
async fn deploy() -> Result<String, ToolError> {
    let answer = ask_user::<Approval>("Deploy?").await?;
    Ok(answer.approve.to_string())
}

fn main() {}
