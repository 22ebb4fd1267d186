use mcp_tasks_runtime::task_tool;
use serde::Deserialize;

#[derive(Deserialize)]
struct Target {
    host: String,
}

#[task_tool]
async fn ping(target: Target, count: u32) -> String {
    format!("{count} pings to {}", target.host)
}

fn main() {}
