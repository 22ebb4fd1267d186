use mcp_tasks_runtime::task_tool;

#[task_tool(crate = no_such_crate)]
async fn hello() {}

fn main() {}
