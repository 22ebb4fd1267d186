use mcp_tasks_runtime::task_tool;

/// Says hello.
#[task_tool]
fn hello(name: String) -> String {
    format!("Hello, {name}!")
}

fn main() {
    // Neither use adds an error of its own.
    let _ = hello("you".into());
    let _ = hello_tool();
}
