use std::thread;

use mcp_tasks_runtime::task_tool;

#[task_tool]
async fn worker() {
    let _ = thread::Builder::new().name("w".into()).spawn(|| ());
}

fn main() {}
