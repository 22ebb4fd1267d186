//! A stand-in for `futures` (which this crate does not depend on).

use mcp_tasks_runtime::task_tool;

mod futures {
    pub mod stream {
        pub fn select<A, B>(_: A, _: B) {}
    }
}

use futures::stream;

#[task_tool]
async fn merged() {
    stream::select(1, 2);
}

fn main() {}
