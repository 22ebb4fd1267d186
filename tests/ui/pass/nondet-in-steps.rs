//! What `#[task_tool]` refuses in a tool's body compiles inside the closures
//! of `checkpoint`, `step` and `spawn` (their values are journaled), in items
//! declared in the body and marked `#[allow_nondeterminism]`, and in helpers
//! (which `determinism_check!` reads); the runtime's own `sleep`, `spawn`,
//! `select`, `now` and `uuid`, written under `durable::`, are durable and
//! compile anywhere.

use std::time::{Duration, Instant, SystemTime};

use mcp_tasks_runtime::{
    ToolError, checkpoint,
    durable::{self, Either},
    task_tool,
};

mod chrono {
    pub struct Utc;
    impl Utc {
        pub fn now() -> u64 {
            0
        }
    }
}

/// Not seen: a helper's body is its own.
async fn helper() -> u64 {
    tokio::time::sleep(Duration::from_millis(1)).await;
    chrono::Utc::now()
}

#[task_tool]
async fn journaled() -> Result<String, ToolError> {
    let waited = checkpoint("wait", || async {
        let started = Instant::now();
        tokio::time::sleep(Duration::from_millis(1)).await;
        let _ = tokio::time::timeout(Duration::from_secs(1), async {}).await;
        let n = tokio::select! {
            n = async { 1 } => n,
            n = async { 2 } => n,
        };
        std::thread::sleep(Duration::from_millis(1));
        let blocking = tokio::task::spawn_blocking(|| 3).await?;
        Ok(format!("{n} {blocking} {:?}", started.elapsed()))
    })
    .await?;
    let stamp: u64 = durable::step("stamp", || async {
        let _ = SystemTime::now();
        chrono::Utc::now() + helper().await
    })
    .await;
    let background = durable::spawn("background", || async {
        let mut ticks = tokio::time::interval(Duration::from_millis(1));
        ticks.tick().await;
        let joined = tokio::spawn(async { 4 }).await?;
        let thread = std::thread::spawn(|| 5).join().unwrap_or(0);
        Ok(joined + thread)
    });
    let background: u32 = background.await?;

    #[allow_nondeterminism]
    fn local_helper() -> SystemTime {
        SystemTime::now()
    }
    let _ = local_helper;

    // The runtime's durable alternatives, under their module.
    durable::sleep(Duration::from_millis(1)).await;
    let at = durable::now().await;
    let id = durable::uuid().await;
    let raced = match durable::select(durable::sleep(Duration::from_millis(1)), async { 6 }).await {
        Either::Left(()) => 0,
        Either::Right(n) => n,
    };
    // A `use` in the body says where a bare name comes from.
    use mcp_tasks_runtime::durable::{now, sleep};
    sleep(Duration::from_millis(1)).await;
    let again = now().await;
    Ok(format!("{waited} {stamp} {background} {at:?} {id} {raced} {again:?}"))
}

fn main() {
    let _ = journaled_tool();
}
