//! A bare `select(..)`, imported from `futures` (here a stand-in) at
//! module level.

use mcp_tasks_runtime::task_tool;

mod futures {
    pub mod future {
        pub async fn select<A, B>(_: A, _: B) {}
    }
}

use futures::future::select;

#[task_tool]
async fn race() {
    select(async {}, async {}).await;
}

fn main() {}
