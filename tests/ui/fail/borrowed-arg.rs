use std::borrow::Cow;

use mcp_tasks_runtime::task_tool;

#[task_tool]
async fn greet(name: Cow<'_, str>) -> String {
    name.into_owned()
}

fn main() {}
