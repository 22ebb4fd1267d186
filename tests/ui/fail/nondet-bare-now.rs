//! A bare `now()`: the runtime's is written `durable::now()`.

use mcp_tasks_runtime::{durable::now, task_tool};

#[task_tool]
async fn stamp() -> String {
    format!("{:?}", now().await)
}

fn main() {}
