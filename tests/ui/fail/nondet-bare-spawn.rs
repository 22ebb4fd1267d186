use mcp_tasks_runtime::task_tool;
use tokio::spawn;

#[task_tool]
async fn background() {
    let _ = spawn(async {});
}

fn main() {}
