//! A unit-only enum is a choice: a form field, or asked alone.

use mcp_tasks_runtime::{Elicit, ToolError, ask_user, task_tool};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema, Elicit)]
#[serde(rename_all = "lowercase")]
enum Env {
    Staging,
    Production,
}

#[derive(Deserialize, JsonSchema, Elicit)]
struct Target {
    env: Env,
    fallback: Option<Env>,
    /// Several choices: a multi-select.
    #[serde(default)]
    mirrors: Vec<Env>,
}

#[task_tool]
async fn pick() -> Result<String, ToolError> {
    let env: Env = ask_user("Where?").await?;
    let target: Target = ask_user("Where, really?").await?;
    Ok(format!(
        "{} {} {}",
        matches!(env, Env::Staging),
        target.fallback.is_some() && matches!(target.env, Env::Production),
        target.mirrors.len(),
    ))
}

fn main() {
    let schema = <Env as Elicit>::requested_schema();
    assert_eq!(
        schema["properties"]["value"]["enum"],
        serde_json::json!(["staging", "production"])
    );
    let schema = <Target as Elicit>::requested_schema();
    assert_eq!(schema["required"], serde_json::json!(["env"]));
    assert_eq!(
        schema["properties"]["mirrors"]["items"]["enum"],
        serde_json::json!(["staging", "production"])
    );
    let _ = pick_tool();
}
