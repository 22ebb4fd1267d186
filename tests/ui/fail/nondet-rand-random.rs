//! The check matches paths as written, so a stand-in for rand (which this
//! crate does not depend on) shows what a call to the real one gets.

use mcp_tasks_runtime::task_tool;

mod rand {
    pub fn random() -> u64 {
        4
    }
}

#[task_tool]
async fn roll() -> u64 {
    rand::random()
}

fn main() {}
