use std::time::Duration;

pub(crate) fn total(items: &[u32]) -> u32 {
    items.iter().sum()
}

/// Called only inside a checkpoint, or by a tool that turns the check off.
pub(crate) async fn slow_fetch() -> u32 {
    tokio::time::sleep(Duration::from_millis(1)).await;
    7
}

/// Called only inside `durable::spawn`.
pub(crate) async fn noisy() -> u32 {
    tokio::spawn(async { 1 }).await.unwrap_or(0)
}
