use mcp_tasks_runtime::task_tool;
use tokio::task::JoinSet;

#[task_tool]
async fn fan_out() -> usize {
    let mut set = JoinSet::new();
    set.spawn(async { 1 });
    set.join_all().await.len()
}

fn main() {}
