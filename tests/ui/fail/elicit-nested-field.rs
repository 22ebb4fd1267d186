use mcp_tasks_runtime::{Elicit, ToolError, ask_user, task_tool};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct Address {
    street: String,
    city: String,
}

#[derive(Deserialize, JsonSchema, Elicit)]
struct Signup {
    name: String,
    address: Address,
    tags: Vec<String>,
}

#[task_tool]
async fn signup() -> Result<String, ToolError> {
    // No error here: the derive reported the fields.
    let form: Signup = ask_user("Who are you?").await?;
    Ok(form.name)
}

fn main() {}
