use mcp_tasks_runtime::task_tool;

#[task_tool(ttl = "thirty minutes", poll_interval = "2")]
async fn wait() {}

#[task_tool(ttl = "3 fortnights")]
async fn wait_long() {}

#[task_tool(ttl = 30)]
async fn wait_number() {}

#[task_tool(poll_interval = "0s")]
async fn wait_zero() {}

fn main() {}
