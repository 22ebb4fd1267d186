//! The PostgreSQL store: tasks in a database that several processes share.
//!
//! Connections come from a pool (deadpool-postgres over tokio-postgres), so
//! calls from many tasks run at once, each on a connection of its own. Every
//! method is one statement, or one transaction (whose writes, once its row
//! is read, are sent together, in one round trip): `create_with_journal` writes
//! the task and its journal together, and `transition`, `answer` and
//! `time_out` read the task's row `FOR UPDATE`, apply the state machine
//! ([`TaskRecord::apply`], [`TaskRecord::answer`],
//! [`TaskRecord::time_out`]) to it in memory, and write it back before
//! committing. Concurrent changes to one task, from this process or
//! another, therefore queue on its row lock and never lose an update. A call returns once its transaction has committed.
//!
//! The store keeps no rows in memory: every call reads the database.
//!
//! This file holds the public face: [`PostgresStore`] and the [`Store`]
//! impl. The rest lives beside it:
//!
//! - `builder`: [`PostgresStoreBuilder`], connecting and migrating;
//! - `schema`: the schema name, and the migrations in
//!   `store/postgres/migrations/`, applied under an advisory lock;
//! - `rows`: the SQL statements, and binding rows (their encoding is shared
//!   with SQLite, in `store::sql`);
//! - `summaries`: the admin page's summaries and counts;
//! - `front_door`: the [`FrontDoorStore`] impl (spent states, sessions);
//! - `feed`: `LISTEN`/`NOTIFY`, the store's change feed;
//! - `tls`: the connector: the user's, or rustls as `sslmode` asks.

use std::fmt;

use async_trait::async_trait;
use deadpool_postgres::{GenericClient, Object, Pool, PoolError};
use futures::future::{try_join, try_join_all};
use serde_json::{Map, Value};
use tokio::sync::broadcast;

use super::{
    Answered, Appended, Change, FrontDoorStore, ListCursor, PageFrom, SchemaVersions, Store,
    StoreError, TaskCounts, TaskFilter, TaskRecord, TaskSummary, Transition, sql,
};
use crate::{error::Result, journal::JournalEntry, store::error::Context};

mod batch;
mod builder;
mod feed;
mod front_door;
mod rows;
use rows::Lock;
mod schema;
mod summaries;
#[cfg(all(test, feature = "testing"))]
mod tests;
mod tls;

pub use builder::PostgresStoreBuilder;
pub use tls::PostgresTls;

