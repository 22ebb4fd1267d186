use std::time::Duration;

use mcp_tasks_runtime::task_tool;

#[task_tool]
async fn nap() {
    std::thread::sleep(Duration::from_millis(10));
}

fn main() {}
