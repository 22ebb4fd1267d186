use std::env;

use mcp_tasks_runtime::task_tool;

#[task_tool]
async fn region() -> String {
    env::var("REGION").unwrap_or_default()
}

fn main() {}
