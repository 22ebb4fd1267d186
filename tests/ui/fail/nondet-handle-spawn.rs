use mcp_tasks_runtime::task_tool;
use tokio::runtime::Handle;

#[task_tool]
async fn detach() {
    let _ = Handle::current().spawn(async {});
}

fn main() {}
