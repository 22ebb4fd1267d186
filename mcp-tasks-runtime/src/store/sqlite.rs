//! The embedded SQLite store: the durable default.
//!
//! One thread owns the connection. Async callers send it jobs over a channel,
//! and each job carries a oneshot sender for its reply. The thread takes every
//! job that is waiting (group commit) and runs the whole batch in one
//! `BEGIN IMMEDIATE` transaction, each job under its own savepoint, so a job
//! that fails rolls back only its own changes. The thread commits once and
//! only then replies. A caller is therefore told "done" only for data that has
//! been committed, and concurrent checkpoints share one fsync. If the batch
//! transaction itself fails (`BEGIN`, `COMMIT`, or an I/O error that makes
//! SQLite roll back), each job runs again alone in its own transaction, so a
//! failure reaches only the jobs it belongs to.
//!
//! The connection runs in WAL mode with foreign keys on and a busy timeout.
//! [`Synchronous`] picks how hard a commit works to be durable. The schema is
//! created and upgraded by the numbered SQL files in `store/migrations/`. They
//! are applied in order, inside one transaction, and tracked with
//! `PRAGMA user_version`.
//!
//! Reads (`get`, `journal`, `unfinished`, `next_expiry`) go to a second,
//! read-only connection on a thread of their own: in WAL mode they see every
//! committed write and never wait behind a batch that is committing.
//!
//! The store keeps no rows in memory. Every call reads the file (through
//! SQLite's own page cache), so a parked task costs a row on disk and nothing
//! else.

use std::{
    fmt,
    panic::{self, AssertUnwindSafe},
    path::{Path, PathBuf},
    sync::mpsc,
    thread,
    time::Duration,
};

use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags, Row, TransactionBehavior, params};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Map, Value};
use tokio::sync::oneshot;

use super::{Answered, Store, TaskRecord, TaskStatus, Transition};
use crate::{
    error::{Error, Result},
    journal::{JournalEntry, StepKind},
};

/// The schema, one step per file, in order. Step `n` (from 1) takes the
/// file from `user_version = n - 1` to `user_version = n`.
const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_tasks_and_journal.sql",
        include_str!("migrations/0001_tasks_and_journal.sql"),
    ),
    (
        "0002_task_version.sql",
        include_str!("migrations/0002_task_version.sql"),
    ),
];

/// The most jobs one transaction takes. This bounds how long a reply can
/// wait behind the rest of its batch.
const MAX_BATCH: usize = 4096;

const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The `tasks` columns in the order `decode_task` reads them.
macro_rules! task_columns {
    () => {
        "id, tool, arguments, client_capabilities, principal, status, status_message, \
         created_at_ms, updated_at_ms, ttl_ms, poll_interval_ms, pending, wake_at_ms, \
         cancel_requested, result, error, version"
    };
}

/// How durable a commit is: SQLite's `PRAGMA synchronous`, in WAL mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Synchronous {
    /// `NORMAL`: a commit survives a crash of the process. It can be lost if
    /// the machine loses power or the OS crashes before SQLite's next WAL
    /// checkpoint, but the file stays consistent. Commits do not wait for an
    /// fsync.
    Normal,
    /// `FULL`, the default: each commit syncs the WAL before it returns, so a
    /// commit also survives power loss.
    #[default]
    Full,
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Self::Normal => "NORMAL",
            Self::Full => "FULL",
        }
    }
}

/// Options for opening a [`SqliteStore`]. Made by [`SqliteStore::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `open` is called"]
pub struct SqliteStoreBuilder {
    path: PathBuf,
    synchronous: Synchronous,
    busy_timeout: Duration,
}

