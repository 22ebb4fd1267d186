use mcp_tasks_runtime::task_tool;

#[task_tool(task = always)]
async fn background() {}

#[task_tool(task = 1)]
async fn numbered() {}

fn main() {}
