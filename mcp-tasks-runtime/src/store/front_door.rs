//! Front-door state: what the MCP server keeps between requests besides
//! tasks, the [`FrontDoorStore`] trait.

use async_trait::async_trait;
use serde_json::Value;

use crate::error::Result;

/// How long a protocol session a [`FrontDoorStore`] keeps may go untouched
/// before [`FrontDoorStore::purge_sessions`] deletes it: a week.
pub const SESSION_TTL: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// Front-door state: what the MCP server remembers between requests that is
/// not a task. That is the MRTR `requestState`s already spent, and the
/// sessions of 2025-11-25 clients over HTTP. Task storage is [`Store`](super::Store).
///
/// [`MemoryStore`](super::MemoryStore), [`SqliteStore`](super::SqliteStore)
/// and `PostgresStore` keep both, in the same place (file or database), and
/// say so with [`Store::front_door`](super::Store::front_door): an engine
/// built over one of them uses it for both, with nothing to set. A task
/// store written outside the crate need not implement this trait. The
/// engine then keeps front-door state in its own process's memory (and
/// says so in a WARN line at start), unless
/// [`EngineBuilder::front_door`](crate::engine::EngineBuilder::front_door) gives it
/// one. Memory is right for one instance. When several instances serve one
/// task store, give them a shared front door (a `SqliteStore` or
/// `PostgresStore` of its own will do). Otherwise a session opened on one
/// instance is unknown on the others, and a `requestState` sent to two
/// instances may run its steps twice.
///
/// Every method is atomic. The contract kit checks an implementation:
/// `front_door_contract_tests!` (the crate
/// `mcp-tasks-store-contract`).
///
/// ```
/// use mcp_tasks_runtime::store::{FrontDoorStore, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mcp_tasks_runtime::Result<()> {
/// let front_door = MemoryStore::new();
/// // A `requestState` is spent once.
/// assert!(front_door.spend("state-1", 2_000, 1_000).await?);
/// assert!(!front_door.spend("state-1", 2_000, 1_500).await?);
/// // A session's state comes back until the session is deleted.
/// front_door.put_session("s1", serde_json::json!({"v": 1}), 1_000).await?;
/// assert!(front_door.get_session("s1").await?.is_some());
/// front_door.delete_session("s1").await?;
/// assert_eq!(front_door.get_session("s1").await?, None);
/// # Ok(())
/// # }
/// ```
#[async_trait]
pub trait FrontDoorStore: Send + Sync + std::fmt::Debug + 'static {
    /// Records that the single-use token `id` was spent, in one atomic
    /// step shared by every instance using the store; the record is kept
    /// until `expires_at_ms` (after which the token is refused for its age
    /// anyway). Returns `true` the first time, `false` when `id` was
    /// already spent. Deletes the records that expired by `now_ms`.
    ///
    /// The server spends each MRTR `requestState` here before resuming the
    /// call it carries, so that a state sent twice (in parallel, or to two
    /// instances) runs its steps once.
    async fn spend(&self, id: &str, expires_at_ms: i64, now_ms: i64) -> Result<bool>;

    /// Keeps the state of a protocol session (what a 2025-11-25 client said
    /// in `initialize`, as JSON) under `id`, so that the session survives a
    /// restart and can be served by any instance sharing the store.
    /// Replaces an earlier state. Sessions untouched for [`SESSION_TTL`] are
    /// deleted by [`FrontDoorStore::purge_sessions`].
    async fn put_session(&self, id: &str, state: Value, now_ms: i64) -> Result<()>;

    /// Reads a session's state.
    async fn get_session(&self, id: &str) -> Result<Option<Value>>;

    /// Forgets a session (the client ended it).
    async fn delete_session(&self, id: &str) -> Result<()>;

    /// Deletes the sessions untouched for [`SESSION_TTL`] by `now_ms`, and
    /// no others. The engine calls it with each expiry sweep.
    async fn purge_sessions(&self, now_ms: i64) -> Result<()>;
}

/// The last write time before which a session is stale at `now_ms`.
pub(super) fn stale_before(now_ms: i64) -> i64 {
    now_ms.saturating_sub(i64::try_from(SESSION_TTL.as_millis()).unwrap_or(i64::MAX))
}

/// Session `id`'s state from the JSON text a SQL store keeps (`None`: no
/// such session).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(super) fn session_state(id: &str, text: Option<String>) -> Result<Option<Value>> {
    let Some(text) = text else { return Ok(None) };
    serde_json::from_str(&text).map(Some).map_err(|e| {
        super::StoreError::new(format!("session {id} is not readable JSON"))
            .with_source(e)
            .into()
    })
}
