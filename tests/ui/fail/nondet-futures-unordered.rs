//! A stand-in for `futures` (which this crate does not depend on).

use mcp_tasks_runtime::task_tool;

mod futures {
    pub mod stream {
        pub struct FuturesUnordered;
        impl FuturesUnordered {
            pub fn new() -> Self {
                Self
            }
        }
    }
}

use futures::stream::FuturesUnordered;

#[task_tool]
async fn as_they_finish() {
    let _pending = FuturesUnordered::new();
}

fn main() {}
