use mcp_tasks_runtime::task_tool;

#[task_tool(name = "deploy service")]
async fn deploy() {}

#[task_tool(name = "")]
async fn empty() {}

#[task_tool]
async fn café() {}

fn main() {}
