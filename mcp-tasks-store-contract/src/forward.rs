//! A store that forwards to another: a test wraps a store to watch or
//! break a few of its methods, and writes only those.

use std::{fmt::Debug, sync::Arc};

use async_trait::async_trait;
use serde_json::{Map, Value};

use mcp_tasks_runtime::{
    Result,
    store::{
        Answered, Appended, Change, FrontDoorStore, JournalEntry, ListCursor, PageFrom, Store,
        TaskCounts, TaskFilter, TaskRecord, TaskSummary, Transition,
    },
};

/// Writes [`Forward`] (each method forwarding to [`Forward::inner`] unless
/// overridden) and the [`Store`] of a [`Forwarded`] (each method calling
/// its `Forward`'s) from one list of the trait's methods.
macro_rules! forward {
    ($(async fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty;)*) => {
        /// A store that forwards every [`Store`] method to
        /// [`inner`](Forward::inner): override the methods a test watches
        /// or breaks, and wrap the type in [`Forwarded`] to use it as a
        /// store. An `Arc` of a store is a `Forward` that changes nothing.
        /// Each method goes to the inner store's own: one that breaks
        /// `append` leaves `append_unhurried` (and the other methods the
        /// trait provides in terms of `append`) working unless it overrides
        /// them too.
        ///
        /// ```
        /// use std::sync::{Arc, atomic::{AtomicUsize, Ordering}};
        ///
        /// use mcp_tasks_runtime::{
        ///     Result,
        ///     store::{MemoryStore, Store, TaskRecord},
        /// };
        /// use mcp_tasks_store_contract::{Forward, Forwarded};
        ///
        /// /// Counts the reads of a task.
        /// #[derive(Debug, Default)]
        /// struct Reads(Arc<MemoryStore>, AtomicUsize);
        ///
        /// #[async_trait::async_trait]
        /// impl Forward for Reads {
        ///     type Inner = MemoryStore;
        ///     fn inner(&self) -> &Arc<MemoryStore> {
        ///         &self.0
        ///     }
        ///     async fn get(&self, id: &str) -> Result<Option<TaskRecord>> {
        ///         self.1.fetch_add(1, Ordering::SeqCst);
        ///         self.0.get(id).await
        ///     }
        /// }
        ///
        /// # #[tokio::main(flavor = "current_thread")]
        /// # async fn main() -> Result<()> {
        /// let store = Forwarded(Reads::default());
        /// assert!(store.get("nothing").await?.is_none());
        /// assert_eq!(store.0.1.load(Ordering::SeqCst), 1);
        /// # Ok(())
        /// # }
        /// ```
        #[async_trait]
        pub trait Forward: Debug + Send + Sync + 'static {
            /// The store the calls go to.
            type Inner: Store + ?Sized;

            /// The store the calls go to.
            fn inner(&self) -> &Arc<Self::Inner>;

            $(
                #[doc = concat!("[`Store::", stringify!($name), "`] of the inner store, unless overridden.")]
                async fn $name(&self $(, $arg: $ty)*) -> $ret {
                    Store::$name(&**self.inner() $(, $arg)*).await
                }
            )*

            /// [`Store::front_door`] of the inner store, unless overridden.
            fn front_door(&self) -> Option<Arc<dyn FrontDoorStore>> {
                Store::front_door(self.inner().clone())
            }

            /// [`Store::changes`] of the inner store, unless overridden.
            fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<Change>> {
                Store::changes(&**self.inner())
            }
        }

        #[async_trait]
        impl<F: Forward> Store for Forwarded<F> {
            $(
                async fn $name(&self $(, $arg: $ty)*) -> $ret {
                    Forward::$name(&self.0 $(, $arg)*).await
                }
            )*

            fn front_door(self: Arc<Self>) -> Option<Arc<dyn FrontDoorStore>> {
                Forward::front_door(&self.0)
            }

            fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<Change>> {
                Forward::changes(&self.0)
            }
        }
    };
}

forward! {
    async fn create(&self, task: TaskRecord) -> Result<()>;
    async fn create_with_journal(&self, task: TaskRecord, journal: Vec<JournalEntry>) -> Result<()>;
    async fn get(&self, id: &str) -> Result<Option<TaskRecord>>;
    async fn versions(&self, ids: &[String]) -> Result<Vec<(String, u64)>>;
    async fn unfinished_among(&self, ids: &[String]) -> Result<Vec<String>>;
    async fn journal(&self, id: &str) -> Result<Vec<JournalEntry>>;
    async fn append(&self, id: &str, entry: JournalEntry, fence: u64) -> Result<Appended>;
    async fn append_unhurried(&self, id: &str, entry: JournalEntry, fence: u64) -> Result<Appended>;
    async fn transition(&self, id: &str, change: Transition, now_ms: i64, fence: Option<u64>) -> Result<Option<TaskRecord>>;
    async fn transition_journaled(&self, id: &str, entries: Vec<JournalEntry>, change: Transition, now_ms: i64, fence: u64) -> Result<Option<TaskRecord>>;
    async fn claim(&self, id: &str, owner: &str, now_ms: i64, until_ms: i64) -> Result<Option<(TaskRecord, Vec<JournalEntry>)>>;
    async fn renew(&self, owner: &str, now_ms: i64, until_ms: i64) -> Result<Vec<(String, u64)>>;
    async fn release(&self, owner: &str) -> Result<()>;
    async fn claimable(&self, now_ms: i64, limit: usize) -> Result<Vec<String>>;
    async fn answer(&self, id: &str, responses: Map<String, Value>, now_ms: i64) -> Result<Option<Answered>>;
    async fn time_out(&self, id: &str, now_ms: i64) -> Result<Option<Answered>>;
    async fn overdue(&self, now_ms: i64, limit: usize) -> Result<Vec<String>>;
    async fn unfinished(&self) -> Result<Vec<TaskRecord>>;
    async fn purge_expired(&self, now_ms: i64, limit: usize) -> Result<Vec<String>>;
    async fn next_expiry(&self) -> Result<Option<i64>>;
    async fn list(&self, principal: Option<&str>, after: Option<&ListCursor>, limit: usize) -> Result<Vec<TaskRecord>>;
    async fn list_all(&self, after: Option<&ListCursor>, limit: usize) -> Result<Vec<TaskRecord>>;
    async fn summaries(&self, filter: &TaskFilter, from: Option<&PageFrom>, limit: usize) -> Result<Vec<TaskSummary>>;
    async fn count_tasks(&self, filter: &TaskFilter) -> Result<TaskCounts>;
    async fn count_unfinished(&self, principal: Option<&str>) -> Result<usize>;
}

/// The [`Store`] of a [`Forward`]: each method is the `Forward`'s (the
/// inner store's, unless the `Forward` overrides it).
#[derive(Debug, Default)]
pub struct Forwarded<F>(pub F);

impl<S: Store + ?Sized> Forward for Arc<S> {
    type Inner = S;

    fn inner(&self) -> &Arc<S> {
        self
    }
}
