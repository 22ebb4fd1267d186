use mcp_tasks_runtime::{ToolError, ask_user, task_tool};

#[task_tool]
async fn greet() -> Result<String, ToolError> {
    let answer = ask_user("What is your name?").await?;
    let _ = answer;
    Ok("hello".into())
}

fn main() {}
