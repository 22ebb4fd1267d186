use mcp_tasks_runtime::task_tool;
use schemars::JsonSchema;

#[derive(JsonSchema)]
struct Target {
    host: String,
}

#[task_tool]
async fn ping(count: u32, target: Target) -> String {
    format!("{count} pings to {}", target.host)
}

fn main() {}
