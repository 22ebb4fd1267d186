use mcp_tasks_runtime::task_tool;

#[task_tool(version = 0)]
async fn report() {}

fn main() {}
