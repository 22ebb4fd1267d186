use std::time::UNIX_EPOCH;

use mcp_tasks_runtime::task_tool;

#[task_tool]
async fn age() -> u64 {
    UNIX_EPOCH.elapsed().map_or(0, |d| d.as_secs())
}

fn main() {}
