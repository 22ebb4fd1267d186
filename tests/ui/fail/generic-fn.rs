use mcp_tasks_runtime::task_tool;

#[task_tool]
async fn echo<T: ToString>(value: T) -> String {
    value.to_string()
}

fn main() {}
