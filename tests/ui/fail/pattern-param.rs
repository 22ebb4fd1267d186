use mcp_tasks_runtime::task_tool;

#[task_tool]
async fn add((a, b): (u32, u32)) -> u32 {
    a + b
}

fn main() {}
