//! `macro_rules!` wrappers around a tokio timer and `select!`.

use std::time::Duration;

use mcp_tasks_runtime::task_tool;
use tokio::time::sleep;

macro_rules! pause {
    ($d:expr) => {
        sleep($d)
    };
}

macro_rules! first_of {
    ($a:expr, $b:expr) => {
        tokio::select! {
            x = $a => x,
            x = $b => x,
        }
    };
}

#[task_tool]
async fn settle() {
    pause!(Duration::from_secs(1)).await;
}

#[task_tool]
async fn race() -> u32 {
    first_of!(async { 1 }, async { 2 })
}