/// A [`Store`] in a PostgreSQL database: tasks that several processes
/// share.
///
/// Calls run on a pool of connections; each is atomic and returns once it
/// has committed. The tables live in one Postgres schema, `public` by
/// default ([`PostgresStoreBuilder::schema`]), and are created and migrated
/// on [`connect`](PostgresStoreBuilder::connect). It needs PostgreSQL 14 or
/// later (the schema keeps statistics on an expression).
///
/// TLS (rustls) is set by the URL's `sslmode`, as libpq reads it:
/// `disable`; `prefer` (the default: TLS when the server offers it, its
/// certificate not checked); `require` (TLS always, the certificate not
/// checked, unless a CA is given, when it is checked as by `verify-ca`);
/// `verify-ca` (the certificate must be signed by the CA in the PEM file
/// `sslrootcert`, or `~/.postgresql/root.crt`); `verify-full` (that, and it
/// must name the host). `allow`, `sslrootcert=system` and client
/// certificates are refused, naming the setting. Over a network you do not
/// trust, use `verify-full`:
/// `postgres://app@db.internal/tasks?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem`.
/// A connector of your own replaces all this:
/// [`PostgresStoreBuilder::tls`].
///
/// ```no_run
/// use mcp_tasks_runtime::store::{PostgresStore, Store};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mcp_tasks_runtime::Result<()> {
/// let store = PostgresStore::connect("postgres://postgres@127.0.0.1:5432/postgres").await?;
/// assert!(store.unfinished().await?.is_empty());
///
/// // Tables in a schema of their own, on at most 4 connections.
/// let store = PostgresStore::builder("postgres://postgres@127.0.0.1:5432/postgres")
///     .schema("mcp_tasks")
///     .max_connections(4)
///     .connect()
///     .await?;
/// assert_eq!(store.schema(), "mcp_tasks");
/// # Ok(())
/// # }
/// ```
///
/// To serve tasks from the store, hand it to an engine:
/// `Engine::builder(PostgresStore::connect(url).await?).start().await?`.
pub struct PostgresStore {
    pool: Pool,
    /// The server and database, for messages (never the password).
    target: String,
    schema: String,
    /// The channel its writes notify, and the feed listening to it (none
    /// for a store connected read-only).
    channel: String,
    feed: Option<feed::Feed>,
    /// Connected with [`PostgresStoreBuilder::connect_read_only`]: it
    /// refuses writes.
    read_only: bool,
    /// The schema version found at connect, and now.
    versions: SchemaVersions,
    /// Shares the commits of concurrent creates, appends and ends.
    writer: batch::Writer,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.target)
            .field("schema", &self.schema)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user@host:port/db`,
    /// or the `key=value` form) with the default options. This is the same
    /// as `PostgresStore::builder(url).connect().await`; see
    /// [`PostgresStoreBuilder::connect`].
    ///
    /// # Errors
    ///
    /// [`Error::Store`](crate::Error::Store), naming the server, if it
    /// cannot be reached or its schema brought up to date.
    pub async fn connect(url: impl Into<String>) -> Result<Self> {
        Self::builder(url).connect().await
    }

    /// Connects to the database at `url` to read the store only, with the
    /// default options: no migration, no write. This is the same as
    /// `PostgresStore::builder(url).connect_read_only().await`; see
    /// [`PostgresStoreBuilder::connect_read_only`].
    ///
    /// # Errors
    ///
    /// As [`PostgresStoreBuilder::connect_read_only`].
    pub async fn connect_read_only(url: impl Into<String>) -> Result<Self> {
        Self::builder(url).connect_read_only().await
    }

    /// Options for connecting to the database at `url`.
    pub fn builder(url: impl Into<String>) -> PostgresStoreBuilder {
        PostgresStoreBuilder::new(url.into())
    }

    /// The Postgres schema that holds the tables.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The schema's version when the store connected, now, and the newest
    /// this build knows. After [`PostgresStoreBuilder::connect`], `now` is
    /// the newest (`found` says whether the connect migrated the schema);
    /// after [`PostgresStoreBuilder::connect_read_only`], `now` is `found`,
    /// which may be older than the newest when this build reads it as it
    /// is.
    pub fn schema_versions(&self) -> SchemaVersions {
        self.versions
    }

    /// Whether the store was connected read-only
    /// ([`PostgresStoreBuilder::connect_read_only`]).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// A connection for a write, as [`client`](Self::client); for a store
    /// connected read-only, an error saying so (`what`: the write).
    async fn client_to_write(&self, what: impl Fn() -> String) -> Result<Object, StoreError> {
        self.writable(&what)?;
        self.client(what).await
    }

    /// For a store connected read-only, an error saying so (`what`: the
    /// write).
    fn writable(&self, what: impl FnOnce() -> String) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::new(format!(
                "{}: the Postgres store at {} (schema {}) is connected read-only \
                 (`PostgresStore::connect_read_only`), it takes no writes",
                what(),
                self.target,
                self.schema
            )));
        }
        Ok(())
    }

    /// Announces a new task that no instance holds: a free one should run
    /// it. (One created claimed is its creator's to run.)
    async fn announce_created(&self, c: &impl GenericClient, task: &TaskRecord) -> Result<()> {
        let now = crate::clock::now_ms();
        if task.claimable(now) {
            feed::notify(c, &self.channel, task, now).await?;
        }
        Ok(())
    }

    /// A connection from the pool. If none can be had, the error says what
    /// was being done (`what`), names the server, and carries the driver's
    /// error.
    /// [`Store::answer`] and [`Store::time_out`]: applies `change` (which
    /// takes questions off the record and gives the entries to journal) to
    /// the locked row, and writes the record and the entries, with the
    /// feed's notice, in one transaction.
    async fn take_inputs(
        &self,
        id: &str,
        now_ms: i64,
        what: impl Fn() -> String,
        change: impl FnOnce(&mut TaskRecord) -> (Vec<JournalEntry>, bool),
    ) -> Result<Option<Answered>> {
        let mut client = self.client_to_write(&what).await?;
        let tx = client.transaction().await.context(&what)?;
        let Some(mut record) = rows::select_task(&tx, id, Lock::Wait).await? else {
            return Ok(None);
        };
        let (entries, runnable) = change(&mut record);
        if !entries.is_empty() {
            self.write_back(&tx, &record, &entries, now_ms).await?;
            tx.commit().await.context(&what)?;
        }
        Ok(Some(Answered {
            record,
            accepted: entries.len(),
            runnable,
        }))
    }

    async fn client(&self, what: impl FnOnce() -> String) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(|e| {
            let context = format!(
                "{}: no connection to the Postgres store at {}",
                what(),
                self.target
            );
            match e {
                PoolError::Backend(e) => StoreError::new(context).with_source(e),
                e => StoreError::new(context).with_source(e),
            }
        })
    }

    /// [`Store::transition`], journaling `entries` in the same transaction
    /// when the change applies: in the writer's batch, or alone.
    async fn transition_with(
        &self,
        id: &str,
        entries: Vec<JournalEntry>,
        change: Transition,
        now_ms: i64,
        fence: Option<u64>,
    ) -> Result<Option<TaskRecord>> {
        self.writable(|| format!("could not update task {id}"))?;
        let input = (id.to_owned(), entries, change, now_ms, fence);
        match self.writer.end(&self.pool, &self.channel, input).await {
            batch::Batched::Done(outcome) => outcome,
            batch::Batched::Alone(input) => self.transition_alone(input).await,
        }
    }

    /// [`transition_with`](Self::transition_with) in a transaction of its
    /// own.
    async fn transition_alone(
        &self,
        (id, entries, change, now_ms, fence): batch::EndIn,
    ) -> Result<Option<TaskRecord>> {
        let id = id.as_str();
        let what = || format!("could not update task {id}");
        let mut client = self.client_to_write(what).await?;
        // Dropping `tx` without committing rolls it back.
        let tx = client.transaction().await.context(what)?;
        let Some(mut record) = rows::select_task(&tx, id, Lock::Wait).await? else {
            return Ok(None);
        };
        if !record.apply_fenced(change, now_ms, fence) {
            return Ok(None);
        }
        self.write_back(&tx, &record, &entries, now_ms).await?;
        tx.commit().await.context(what)?;
        Ok(Some(record))
    }

    /// Writes a changed `record` back to its locked row, with the `entries`
    /// to journal and the feed's notice, in the caller's transaction. The
    /// statements are sent together and answered together: one round trip,
    /// not one a statement.
    async fn write_back(
        &self,
        tx: &impl GenericClient,
        record: &TaskRecord,
        entries: &[JournalEntry],
        now_ms: i64,
    ) -> Result<()> {
        let payload = feed::payload(record, now_ms);
        let journaled = try_join_all(
            entries
                .iter()
                .map(|e| rows::insert_entry(tx, &record.id, e)),
        );
        let written = rows::update_state_and_notify(tx, record, &self.channel, &payload);
        try_join(journaled, written).await?;
        Ok(())
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn create(&self, task: TaskRecord) -> Result<()> {
        self.writable(|| format!("could not create task {}", task.id))?;
        let task = match self.writer.create(&self.pool, &self.channel, task).await {
            batch::Batched::Done(outcome) => return outcome,
            batch::Batched::Alone(task) => task,
        };
        let what = || format!("could not create task {}", task.id);
        let mut client = self.client_to_write(what).await?;
        if !task.claimable(crate::clock::now_ms()) {
            // Its creator runs it: nothing to announce, so the insert is
            // the whole write, one statement that commits on its own.
            return rows::insert_task(&client, &task).await;
        }
        let tx = client.transaction().await.context(what)?;
        rows::insert_task(&tx, &task).await?;
        self.announce_created(&tx, &task).await?;
        Ok(tx.commit().await.context(what)?)
    }

    async fn create_with_journal(
        &self,
        task: TaskRecord,
        journal: Vec<JournalEntry>,
    ) -> Result<()> {
        let what = || format!("could not create task {}", task.id);
        let mut client = self.client_to_write(what).await?;
        let tx = client.transaction().await.context(what)?;
        rows::insert_task(&tx, &task).await?;
        for entry in &journal {
            rows::insert_entry(&tx, &task.id, entry).await?;
        }
        self.announce_created(&tx, &task).await?;
        Ok(tx.commit().await.context(what)?)
    }

    async fn get(&self, id: &str) -> Result<Option<TaskRecord>> {
        let client = self.client(|| format!("could not read task {id}")).await?;
        rows::select_task(&client, id, Lock::None).await
    }

    async fn journal(&self, id: &str) -> Result<Vec<JournalEntry>> {
        let what = || format!("could not read the journal of task {id}");
        let client = self.client(what).await?;
        rows::select_journal(&client, id).await
    }

    async fn append(&self, id: &str, entry: JournalEntry, fence: u64) -> Result<Appended> {
        let what = || format!("could not journal position {} of task {id}", entry.position);
        self.writable(what)?;
        let input = (id.to_owned(), entry, fence);
        let entry = match self.writer.append(&self.pool, &self.channel, input).await {
            batch::Batched::Done(outcome) => return outcome,
            batch::Batched::Alone((_, entry, _)) => entry,
        };
        let what = || format!("could not journal position {} of task {id}", entry.position);
        let client = self.client_to_write(what).await?;
        rows::append_fenced(&client, id, &entry, fence).await
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

    async fn claim(
        &self,
        id: &str,
        owner: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<Option<(TaskRecord, Vec<JournalEntry>)>> {
        let what = || format!("could not claim task {id}");
        let mut client = self.client_to_write(what).await?;
        let tx = client.transaction().await.context(what)?;
        // Another instance claiming it right now: not ours to wait for.
        let read = match rows::select_task(&tx, id, Lock::SkipLocked).await {
            Ok(Some(task)) => rows::select_journal(&tx, id).await.map(|j| Some((task, j))),
            other => other.map(|_| None),
        };
        let (mut record, journal) = match read {
            Ok(Some(read)) => read,
            Ok(None) => return Ok(None),
            Err(crate::Error::Store(e)) if e.is_unreadable() => {
                rows::set_aside(&tx, id, &crate::Error::Store(e), now_ms).await?;
                tx.commit().await.context(what)?;
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        if !record.claim(owner, now_ms, until_ms) {
            return Ok(None);
        }
        rows::update_state(&tx, &record).await?;
        tx.commit().await.context(what)?;
        Ok(Some((record, journal)))
    }

    async fn renew(&self, owner: &str, now_ms: i64, until_ms: i64) -> Result<Vec<(String, u64)>> {
        let client = self
            .client_to_write(|| format!("could not renew the leases of {owner}"))
            .await?;
        rows::renew(&client, owner, now_ms, until_ms).await
    }

    async fn release(&self, owner: &str) -> Result<()> {
        let what = || format!("could not release the leases of {owner}");
        let mut client = self.client_to_write(what).await?;
        let tx = client.transaction().await.context(what)?;
        let now = crate::clock::now_ms();
        for record in rows::release(&tx, owner).await? {
            feed::notify(&tx, &self.channel, &record, now).await?;
        }
        Ok(tx.commit().await.context(what)?)
    }

    fn changes(&self) -> Option<broadcast::Receiver<Change>> {
        self.feed.as_ref().map(feed::Feed::subscribe)
    }

    async fn versions(&self, ids: &[String]) -> Result<Vec<(String, u64)>> {
        let client = self
            .client(|| "could not read the versions of tasks".to_owned())
            .await?;
        rows::select_versions(&client, ids).await
    }

    async fn unfinished_among(&self, ids: &[String]) -> Result<Vec<String>> {
        let client = self
            .client(|| "could not read which tasks are unfinished".to_owned())
            .await?;
        rows::select_unfinished_among(&client, ids).await
    }

    async fn claimable(&self, now_ms: i64, limit: usize) -> Result<Vec<String>> {
        let client = self
            .client(|| "could not read the claimable tasks".to_owned())
            .await?;
        rows::select_claimable(&client, now_ms, limit).await
    }

    async fn list(
        &self,
        principal: Option<&str>,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>> {
        let client = self
            .client(|| "could not list the tasks".to_owned())
            .await?;
        let (at, id) = after.map_or((i64::MIN, ""), |c| (c.created_at_ms, c.id.as_str()));
        rows::select_page(&client, principal, (at, id), limit).await
    }

    async fn list_all(&self, after: Option<&ListCursor>, limit: usize) -> Result<Vec<TaskRecord>> {
        let client = self
            .client(|| "could not list the tasks".to_owned())
            .await?;
        let (at, id) = after.map_or((i64::MIN, ""), |c| (c.created_at_ms, c.id.as_str()));
        rows::select_every_page(&client, (at, id), limit).await
    }

    async fn count_unfinished(&self, principal: Option<&str>) -> Result<usize> {
        let client = self
            .client(|| "could not count the unfinished tasks".to_owned())
            .await?;
        rows::count_unfinished(&client, principal).await
    }

    async fn summaries(
        &self,
        filter: &TaskFilter,
        from: Option<&PageFrom>,
        limit: usize,
    ) -> Result<Vec<TaskSummary>> {
        let client = self
            .client(|| "could not list the tasks".to_owned())
            .await?;
        let ((at, id), before) = sql::page_bounds(from);
        let filter = sql::FilterParams::of(filter);
        summaries::select_summaries(&client, &filter, (at, &id), before, limit).await
    }

    async fn count_tasks(&self, filter: &TaskFilter) -> Result<TaskCounts> {
        let client = self
            .client(|| "could not count the tasks".to_owned())
            .await?;
        summaries::count_tasks(&client, &sql::FilterParams::of(filter)).await
    }

    async fn answer(
        &self,
        id: &str,
        responses: Map<String, Value>,
        now_ms: i64,
    ) -> Result<Option<Answered>> {
        let what = || format!("could not answer task {id}");
        self.take_inputs(id, now_ms, what, |record| record.answer(responses, now_ms))
            .await
    }

    async fn time_out(&self, id: &str, now_ms: i64) -> Result<Option<Answered>> {
        let what = || format!("could not time out the questions of task {id}");
        self.take_inputs(id, now_ms, what, |record| record.time_out(now_ms))
            .await
    }

    async fn overdue(&self, now_ms: i64, limit: usize) -> Result<Vec<String>> {
        let client = self
            .client(|| "could not read the tasks with questions past their deadline".to_owned())
            .await?;
        rows::select_overdue(&client, now_ms, limit).await
    }

    async fn unfinished(&self) -> Result<Vec<TaskRecord>> {
        let what = || "could not read the unfinished tasks".to_owned();
        let client = self.client(what).await?;
        rows::select_unfinished(&client).await
    }

    async fn purge_expired(&self, now_ms: i64, limit: usize) -> Result<Vec<String>> {
        let what = || "could not delete the expired tasks".to_owned();
        let mut client = self.client_to_write(what).await?;
        // The deletion and its announcement commit together.
        let tx = client.transaction().await.context(what)?;
        let gone = rows::delete_expired(&tx, now_ms, limit).await?;
        feed::notify_gone(&tx, &self.channel, &gone).await?;
        tx.commit().await.context(what)?;
        Ok(gone)
    }

    async fn next_expiry(&self) -> Result<Option<i64>> {
        let what = || "could not read the next expiry".to_owned();
        let client = self.client(what).await?;
        rows::select_next_expiry(&client).await
    }

    fn front_door(self: std::sync::Arc<Self>) -> Option<std::sync::Arc<dyn FrontDoorStore>> {
        Some(self)
    }
}
