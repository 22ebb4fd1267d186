//! The check matches paths as written, so a stand-in for chrono (which this
//! crate does not depend on) shows what a call to the real one gets.

use mcp_tasks_runtime::task_tool;

mod chrono {
    pub struct Utc;
    impl Utc {
        pub fn now() -> u64 {
            0
        }
    }
}

#[task_tool]
async fn stamp() -> u64 {
    chrono::Utc::now()
}

fn main() {}
