use std::{thread, time::Duration};

use mcp_tasks_runtime::task_tool;
use tokio::time;

/// Paths through modules imported at module level end a refused path.
#[task_tool]
async fn wait() {
    time::sleep(Duration::from_secs(1)).await;
    thread::sleep(Duration::from_secs(1));
}

fn main() {}
