use mcp_tasks_runtime::task_tool;

#[task_tool]
async fn greet() -> impl std::fmt::Display {
    "hello"
}

fn main() {}
