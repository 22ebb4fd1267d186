use std::time::{SystemTime, UNIX_EPOCH};

use mcp_tasks_runtime::task_tool;

#[task_tool]
async fn stamp() -> u64 {
    let now = SystemTime::now();
    now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn main() {}
