use mcp_tasks_runtime::task_tool;

#[task_tool]
async fn background() {
    std::thread::spawn(|| println!("working"));
}

fn main() {}
