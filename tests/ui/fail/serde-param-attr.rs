use mcp_tasks_runtime::task_tool;

#[task_tool]
async fn greet(#[serde(default)] name: String) -> String {
    format!("Hello, {name}!")
}

fn main() {}