impl SqliteStoreBuilder {
    /// How durable a commit is. Defaults to [`Synchronous::Full`].
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// How long to wait for another connection's lock on the file before
    /// failing with "database is locked". Defaults to 5 seconds.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Opens or creates the database file, brings its schema up to date, and
    /// starts the thread that owns it.
    ///
    /// The blocking work runs on that thread, so awaiting this does not
    /// block the async runtime. The parent directory must already exist.
    ///
    /// # Errors
    ///
    /// [`Error::Store`], naming the path, if the file cannot be opened or
    /// switched to WAL mode, or if its schema is newer than this build knows.
    pub async fn open(self) -> Result<SqliteStore> {
        let jobs = self
            .start_thread(
                "mcp-tasks-sqlite",
                "its thread",
                connect,
                |conn, queue, path| {
                    serve(conn, queue, path);
                },
            )
            .await?;
        // The writer has created and migrated the file; now the reader.
        let reads = self
            .start_thread(
                "mcp-tasks-sqlite-read",
                "its read thread",
                connect_reader,
                |conn, queue, _| serve_reads(&conn, queue),
            )
            .await?;
        Ok(SqliteStore {
            jobs,
            reads,
            path: self.path,
        })
    }

    /// Starts a thread that opens a connection with `connect` and then serves
    /// the jobs sent to the returned queue with `serve`. Returns once the
    /// connection is open (or failed to open).
    async fn start_thread(
        &self,
        name: &str,
        what: &str,
        connect: fn(&SqliteStoreBuilder) -> Result<Connection>,
        serve: fn(Connection, &mpsc::Receiver<Box<dyn Job>>, &Path),
    ) -> Result<mpsc::Sender<Box<dyn Job>>> {
        let (jobs, queue) = mpsc::channel::<Box<dyn Job>>();
        let (ready_tx, ready_rx) = oneshot::channel();
        let config = self.clone();
        thread::Builder::new()
            .name(name.into())
            .spawn(move || match connect(&config) {
                Ok(conn) => {
                    if ready_tx.send(Ok(())).is_ok() {
                        serve(conn, &queue, &config.path);
                    }
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| {
                Error::Store(format!(
                    "SQLite store at {}: could not start {what}: {e}",
                    self.path.display()
                ))
            })?;
        ready_rx.await.map_err(|_| {
            Error::Store(format!(
                "SQLite store at {}: {what} stopped while opening the file",
                self.path.display()
            ))
        })??;
        Ok(jobs)
    }
}

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
    jobs: mpsc::Sender<Box<dyn Job>>,
    /// Reads go to a second connection on a thread of its own: WAL lets them
    /// run while a write batch commits, so `get` never waits behind a fsync.
    reads: mpsc::Sender<Box<dyn Job>>,
    path: PathBuf,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (or creates) the store at `path` with the default options. This
    /// is the same as `SqliteStore::builder(path).open().await`; see
    /// [`SqliteStoreBuilder::open`].
    ///
    /// # Errors
    ///
    /// [`Error::Store`], naming the path, if the file cannot be opened or
    /// its schema brought up to date.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::builder(path).open().await
    }

