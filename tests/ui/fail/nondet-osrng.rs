//! A stand-in for `rand` (which this crate does not depend on).

use mcp_tasks_runtime::task_tool;

mod rand {
    pub mod rngs {
        pub struct OsRng;
        impl OsRng {
            pub fn next_u32(&self) -> u32 {
                4
            }
        }
    }
}

use rand::rngs::OsRng;

#[task_tool]
async fn roll() -> u32 {
    OsRng.next_u32()
}

fn main() {}
