use std::cell::Cell;

use mcp_tasks_runtime::{State, task_tool};

#[task_tool]
async fn count(counter: State<Cell<u32>>) -> String {
    counter.get().to_string()
}

fn main() {}
