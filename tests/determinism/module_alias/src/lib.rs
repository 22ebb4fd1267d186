//! Aliases at module level: the attribute sees `t::sleep`, `Id::new_v4` and
//! `within`, none of which ends a refused path.

use std::time::Duration;

use mcp_tasks_runtime::{ToolError, task_tool};
use tokio::time as t;
use tokio::time::timeout as within;
use uuid::Uuid as Id;

#[task_tool]
async fn nap() {
    t::sleep(Duration::from_secs(1)).await;
}

#[task_tool]
async fn label() -> String {
    Id::new_v4().to_string()
}

#[task_tool]
async fn bounded() -> Result<(), ToolError> {
    within(Duration::from_secs(1), async {}).await.ok();
    Ok(())
}
