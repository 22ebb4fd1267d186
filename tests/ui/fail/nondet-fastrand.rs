//! A stand-in for `fastrand` (which this crate does not depend on).

use mcp_tasks_runtime::task_tool;

mod fastrand {
    pub fn u32(_: std::ops::RangeFull) -> u32 {
        4
    }
}

#[task_tool]
async fn roll() -> u32 {
    fastrand::u32(..)
}

fn main() {}
