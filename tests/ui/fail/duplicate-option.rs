use mcp_tasks_runtime::task_tool;

#[task_tool(name = "first", ttl = "1h", name = "second")]
async fn twice() {}

fn main() {}
