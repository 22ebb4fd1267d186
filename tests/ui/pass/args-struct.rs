//! `#[args]`: a single struct whose fields are the tool's arguments.

use mcp_tasks_runtime::task_tool;
use schemars::JsonSchema;
use serde::Deserialize;

/// Where to deploy.
#[derive(Deserialize, JsonSchema)]
struct DeployArgs {
    /// The service.
    service: String,
    /// The git ref (default `main`).
    #[serde(default)]
    git_ref: Option<String>,
}

#[task_tool]
async fn deploy(#[args] args: DeployArgs) -> String {
    format!(
        "{}@{}",
        args.service,
        args.git_ref.unwrap_or_else(|| "main".into())
    )
}

fn main() {
    let schema = deploy_tool().input_schema();
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], serde_json::json!(["service"]));
    assert_eq!(
        schema["properties"]["service"]["description"],
        "The service."
    );
}
