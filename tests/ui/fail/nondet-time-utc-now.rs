//! A stand-in for `time` (which this crate does not depend on).

use mcp_tasks_runtime::task_tool;

mod time {
    pub struct UtcDateTime;
    impl UtcDateTime {
        pub fn now() -> u64 {
            0
        }
    }
}

#[task_tool]
async fn stamp() -> u64 {
    time::UtcDateTime::now()
}

fn main() {}
