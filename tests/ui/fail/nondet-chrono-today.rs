//! A stand-in for `chrono` (which this crate does not depend on).

use mcp_tasks_runtime::task_tool;

mod chrono {
    pub struct Utc;
    impl Utc {
        pub fn today() -> u64 {
            0
        }
    }
}

#[task_tool]
async fn day() -> u64 {
    chrono::Utc::today()
}

fn main() {}