    /// Options for opening the store at `path`.
    pub fn builder(path: impl AsRef<Path>) -> SqliteStoreBuilder {
        SqliteStoreBuilder {
            path: path.as_ref().to_path_buf(),
            synchronous: Synchronous::default(),
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
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
        self.send(&self.jobs, f).await
    }

    /// Runs the read-only `f` on the read connection (its own snapshot of
    /// what has committed) and returns its result.
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> Result<T> + Send + 'static,
    {
        self.send(&self.reads, f).await
    }

    /// Sends `f` to a connection's thread and waits for its reply.
    async fn send<T, F>(&self, queue: &mpsc::Sender<Box<dyn Job>>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> Result<T> + Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        let job = Box::new(Call {
            f,
            out: None,
            reply,
        });
        if queue.send(job).is_err() {
            return Err(self.stopped());
        }
        rx.await.map_err(|_| self.stopped())?
    }

    fn stopped(&self) -> Error {
        Error::Store(format!(
            "SQLite store at {}: its thread has stopped",
            self.path.display()
        ))
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn create(&self, task: TaskRecord) -> Result<()> {
        self.call(move |c| insert_task(c, &task)).await
    }

    async fn create_with_journal(
        &self,
        task: TaskRecord,
        journal: Vec<JournalEntry>,
    ) -> Result<()> {
        self.call(move |c| {
            insert_task(c, &task)?;
            for entry in &journal {
                insert_entry(c, &task.id, entry)?;
            }
            Ok(())
        })
        .await
    }

    async fn get(&self, id: &str) -> Result<Option<TaskRecord>> {
        let id = id.to_owned();
        self.read(move |c| select_task(c, &id)).await
    }

    async fn journal(&self, id: &str) -> Result<Vec<JournalEntry>> {
        let id = id.to_owned();
        self.read(move |c| select_journal(c, &id)).await
    }

    async fn append(&self, id: &str, entry: JournalEntry) -> Result<()> {
        let id = id.to_owned();
        self.call(move |c| insert_entry(c, &id, &entry)).await
    }

    async fn transition(
        &self,
        id: &str,
        change: Transition,
        now_ms: i64,
    ) -> Result<Option<TaskRecord>> {
        let id = id.to_owned();
        self.call(move |c| {
            let Some(mut record) = select_task(c, &id)? else {
                return Ok(None);
            };
            if !record.apply(change.clone(), now_ms) {
                return Ok(None);
            }
            update_state(c, &record)?;
            Ok(Some(record))
        })
        .await
    }

    async fn answer(
        &self,
        id: &str,
        responses: Map<String, Value>,
        now_ms: i64,
    ) -> Result<Option<Answered>> {
        let id = id.to_owned();
        self.call(move |c| {
            let Some(mut record) = select_task(c, &id)? else {
                return Ok(None);
            };
            let (entries, runnable) = record.answer(responses.clone(), now_ms);
            if !entries.is_empty() {
                update_state(c, &record)?;
                for entry in &entries {
                    insert_entry(c, &id, entry)?;
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

    async fn unfinished(&self) -> Result<Vec<TaskRecord>> {
        self.read(|c| {
            let mut stmt = c
                .prepare_cached(concat!(
                    "SELECT ",
                    task_columns!(),
                    " FROM tasks WHERE status IN ('working', 'input_required')"
                ))
                .map_err(sql(|| "could not read the unfinished tasks".into()))?;
            let mut rows = stmt
                .query([])
                .map_err(sql(|| "could not read the unfinished tasks".into()))?;
            let mut tasks = Vec::new();
            while let Some(row) = rows
                .next()
                .map_err(sql(|| "could not read the unfinished tasks".into()))?
            {
                tasks.push(decode_task(row)?);
            }
            Ok(tasks)
        })
        .await
    }

    async fn purge_expired(&self, now_ms: i64) -> Result<Vec<String>> {
        self.call(move |c| {
            let mut stmt = c
                .prepare_cached("DELETE FROM tasks WHERE expires_at_ms <= ?1 RETURNING id")
                .map_err(sql(|| "could not delete the expired tasks".into()))?;
            let ids = stmt
                .query_map([now_ms], |row| row.get::<_, String>(0))
                .and_then(Iterator::collect)
                .map_err(sql(|| "could not delete the expired tasks".into()))?;
            Ok(ids)
        })
        .await
    }

    async fn next_expiry(&self) -> Result<Option<i64>> {
        self.read(|c| {
            c.prepare_cached("SELECT min(expires_at_ms) FROM tasks WHERE expires_at_ms IS NOT NULL")
                .and_then(|mut s| s.query_row([], |row| row.get(0)))
                .map_err(sql(|| "could not read the next expiry".into()))
        })
        .await
    }
}

// ---------------------------------------------------------------------------
// The owner thread.

/// A call waiting for the owner thread. It runs inside the batch's
/// transaction, and may run again alone if the batch fails. It replies once
/// the outcome is final.
trait Job: Send {
    /// Runs the call. Returns whether it succeeded, which decides whether its
    /// savepoint is released or rolled back.
    fn run(&mut self, conn: &Connection) -> bool;

    /// The transaction holding the call failed: its changes were not
    /// committed. An error the call already returned is kept.
    fn fail(&mut self, message: &str);

    /// Sends the outcome to the caller.
    fn reply(self: Box<Self>);
}

struct Call<F, T> {
    f: F,
    out: Option<Result<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<F, T> Job for Call<F, T>
where
    T: Send,
    F: Fn(&Connection) -> Result<T> + Send,
{
    fn run(&mut self, conn: &Connection) -> bool {
        // A bug that panics fails its own call, not the thread every call needs.
        let out = panic::catch_unwind(AssertUnwindSafe(|| (self.f)(conn))).unwrap_or_else(|_| {
            Err(Error::Store(
                "a SQLite store call panicked; see the log".into(),
            ))
        });
        let ok = out.is_ok();
        self.out = Some(out);
        ok
    }

    fn fail(&mut self, message: &str) {
        if !matches!(self.out, Some(Err(_))) {
            self.out = Some(Err(Error::Store(message.to_owned())));
        }
    }

    fn reply(self: Box<Self>) {
        let out = self
            .out
            .unwrap_or_else(|| Err(Error::Store("the SQLite call did not run".into())));
        // The caller may have stopped waiting; the outcome stands either way.
        let _ = self.reply.send(out);
    }
}

/// The owner thread's loop. It ends when every `SqliteStore` handle is
/// dropped and the queue is empty, and then closes the connection.
fn serve(mut conn: Connection, queue: &mpsc::Receiver<Box<dyn Job>>, path: &Path) {
    let mut batch: Vec<Box<dyn Job>> = Vec::new();
    while let Ok(first) = queue.recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        execute(&mut conn, &mut batch, path);
        for job in batch.drain(..) {
            job.reply();
        }
    }
}

/// Runs `batch` in one transaction. If that transaction fails, each job runs
/// again in a transaction of its own.
fn execute(conn: &mut Connection, batch: &mut [Box<dyn Job>], path: &Path) {
    let Err(e) = run_in_transaction(conn, batch, path) else {
        return;
    };
    if let [job] = batch {
        job.fail(&e);
        return;
    }
    tracing::warn!(
        store = %path.display(),
        error = %e,
        jobs = batch.len(),
        "SQLite batch failed; retrying its calls one by one"
    );
    for job in batch.iter_mut() {
        if let Err(e) = run_in_transaction(conn, std::slice::from_mut(job), path) {
            job.fail(&e);
        }
    }
}

/// One `BEGIN IMMEDIATE … COMMIT` around `jobs`, with a savepoint per job.
/// `Err` means nothing was committed.
fn run_in_transaction(
    conn: &mut Connection,
    jobs: &mut [Box<dyn Job>],
    path: &Path,
) -> std::result::Result<(), String> {
    let fail = |what: &str, e: rusqlite::Error| {
        format!(
            "SQLite store at {}: could not {what} a transaction: {e}",
            path.display()
        )
    };
    // Dropping `tx` without committing rolls it back.
    let mut tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| fail("begin", e))?;
    for job in jobs.iter_mut() {
        let sp = tx.savepoint().map_err(|e| fail("continue", e))?;
        if job.run(&sp) {
            sp.commit().map_err(|e| fail("continue", e))?;
        } else {
            // Rolls back to the savepoint and releases it. This fails if SQLite
            // has already rolled back the whole transaction.
            sp.finish().map_err(|e| fail("continue", e))?;
        }
    }
    tx.commit().map_err(|e| fail("commit", e))
}

/// The read connection: read-only, on a file the writer has set up.
fn connect_reader(config: &SqliteStoreBuilder) -> Result<Connection> {
    let path = &config.path;
    let fail = |what: &'static str| {
        move |e: rusqlite::Error| {
            Error::Store(format!(
                "SQLite store at {}: could not {what} for reading: {e}",
                path.display()
            ))
        }
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(fail("open the file"))?;
    conn.busy_timeout(config.busy_timeout)
        .map_err(fail("set the busy timeout"))?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

/// The read thread's loop: one call at a time, each in its own implicit
/// read transaction. Ends when every `SqliteStore` handle is dropped.
fn serve_reads(conn: &Connection, queue: &mpsc::Receiver<Box<dyn Job>>) {
    while let Ok(mut job) = queue.recv() {
        job.run(conn);
        job.reply();
    }
}

fn connect(config: &SqliteStoreBuilder) -> Result<Connection> {
    let path = &config.path;
    let fail = |what: &'static str| {
        move |e: rusqlite::Error| {
            Error::Store(format!(
                "SQLite store at {}: could not {what}: {e}",
                path.display()
            ))
        }
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = Connection::open_with_flags(path, flags).map_err(fail("open the file"))?;
    conn.busy_timeout(config.busy_timeout)
        .map_err(fail("set the busy timeout"))?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(fail("switch to WAL mode"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::Store(format!(
            "SQLite store at {}: could not switch to WAL mode: the journal mode stays {mode:?}",
            path.display()
        )));
    }
    conn.pragma_update(None, "synchronous", config.synchronous.pragma())
        .map_err(fail("set `synchronous`"))?;
    conn.pragma_update(None, "foreign_keys", true)
        .map_err(fail("turn on foreign keys"))?;
    conn.set_prepared_statement_cache_capacity(32);
    migrate(&mut conn, path)?;
    Ok(conn)
}

/// Applies the migrations the file has not seen yet, all in one transaction.
fn migrate(conn: &mut Connection, path: &Path) -> Result<()> {
    let fail = |what: &str, e: rusqlite::Error| {
        Error::Store(format!(
            "SQLite store at {}: could not {what}: {e}",
            path.display()
        ))
    };
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| fail("lock the schema", e))?;
    let version: i64 = tx
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(|e| fail("read the schema version", e))?;
    let latest = MIGRATIONS.len();
    let Some(from) = usize::try_from(version).ok().filter(|v| *v <= latest) else {
        return Err(Error::Store(format!(
            "SQLite store at {}: the file has schema version {version}, but this build knows \
             versions up to {latest}; open it with the newer build that wrote it",
            path.display()
        )));
    };
    for (name, sql) in &MIGRATIONS[from..] {
        tx.execute_batch(sql)
            .map_err(|e| fail(&format!("apply migration {name}"), e))?;
    }
    if from < latest {
        tx.pragma_update(None, "user_version", latest as i64)
            .map_err(|e| fail("record the schema version", e))?;
        tracing::info!(store = %path.display(), from, to = latest, "SQLite schema migrated");
    }
    tx.commit().map_err(|e| fail("commit the schema", e))
}

// ---------------------------------------------------------------------------
// Rows.

/// Turns a rusqlite error into [`Error::Store`] that says what was being done.
fn sql(what: impl FnOnce() -> String) -> impl FnOnce(rusqlite::Error) -> Error {
    move |e| Error::Store(format!("{}: {e}", what()))
}

fn insert_task(c: &Connection, t: &TaskRecord) -> Result<()> {
    let id = &t.id;
    let inserted = c
        .prepare_cached(concat!(
            "INSERT INTO tasks (",
            task_columns!(),
            ", expires_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, \
             ?14, ?15, ?16, ?17, ?18) ON CONFLICT (id) DO NOTHING"
        ))
        .and_then(|mut s| {
            s.execute(params![
                id,
                t.tool,
                to_json(id, "arguments", &t.arguments)?,
                to_json(id, "client_capabilities", &t.client_capabilities)?,
                t.principal,
                t.status.as_str(),
                t.status_message,
                t.created_at_ms,
                t.updated_at_ms,
                t.ttl_ms.map(millis_to_sql),
                t.poll_interval_ms.map(millis_to_sql),
                to_json(id, "pending", &t.pending)?,
                t.wake_at_ms,
                t.cancel_requested,
                t.result
                    .as_ref()
                    .map(|r| to_json(id, "result", r))
                    .transpose()?,
                t.error
                    .as_ref()
                    .map(|e| to_json(id, "error", e))
                    .transpose()?,
                version_to_sql(t.version),
                t.expires_at_ms(),
            ])
        })
        .map_err(sql(|| format!("could not create task {id}")))?;
    if inserted == 0 {
        return Err(Error::Store(format!(
            "could not create task {id}: it already exists"
        )));
    }
    Ok(())
}

/// Writes the columns that [`TaskRecord::apply`] and [`TaskRecord::answer`] change; the
/// rest of a task never changes after `create`.
fn update_state(c: &Connection, t: &TaskRecord) -> Result<()> {
    let id = &t.id;
    c.prepare_cached(
        "UPDATE tasks SET status = ?2, status_message = ?3, updated_at_ms = ?4, pending = ?5, \
         wake_at_ms = ?6, cancel_requested = ?7, result = ?8, error = ?9, version = ?10 \
         WHERE id = ?1",
    )
    .and_then(|mut s| {
        s.execute(params![
            id,
            t.status.as_str(),
            t.status_message,
            t.updated_at_ms,
            to_json(id, "pending", &t.pending)?,
            t.wake_at_ms,
            t.cancel_requested,
            t.result
                .as_ref()
                .map(|r| to_json(id, "result", r))
                .transpose()?,
            t.error
                .as_ref()
                .map(|e| to_json(id, "error", e))
                .transpose()?,
            version_to_sql(t.version),
        ])
    })
    .map_err(sql(|| format!("could not update task {id}")))?;
    Ok(())
}

fn select_task(c: &Connection, id: &str) -> Result<Option<TaskRecord>> {
    let what = || format!("could not read task {id}");
    let mut stmt = c
        .prepare_cached(concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE id = ?1"
        ))
        .map_err(sql(what))?;
    let mut rows = stmt.query([id]).map_err(sql(what))?;
    match rows.next().map_err(sql(what))? {
        Some(row) => decode_task(row).map(Some),
        None => Ok(None),
    }
}

fn decode_task(row: &Row<'_>) -> Result<TaskRecord> {
    let id: String = row.get(0).map_err(|e| {
        Error::Store(format!(
            "a task in the SQLite store has an unreadable id: {e}"
        ))
    })?;
    let col = Columns { row, id: &id };
    let status: String = col.get(5, "status")?;
    let status = TaskStatus::parse(&status)
        .ok_or_else(|| col.bad("status", format!("unknown status {status:?}")))?;
    let record = TaskRecord {
        tool: col.get(1, "tool")?,
        arguments: col.json(2, "arguments")?,
        client_capabilities: col.json(3, "client_capabilities")?,
        principal: col.get(4, "principal")?,
        status,
        status_message: col.get(6, "status_message")?,
        created_at_ms: col.get(7, "created_at_ms")?,
        updated_at_ms: col.get(8, "updated_at_ms")?,
        ttl_ms: col.unsigned(9, "ttl_ms")?,
        poll_interval_ms: col.unsigned(10, "poll_interval_ms")?,
        pending: col.json(11, "pending")?,
        wake_at_ms: col.get(12, "wake_at_ms")?,
        cancel_requested: col.get(13, "cancel_requested")?,
        result: col.json(14, "result")?,
        error: col.json(15, "error")?,
        version: col.unsigned(16, "version")?.unwrap_or_default(),
        id,
    };
    Ok(record)
}

/// Reads a task row's columns, naming the task when one is unreadable.
struct Columns<'a, 'r> {
    row: &'a Row<'r>,
    id: &'a str,
}

impl Columns<'_, '_> {
    fn bad(&self, column: &str, e: impl fmt::Display) -> Error {
        Error::Store(format!(
            "task {} in the SQLite store has an unreadable `{column}`: {e}",
            self.id
        ))
    }

    fn get<T: rusqlite::types::FromSql>(&self, i: usize, column: &str) -> Result<T> {
        self.row.get(i).map_err(|e| self.bad(column, e))
    }

    /// A JSON column; `T = Option<_>` reads NULL as `None`.
    fn json<T: DeserializeOwned>(&self, i: usize, column: &str) -> Result<T> {
        let text: Option<String> = self.get(i, column)?;
        serde_json::from_str(text.as_deref().unwrap_or("null")).map_err(|e| self.bad(column, e))
    }

    fn unsigned(&self, i: usize, column: &str) -> Result<Option<u64>> {
        let ms: Option<i64> = self.get(i, column)?;
        ms.map(|ms| u64::try_from(ms).map_err(|_| self.bad(column, format!("negative ({ms})"))))
            .transpose()
    }
}

/// Journals `e` unless its position is taken (the first entry is kept) or
/// the task is gone (as in [`MemoryStore`](super::MemoryStore)).
fn insert_entry(c: &Connection, id: &str, e: &JournalEntry) -> Result<()> {
    let position = e.position;
    c.prepare_cached(
        "INSERT INTO journal (task_id, position, kind, name, value) \
         SELECT ?1, ?2, ?3, ?4, ?5 WHERE EXISTS (SELECT 1 FROM tasks WHERE id = ?1) \
         ON CONFLICT (task_id, position) DO NOTHING",
    )
    .and_then(|mut s| {
        s.execute(params![
            id,
            position,
            e.kind.as_str(),
            e.name,
            to_json(id, "journal value", &e.value)?,
        ])
    })
    .map_err(sql(|| {
        format!("could not journal position {position} of task {id}")
    }))?;
    Ok(())
}

fn select_journal(c: &Connection, id: &str) -> Result<Vec<JournalEntry>> {
    let what = || format!("could not read the journal of task {id}");
    let mut stmt = c
        .prepare_cached(
            "SELECT position, kind, name, value FROM journal WHERE task_id = ?1 ORDER BY position",
        )
        .map_err(sql(what))?;
    let mut rows = stmt.query([id]).map_err(sql(what))?;
    let mut entries = Vec::new();
    while let Some(row) = rows.next().map_err(sql(what))? {
        entries.push(decode_entry(id, row)?);
    }
    Ok(entries)
}

fn decode_entry(id: &str, row: &Row<'_>) -> Result<JournalEntry> {
    let bad = |what: &str, e: &dyn fmt::Display| {
        Error::Store(format!(
            "task {id} in the SQLite store has an unreadable journal entry ({what}): {e}"
        ))
    };
    let position: i64 = row.get(0).map_err(|e| bad("position", &e))?;
    let position = u32::try_from(position).map_err(|_| bad("position", &position))?;
    let bad = |what: &str, e: &dyn fmt::Display| bad(&format!("{what} at position {position}"), e);
    let kind: String = row.get(1).map_err(|e| bad("kind", &e))?;
    let kind = StepKind::parse(&kind).ok_or_else(|| bad("kind", &format!("{kind:?}")))?;
    let name: String = row.get(2).map_err(|e| bad("name", &e))?;
    let value: String = row.get(3).map_err(|e| bad("value", &e))?;
    let value = serde_json::from_str(&value).map_err(|e| bad("value", &e))?;
    Ok(JournalEntry {
        position,
        kind,
        name,
        value,
    })
}

/// JSON text for a column. Encoding a `serde_json` value cannot fail, but
/// the error is still reported rather than unwrapped. It is returned as a
/// rusqlite error so that it can be raised while binding parameters.
fn to_json(id: &str, what: &str, value: &impl Serialize) -> rusqlite::Result<String> {
    serde_json::to_string(value).map_err(|e| {
        rusqlite::Error::ToSqlConversionFailure(
            format!("could not encode the {what} of task {id} as JSON: {e}").into(),
        )
    })
}

/// Milliseconds that do not fit in SQLite's i64 are stored as `i64::MAX`
/// (292 million years), which is how [`TaskRecord::expires_at_ms`] already
/// treats them.
fn version_to_sql(version: u64) -> i64 {
    i64::try_from(version).unwrap_or(i64::MAX)
}

fn millis_to_sql(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn open(sync: Synchronous) -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::builder(dir.path().join("t.db"))
            .synchronous(sync)
            .open()
            .await
            .unwrap();
        (dir, store)
    }

    fn pragma(c: &Connection, name: &str) -> String {
        c.pragma_query_value(None, name, |r| r.get::<_, rusqlite::types::Value>(0))
            .map(|v| format!("{v:?}"))
            .unwrap()
    }

    #[tokio::test]
    async fn connection_settings() {
        for (sync, level) in [(Synchronous::Full, "2"), (Synchronous::Normal, "1")] {
            let (_dir, store) = open(sync).await;
            let got = store
                .call(|c| {
                    Ok([
                        pragma(c, "journal_mode"),
                        pragma(c, "synchronous"),
                        pragma(c, "foreign_keys"),
                        pragma(c, "busy_timeout"),
                    ])
                })
                .await
                .unwrap();
            assert_eq!(
                got,
                [
                    r#"Text("wal")"#.to_owned(),
                    format!("Integer({level})"),
                    "Integer(1)".to_owned(),
                    "Integer(5000)".to_owned(),
                ]
            );
        }
    }

    /// The sweep, `next_expiry` and recovery read indexes, not the table.
    #[tokio::test]
    async fn queries_use_the_indexes() {
        let (_dir, store) = open(Synchronous::Normal).await;
        let plan = |query: &'static str| {
            store.call(move |c| {
                let mut stmt = c.prepare(&format!("EXPLAIN QUERY PLAN {query}")).unwrap();
                let rows = stmt
                    .query_map([], |r| r.get::<_, String>(3))
                    .unwrap()
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .unwrap();
                Ok(rows.join("; "))
            })
        };
        let p = plan("DELETE FROM tasks WHERE expires_at_ms <= 5 RETURNING id")
            .await
            .unwrap();
        assert!(p.contains("INDEX tasks_by_expiry"), "{p}");
        // The cascade finds the journal rows by key, too.
        assert!(!p.contains("SCAN"), "{p}");
        let p = plan("SELECT min(expires_at_ms) FROM tasks WHERE expires_at_ms IS NOT NULL")
            .await
            .unwrap();
        assert!(p.contains("tasks_by_expiry"), "{p}");
        assert!(!p.contains("SCAN"), "{p}");
        let p = plan(concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE status IN ('working', 'input_required')"
        ))
        .await
        .unwrap();
        assert!(p.contains("INDEX tasks_unfinished"), "{p}");
        assert!(!p.contains("SCAN"), "{p}");
    }

    /// A failing call in a batch rolls back only its own writes.
    #[tokio::test]
    async fn failed_call_rolls_back_only_itself() {
        let (_dir, store) = open(Synchronous::Normal).await;
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        // Hold the owner thread so the next three calls land in one batch.
        let gate = store.call(move |_| {
            let _ = rx.recv_timeout(Duration::from_secs(5));
            Ok(())
        });
        let write = |sql: &'static str, fail: bool| {
            store.call(move |c| {
                c.execute_batch(sql).map_err(sql_err)?;
                if fail {
                    return Err(Error::Store("failed on purpose".into()));
                }
                Ok(())
            })
        };
        let (g, a, b, d, ()) = tokio::join!(
            gate,
            write("CREATE TABLE a (x INTEGER)", false),
            write("CREATE TABLE b (x INTEGER)", true),
            write("CREATE TABLE d (x INTEGER)", false),
            async {
                tokio::task::yield_now().await;
                tx.send(()).unwrap();
            },
        );
        g.unwrap();
        a.unwrap();
        assert!(b.unwrap_err().to_string().contains("failed on purpose"));
        d.unwrap();
        let tables = store
            .call(|c| {
                let mut s = c
                    .prepare("SELECT name FROM sqlite_master WHERE name IN ('a', 'b', 'd') ORDER BY name")
                    .unwrap();
                Ok(s.query_map([], |r| r.get::<_, String>(0))
                    .unwrap()
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .unwrap())
            })
            .await
            .unwrap();
        assert_eq!(tables, ["a", "d"]);
    }

    /// Reads use their own connection: a read completes while a write batch
    /// is still in progress on the writer thread.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_do_not_wait_behind_writes() {
        let (_dir, store) = open(Synchronous::Full).await;
        let store = std::sync::Arc::new(store);
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        let blocked = std::sync::Mutex::new(blocked);
        let (started_tx, started) = oneshot::channel::<()>();
        let started_tx = std::sync::Mutex::new(Some(started_tx));
        let writer = {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .call(move |_| {
                        if let Some(tx) = started_tx.lock().unwrap().take() {
                            let _ = tx.send(());
                        }
                        // Hold the writer until the test says so.
                        let _ = blocked
                            .lock()
                            .unwrap()
                            .recv_timeout(Duration::from_secs(10));
                        Ok(())
                    })
                    .await
            })
        };
        started.await.unwrap();
        let read = tokio::time::timeout(Duration::from_secs(5), store.get("nobody")).await;
        assert!(
            matches!(read, Ok(Ok(None))),
            "the read finished while the writer was busy: {read:?}"
        );
        release.send(()).unwrap();
        writer.await.unwrap().unwrap();
    }

    /// A call that panics fails alone; the thread lives on.
    #[tokio::test]
    async fn panicking_call_fails_alone() {
        let (_dir, store) = open(Synchronous::Normal).await;
        let r: Result<()> = store.call(|_| panic!("a bug")).await;
        assert!(r.unwrap_err().to_string().contains("panicked"));
        assert_eq!(store.next_expiry().await.unwrap(), None);
    }

    fn sql_err(e: rusqlite::Error) -> Error {
        Error::Store(e.to_string())
    }
}
