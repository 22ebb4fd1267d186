//! The check matches paths as written, so a stand-in for uuid (which this
//! crate does not depend on) shows what a call to the real one gets.

use mcp_tasks_runtime::task_tool;

mod uuid {
    pub struct Uuid;
    impl Uuid {
        pub fn new_v4() -> String {
            String::new()
        }
    }
}

#[task_tool]
async fn ticket() -> String {
    uuid::Uuid::new_v4()
}

fn main() {}
