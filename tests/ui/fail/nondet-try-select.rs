//! A stand-in for `futures` (which this crate does not depend on).

use mcp_tasks_runtime::task_tool;

mod futures {
    pub mod future {
        pub async fn try_select<A, B>(_: A, _: B) {}
    }
}

#[task_tool]
async fn fastest() {
    futures::future::try_select(async {}, async {}).await;
}

fn main() {}
