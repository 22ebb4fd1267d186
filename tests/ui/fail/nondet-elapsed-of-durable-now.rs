//! `durable::now()` is journaled, but `.elapsed()` on it reads the clock
//! again.

use mcp_tasks_runtime::{durable, task_tool};

#[task_tool]
async fn since() -> String {
    let at = durable::now().await;
    format!("{:?}", at.elapsed())
}

fn main() {}
