use mcp_tasks_runtime::task_tool;

#[task_tool]
async unsafe fn risky() {}

#[task_tool]
extern "C" fn foreign() {}

fn main() {}
