//! The embedded SQLite store: the durable default.
//!
//! One thread owns the writing connection. Async callers send it jobs, each
//! with a oneshot sender for its reply; it commits every job that is waiting
//! in one transaction (group commit), a job that fails rolling back only its
//! own writes, and replies only once the transaction has committed. A
//! caller is therefore told "done" only for data that has been committed,
//! and concurrent checkpoints share one fsync. The write that ends a run, which nobody
//! waits for, waits up to 1 ms for another to commit with when it is alone.
//! Reads (`get`, `journal`, `unfinished`, `next_expiry`) go to a second,
//! read-only connection on a thread of their own: in WAL mode they see
//! every committed write and never wait behind a batch that is committing.
//!
//! A store opened read-only ([`SqliteStore::open_read_only`]) has the read
//! connection only: it migrates nothing and writes nothing, for the checks
//! and views that must leave a store as they found it.
//!
//! Several processes may share one file. Between batches the writer checks,
//! every [`SqliteStoreBuilder::poll_interval`], whether another process has
//! committed (`PRAGMA data_version`), and says so on the store's feed
//! ([`Store::changes`]), so that an engine hears of what another process did
//! to the tasks it follows.
//!
//! The store keeps no rows in memory. Every call reads the file (through
//! SQLite's own page cache), so a parked task costs a row on disk and nothing
//! else.
//!
//! This file holds the public face: [`SqliteStore`], its builder,
//! [`Synchronous`], and the [`Store`] impl, each method one call to a
//! thread. The rest lives beside it:
//!
//! - `worker`: the two threads, the job queue, group commit and savepoints;
//! - `schema`: connecting, pragmas, and the migrations in `store/migrations/`;
//! - `rows`: the SQL statements, and encoding and decoding rows;
//! - `summaries`: the admin page's summaries and counts;
//! - `front_door`: the [`FrontDoorStore`] impl (spent states, sessions).

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use rusqlite::Connection;
use serde_json::{Map, Value};

use super::{
    Answered, Appended, Change, FrontDoorStore, ListCursor, PageFrom, SchemaVersions, Store,
    StoreError, TaskCounts, TaskFilter, TaskRecord, TaskSummary, Transition, sql,
};
use crate::{
    error::{Error, Result},
    journal::JournalEntry,
};

mod builder;
mod front_door;
mod rows;
mod schema;
mod summaries;
#[cfg(test)]
mod tests;
mod worker;

pub use builder::{SqliteStoreBuilder, Synchronous};
use worker::{Urgency, Worker};

/// A [`Store`] in a SQLite file: the durable default.
///
/// One thread owns the writing connection and commits waiting calls together
/// (group commit); reads run on a second, read-only connection. A call
/// returns only after its transaction has committed, with the durability that
/// [`Synchronous`] sets. Dropping the store lets the thread
/// finish the calls already sent, close the file, and exit.
///
/// ```
/// use mcp_tasks_runtime::{store::{SqliteStore, Store, Synchronous}};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mcp_tasks_runtime::Result<()> {
/// let dir = tempfile::tempdir().expect("a temporary directory");
/// let path = dir.path().join("tasks.db");
///
/// // The default: every commit survives power loss.
/// let store = SqliteStore::open(&path).await?;
/// assert!(store.unfinished().await?.is_empty());
/// drop(store);
///
/// // Faster commits that still survive a crash of the process.
/// let store = SqliteStore::builder(&path)
///     .synchronous(Synchronous::Normal)
///     .open()
///     .await?;
/// assert_eq!(store.next_expiry().await?, None);
/// # Ok(())
/// # }
/// ```
///
/// To serve tasks from the store, hand it to an engine:
/// `Engine::builder(SqliteStore::open("tasks.db").await?).start().await?`.
pub struct SqliteStore {
    /// The writing connection's thread: it commits calls in batches. `None`
    /// for a store opened read-only.
    writer: Option<Worker>,
    /// Reads go to a second connection on a thread of its own: WAL lets them
    /// run while a write batch commits, so `get` never waits behind a fsync.
    reader: Worker,
    /// Read-only connections for [`Store::get`], used in place on the
    /// caller's thread (see [`SqliteStore::lookup`]).
    lookups: Vec<std::sync::Mutex<Connection>>,
    /// What other processes commit to the file, announced by the writer.
    feed: tokio::sync::broadcast::Sender<Change>,
    /// The schema version found at open, and now.
    versions: SchemaVersions,
    path: PathBuf,
}

