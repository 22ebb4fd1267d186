//! A stand-in for `futures` (which this crate does not depend on).

use mcp_tasks_runtime::task_tool;

mod futures {
    pub mod future {
        pub async fn select_ok<T>(_: Vec<T>) {}
    }
}

use futures::future;

#[task_tool]
async fn fastest() {
    future::select_ok(vec![async {}]).await;
}

fn main() {}
