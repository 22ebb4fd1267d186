use mcp_tasks_runtime::task_tool;

#[task_tool(version = -1)]
async fn report() {}

fn main() {}
