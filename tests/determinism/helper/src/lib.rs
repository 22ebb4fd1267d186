//! A helper in another module of the crate spawns a tokio task.

mod helpers;

use mcp_tasks_runtime::task_tool;

#[task_tool]
async fn deploy() -> String {
    helpers::start_background();
    "started".into()
}
