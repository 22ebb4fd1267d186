//! `String` and `&'static str` outputs are text: no output schema.

use mcp_tasks_runtime::task_tool;

/// Says hello.
#[task_tool]
async fn hello(name: String) -> String {
    format!("Hello, {name}!")
}

#[task_tool]
async fn ping() -> &'static str {
    "pong"
}

fn main() {
    assert_eq!(hello_tool().name(), "hello");
    assert_eq!(hello_tool().output_schema(), None);
    assert_eq!(ping_tool().output_schema(), None);
}
