//! Deterministic tools: durable calls, helpers that are deterministic or
//! called inside a checkpoint, opt-outs, and a tool that turns the check off.

mod util;

use std::{collections::BTreeMap, time::Duration};

use mcp_tasks_runtime::{
    ToolError, checkpoint,
    durable::{self, Either},
    task_tool,
};

use crate::util::{slow_fetch, total};

macro_rules! twice {
    ($e:expr) => {
        $e * 2
    };
}

#[task_tool]
async fn steady(items: Vec<u32>) -> Result<String, ToolError> {
    let sum = total(&items);
    durable::sleep(Duration::from_secs(1)).await;
    let at = durable::now().await;
    let id = durable::uuid().await;
    let fetched: u32 = checkpoint("fetch", || async { Ok(slow_fetch().await) }).await?;
    let raced = match durable::select(durable::sleep(Duration::from_secs(5)), async { 3 }).await {
        Either::Left(()) => 0,
        Either::Right(n) => n,
    };
    let handle = durable::spawn("side", || async { Ok(util::noisy().await) });
    let side: u32 = handle.await?;
    #[allow_nondeterminism]
    let started = std::time::Instant::now();
    #[allow_nondeterminism]
    durable::status(format!("{:?}", started.elapsed()));
    let mut counts = BTreeMap::new();
    counts.insert("sum", twice!(sum));
    Ok(format!("{sum} {at:?} {id} {fetched} {raced} {side} {counts:?}"))
}

#[task_tool(allow_nondeterminism)]
async fn anything_goes() -> u32 {
    slow_fetch().await
}
