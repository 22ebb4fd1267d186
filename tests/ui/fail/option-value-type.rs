use mcp_tasks_runtime::task_tool;

#[task_tool(name = deploy, title = 5, read_only = "yes", description, destructive(true))]
async fn deploy() {}

fn main() {}
