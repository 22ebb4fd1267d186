use mcp_tasks_runtime::task_tool;

#[task_tool]
async fn greet(name: &str, tags: &[String]) -> String {
    format!("{name} {tags:?}")
}

fn main() {}
