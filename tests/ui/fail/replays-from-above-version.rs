use mcp_tasks_runtime::task_tool;

#[task_tool(version = 2, replays_from = 3)]
async fn report() {}

fn main() {}