/// How many connections serve [`SqliteStore::lookup`] at once.
const LOOKUP_CONNECTIONS: usize = 2;

debug_fields!(SqliteStore |store| path: store.path, read_only: store.is_read_only());

impl SqliteStore {
    /// Opens (or creates) the store at `path` with the default options. This
    /// is the same as `SqliteStore::builder(path).open().await`; see
    /// [`SqliteStoreBuilder::open`].
    ///
    /// # Errors
    ///
    /// [`Error::Store`](crate::Error::Store), naming the path, if the file
    /// cannot be opened or its schema brought up to date.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::builder(path).open().await
    }

    /// Opens the existing store at `path` to read it only, with the default
    /// options: no migration, no write. This is the same as
    /// `SqliteStore::builder(path).open_read_only().await`; see
    /// [`SqliteStoreBuilder::open_read_only`].
    ///
    /// ```
    /// use mcp_tasks_runtime::store::{SqliteStore, Store};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mcp_tasks_runtime::Result<()> {
    /// let dir = tempfile::tempdir().expect("a temporary directory");
    /// let path = dir.path().join("tasks.db");
    /// // Nothing to read yet: a read-only open creates no file.
    /// assert!(SqliteStore::open_read_only(&path).await.is_err());
    /// drop(SqliteStore::open(&path).await?);
    ///
    /// let store = SqliteStore::open_read_only(&path).await?;
    /// assert!(store.unfinished().await?.is_empty());
    /// assert!(store.purge_expired(0, 10).await.is_err(), "no writes");
    /// let versions = store.schema_versions();
    /// assert_eq!((versions.found, versions.now), (versions.latest, versions.latest));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`SqliteStoreBuilder::open_read_only`].
    pub async fn open_read_only(path: impl AsRef<Path>) -> Result<Self> {
        Self::builder(path).open_read_only().await
    }

    /// Options for opening the store at `path`.
    pub fn builder(path: impl AsRef<Path>) -> SqliteStoreBuilder {
        SqliteStoreBuilder::new(path.as_ref())
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's schema version when it was opened, now, and the newest
    /// this build knows. After [`SqliteStoreBuilder::open`], `now` is the
    /// newest (`found` says whether the open migrated the file); after
    /// [`SqliteStoreBuilder::open_read_only`], `now` is `found`, which may
    /// be older than the newest when this build reads it as it is.
    pub fn schema_versions(&self) -> SchemaVersions {
        self.versions
    }

    /// Whether the store was opened read-only
    /// ([`SqliteStoreBuilder::open_read_only`]).
    pub fn is_read_only(&self) -> bool {
        self.writer.is_none()
    }

    /// The writer's thread; an error for a store opened read-only.
    fn writer(&self) -> Result<&Worker> {
        self.writer.as_ref().ok_or_else(|| {
            StoreError::new(format!(
                "SQLite store at {}: opened read-only (`SqliteStore::open_read_only`), it \
                 takes no writes",
                self.path.display()
            ))
            .into()
        })
    }

    /// [`Store::transition`], journaling `entries` in the same transaction
    /// when the change applies.
    async fn transition_with(
        &self,
        id: &str,
        entries: Vec<JournalEntry>,
        change: Transition,
        now_ms: i64,
        fence: Option<u64>,
    ) -> Result<Option<TaskRecord>> {
        let id = id.to_owned();
        // A change under a run's claim is the engine's own (a run's end,
        // mostly): no caller waits for its commit.
        let urgency = if fence.is_some() {
            Urgency::Deferrable
        } else {
            Urgency::Now
        };
        self.writer()?
            .run_as(urgency, move |c| {
                let Some(mut record) = rows::select_task(c, &id)? else {
                    return Ok(None);
                };
                let was = rows::Indexed::of(&record);
                if !record.apply_fenced(change.clone(), now_ms, fence) {
                    return Ok(None);
                }
                for entry in &entries {
                    rows::insert_entry(c, &id, entry)?;
                }
                rows::update_state(c, &was, &record)?;
                Ok(Some(record))
            })
            .await
    }

    /// [`Store::answer`] and [`Store::time_out`]: applies `change` (which
    /// takes questions off the record and gives the entries to journal) and
    /// writes the record and the entries in one transaction.
    async fn take_inputs<F>(&self, id: &str, change: F) -> Result<Option<Answered>>
    where
        F: Fn(&mut TaskRecord) -> (Vec<JournalEntry>, bool) + Send + 'static,
    {
        let id = id.to_owned();
        self.call(move |c| {
            let Some(mut record) = rows::select_task(c, &id)? else {
                return Ok(None);
            };
            let was = rows::Indexed::of(&record);
            let (entries, runnable) = change(&mut record);
            if !entries.is_empty() {
                rows::update_state(c, &was, &record)?;
                for entry in &entries {
                    rows::insert_entry(c, &id, entry)?;
                }
            }
            Ok(Some(Answered {
                record,
                accepted: entries.len(),
                runnable,
            }))
        })
        .await
    }

    /// Runs `f` on the owner thread inside the current batch's transaction
    /// and returns its result once that transaction has committed. `f` may
    /// run more than once: if the batch transaction fails, `f` is run again
    /// alone in a fresh transaction.
    async fn call<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> Result<T> + Send + 'static,
    {
        self.writer()?.run(f).await
    }

    /// Runs the read-only point lookup `f` in place, on a lookup connection
    /// that is free, and returns its result; `None` when every lookup
    /// connection is busy or `f` fails, so that the caller asks the reader
    /// thread instead.
    ///
    /// This is the path of `tasks/get`: a read of one row by its key, which
    /// WAL serves from a snapshot without waiting for the writer, takes a few
    /// microseconds, less than handing it to a thread and back. A lookup
    /// connection never waits for a lock (its busy timeout is zero): what
    /// would wait goes to the reader thread, which may.
    fn lookup<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Option<T> {
        let conn = self.lookups.iter().find_map(|c| c.try_lock().ok())?;
        f(&conn).ok()
    }

    /// A page of [`list`](Store::list), or of
    /// [`list_all`](Store::list_all) when `principal` is `None`.
    async fn page(
        &self,
        principal: Option<Option<String>>,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>> {
        let (at, id) = after.map_or((i64::MIN, String::new()), |c| {
            (c.created_at_ms, c.id.clone())
        });
        self.read(move |c| {
            let principal = principal.as_ref().map(Option::as_deref);
            rows::select_page(c, principal, (at, &id), limit)
        })
        .await
    }

    /// Runs the read-only `f` on the read connection (its own snapshot of
    /// what has committed) and returns its result.
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> Result<T> + Send + 'static,
    {
        self.reader.run(f).await
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn create(&self, task: TaskRecord) -> Result<()> {
        self.call(move |c| rows::insert_task(c, &task)).await
    }

    async fn create_with_journal(
        &self,
        task: TaskRecord,
        journal: Vec<JournalEntry>,
    ) -> Result<()> {
        self.call(move |c| {
            rows::insert_task(c, &task)?;
            for entry in &journal {
                rows::insert_entry(c, &task.id, entry)?;
            }
            Ok(())
        })
        .await
    }

    async fn get(&self, id: &str) -> Result<Option<TaskRecord>> {
        if let Some(found) = self.lookup(|c| rows::select_task(c, id)) {
            return Ok(found);
        }
        let id = id.to_owned();
        self.read(move |c| rows::select_task(c, &id)).await
    }

    async fn journal(&self, id: &str) -> Result<Vec<JournalEntry>> {
        let id = id.to_owned();
        self.read(move |c| rows::select_journal(c, &id)).await
    }

    async fn append(&self, id: &str, entry: JournalEntry, fence: u64) -> Result<Appended> {
        let id = id.to_owned();
        self.call(move |c| rows::append_fenced(c, &id, &entry, fence))
            .await
    }

    async fn append_unhurried(
        &self,
        id: &str,
        entry: JournalEntry,
        fence: u64,
    ) -> Result<Appended> {
        let id = id.to_owned();
        self.writer()?
            .run_as(Urgency::Deferrable, move |c| {
                rows::append_fenced(c, &id, &entry, fence)
            })
            .await
    }

    async fn transition_journaled(
        &self,
        id: &str,
        entries: Vec<JournalEntry>,
        change: Transition,
        now_ms: i64,
        fence: u64,
    ) -> Result<Option<TaskRecord>> {
        self.transition_with(id, entries, change, now_ms, Some(fence))
            .await
    }

    async fn transition(
        &self,
        id: &str,
        change: Transition,
        now_ms: i64,
        fence: Option<u64>,
    ) -> Result<Option<TaskRecord>> {
        self.transition_with(id, Vec::new(), change, now_ms, fence)
            .await
    }

    async fn claim(
        &self,
        id: &str,
        owner: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<Option<(TaskRecord, Vec<JournalEntry>)>> {
        let (id, owner) = (id.to_owned(), owner.to_owned());
        self.call(move |c| {
            let read = rows::select_task(c, &id).and_then(|task| match task {
                Some(task) => Ok(Some((task, rows::select_journal(c, &id)?))),
                None => Ok(None),
            });
            let (mut record, journal) = match read {
                Ok(Some(read)) => read,
                Ok(None) => return Ok(None),
                Err(Error::Store(e)) if e.is_unreadable() => {
                    rows::set_aside(c, &id, &Error::Store(e), now_ms)?;
                    return Ok(None);
                }
                Err(e) => return Err(e),
            };
            let was = rows::Indexed::of(&record);
            if !record.claim(&owner, now_ms, until_ms) {
                return Ok(None);
            }
            rows::update_state(c, &was, &record)?;
            Ok(Some((record, journal)))
        })
        .await
    }

    async fn renew(&self, owner: &str, now_ms: i64, until_ms: i64) -> Result<Vec<(String, u64)>> {
        let owner = owner.to_owned();
        self.call(move |c| rows::renew(c, &owner, now_ms, until_ms))
            .await
    }

    async fn release(&self, owner: &str) -> Result<()> {
        let owner = owner.to_owned();
        self.call(move |c| rows::release(c, &owner)).await
    }

    async fn claimable(&self, now_ms: i64, limit: usize) -> Result<Vec<String>> {
        self.read(move |c| rows::select_claimable(c, now_ms, limit))
            .await
    }

    async fn answer(
        &self,
        id: &str,
        responses: Map<String, Value>,
        now_ms: i64,
    ) -> Result<Option<Answered>> {
        self.take_inputs(id, move |record| record.answer(responses.clone(), now_ms))
            .await
    }

    async fn time_out(&self, id: &str, now_ms: i64) -> Result<Option<Answered>> {
        self.take_inputs(id, move |record| record.time_out(now_ms))
            .await
    }

    async fn overdue(&self, now_ms: i64, limit: usize) -> Result<Vec<String>> {
        self.read(move |c| rows::select_overdue(c, now_ms, limit))
            .await
    }

    async fn unfinished(&self) -> Result<Vec<TaskRecord>> {
        self.read(rows::select_unfinished).await
    }

    async fn purge_expired(&self, now_ms: i64, limit: usize) -> Result<Vec<String>> {
        self.call(move |c| rows::delete_expired(c, now_ms, limit))
            .await
    }

    async fn next_expiry(&self) -> Result<Option<i64>> {
        self.read(rows::select_next_expiry).await
    }

    async fn versions(&self, ids: &[String]) -> Result<Vec<(String, u64)>> {
        let ids = ids.to_vec();
        self.read(move |c| rows::select_versions(c, &ids)).await
    }

    async fn unfinished_among(&self, ids: &[String]) -> Result<Vec<String>> {
        let ids = ids.to_vec();
        self.read(move |c| rows::select_unfinished_among(c, &ids))
            .await
    }

    /// [`Change::Missed`] whenever another process sharing the file has
    /// committed (see [`SqliteStoreBuilder::poll_interval`]): SQLite says
    /// that something changed, not what.
    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<Change>> {
        // A read-only store has no writer to hear other processes with.
        self.writer.as_ref().map(|_| self.feed.subscribe())
    }

    async fn list(
        &self,
        principal: Option<&str>,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>> {
        self.page(Some(principal.map(str::to_owned)), after, limit)
            .await
    }

    async fn list_all(&self, after: Option<&ListCursor>, limit: usize) -> Result<Vec<TaskRecord>> {
        self.page(None, after, limit).await
    }

    async fn count_unfinished(&self, principal: Option<&str>) -> Result<usize> {
        let principal = principal.map(str::to_owned);
        self.read(move |c| rows::count_unfinished(c, principal.as_deref()))
            .await
    }

    async fn summaries(
        &self,
        filter: &TaskFilter,
        from: Option<&PageFrom>,
        limit: usize,
    ) -> Result<Vec<TaskSummary>> {
        let filter = sql::FilterParams::of(filter);
        let ((at, id), before) = sql::page_bounds(from);
        self.read(move |c| summaries::select_summaries(c, &filter, (at, &id), before, limit))
            .await
    }

    async fn count_tasks(&self, filter: &TaskFilter) -> Result<TaskCounts> {
        let filter = sql::FilterParams::of(filter);
        self.read(move |c| summaries::count_tasks(c, &filter)).await
    }

    fn front_door(self: std::sync::Arc<Self>) -> Option<std::sync::Arc<dyn FrontDoorStore>> {
        Some(self)
    }
}
