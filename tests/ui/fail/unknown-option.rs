use mcp_tasks_runtime::task_tool;

#[task_tool(timeout = "30m")]
async fn slow() {}

#[task_tool(retries = 3)]
async fn flaky() {}

fn main() {}
