use mcp_tasks_runtime::task_tool;

#[task_tool]
struct Deploy;

fn main() {}
