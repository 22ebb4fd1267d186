use mcp_tasks_runtime::task_tool;
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct Target {
    host: String,
}

#[task_tool]
async fn ping(#[args] target: Target, count: u32) -> String {
    format!("{count} pings to {}", target.host)
}

fn main() {}
