//! The threads that own the connections, and the calls they run.
//!
//! A [`Worker`] is one thread that owns one connection, fed by a job queue.
//! Async callers send it a [`Job`] carrying a oneshot sender for its reply.
//!
//! The writer takes every job that is waiting (group commit) and runs the
//! whole batch in one `BEGIN IMMEDIATE` transaction. A job that fails rolls
//! back only its own changes: when one does, the batch runs again with each
//! job under its own savepoint (usually every job succeeds, and none is
//! needed). It commits once and only then replies. If the batch transaction
//! itself fails (`BEGIN`, `COMMIT`, or an I/O error that makes SQLite roll
//! back), each job runs again alone in its own transaction, so a failure
//! reaches only the jobs it belongs to. A batch made only of deferrable jobs (the end of a
//! run, which no caller waits for: [`Urgency::Deferrable`]) first waits up
//! to [`LINGER`] for another job to join it, so that the two share one
//! commit and one flush.
//!
//! The reader runs one job at a time on a read-only connection, each in its
//! own implicit read transaction.
//!
//! Between batches, at most every `SqliteStoreBuilder::poll_interval`, the
//! writer asks its connection for `PRAGMA data_version`, which moves only
//! when *another* connection (another process sharing the file) has
//! committed: the writer's own commits leave it alone, and the reader never
//! writes. When it moves, the store's feed says so ([`Change::Missed`]), and
//! the engines on this store look again at what they follow. A process alone
//! on its file never hears anything from it.

use std::{
    panic::{self, AssertUnwindSafe},
    path::{Path, PathBuf},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use rusqlite::Connection;
use tokio::sync::{broadcast, oneshot};

use super::{SqliteStoreBuilder, schema};
use crate::{
    error::Result,
    store::{Change, StoreError, error::Context},
};

/// The most jobs one transaction takes. This bounds how long a reply can
/// wait behind the rest of its batch.
const MAX_BATCH: usize = 4096;

/// How long a batch of deferrable jobs alone (see [`Urgency::Deferrable`])
/// waits for another job to share its commit.
pub(super) const LINGER: Duration = Duration::from_millis(1);

/// Whether a write's caller is waiting for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Urgency {
    /// Someone waits: a client for its answer, a run for its step. The
    /// writer starts the batch at once.
    Now,
    /// Nobody waits on its commit but the task's watchers: the end of a
    /// run (its completion, its failure, its park or sleep). A batch of
    /// these alone waits up to [`LINGER`] for another job to share its
    /// commit and its flush (`synchronous=FULL`), which, while calls keep
    /// coming, is usually the next create.
    Deferrable,
}

/// A thread that owns a connection, and the queue that feeds it. Dropping
/// the last handle lets the thread finish the jobs already sent, close the
/// connection, and exit.
pub(super) struct Worker {
    jobs: mpsc::Sender<Box<dyn Job>>,
    path: PathBuf,
    /// Whether this is the writer, whose calls are timed (the
    /// `mcp_tasks_sqlite_write_seconds` histogram).
    writes: bool,
    /// The thread that owns the connection.
    thread: Option<thread::JoinHandle<()>>,
    /// Whether dropping the worker waits for its thread to close the
    /// connection (a read-only store's; see [`Worker::read_only`]).
    joins: bool,
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take().filter(|_| self.joins) {
            // Hang up, so that the thread finishes and closes its connection.
            self.jobs = mpsc::channel().0;
            let _ = thread.join();
        }
    }
}

impl Worker {
    /// Starts the writer: it opens (or creates) the file, brings its schema
    /// up to date, and then commits the jobs it is sent in batches.
    /// The changes other processes commit to the file are announced on
    /// `feed`. Returns it with the schema version the file had.
    pub(super) async fn writer(
        config: &SqliteStoreBuilder,
        feed: broadcast::Sender<Change>,
    ) -> Result<(Self, u32)> {
        let (poll, linger) = (config.poll_interval, config.linger);
        let (writer, found) = Self::start(
            config,
            "mcp-tasks-sqlite",
            "its thread",
            schema::connect,
            move |conn, queue, path| {
                serve_writes(conn, queue, path, Others::new(feed, poll), linger);
            },
        )
        .await?;
        let mut writer = writer;
        writer.writes = true;
        Ok((writer, found))
    }

    /// Starts the reader, on a file the writer has already set up.
    pub(super) async fn reader(config: &SqliteStoreBuilder) -> Result<Self> {
        let (reader, ()) = Self::start(
            config,
            "mcp-tasks-sqlite-read",
            "its read thread",
            |config| schema::connect_reader(config).map(|conn| (conn, ())),
            serve_reads,
        )
        .await?;
        Ok(reader)
    }

    /// Starts the reader of a store opened read-only (there is no writer):
    /// see `schema::connect_read_only`. Returns it with the schema version
    /// of the file.
    ///
    /// Dropping it waits until its thread has closed the connection. SQLite
    /// shares one `-shm` mapping among the connections of a process, and a
    /// read-only one (`readonly_shm`) would make a writing connection that
    /// this process opens next read-only too: once the store is dropped,
    /// that can no longer happen.
    pub(super) async fn read_only(config: &SqliteStoreBuilder) -> Result<(Self, u32)> {
        let (mut reader, found) = Self::start(
            config,
            "mcp-tasks-sqlite-read",
            "its read thread",
            schema::connect_read_only,
            serve_reads,
        )
        .await?;
        reader.joins = true;
        Ok((reader, found))
    }

    /// Starts a thread that opens a connection with `connect` and then serves
    /// the jobs sent to it with `serve`. Returns once the connection is open
    /// (or failed to open), with what `connect` said besides the connection.
    async fn start<T: Send + 'static>(
        config: &SqliteStoreBuilder,
        name: &str,
        what: &str,
        connect: fn(&SqliteStoreBuilder) -> Result<(Connection, T)>,
        serve: impl FnOnce(Connection, &mpsc::Receiver<Box<dyn Job>>, &Path) + Send + 'static,
    ) -> Result<(Self, T)> {
        let (jobs, queue) = mpsc::channel::<Box<dyn Job>>();
        let (ready_tx, ready_rx) = oneshot::channel();
        let thread_config = config.clone();
        let path = &config.path;
        let thread = thread::Builder::new()
            .name(name.into())
            .spawn(move || match connect(&thread_config) {
                Ok((conn, said)) => {
                    if ready_tx.send(Ok(said)).is_ok() {
                        serve(conn, &queue, &thread_config.path);
                    }
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .context(|| format!("SQLite store at {}: could not start {what}", path.display()))?;
        let said = ready_rx.await.map_err(|_| {
            StoreError::new(format!(
                "SQLite store at {}: {what} stopped while opening the file",
                path.display()
            ))
        })??;
        Ok((
            Self {
                jobs,
                path: path.clone(),
                writes: false,
                thread: Some(thread),
                joins: false,
            },
            said,
        ))
    }

    /// Sends `f` to the thread and waits for its reply. On the writer, `f`
    /// runs inside the current batch's transaction and the reply comes once
    /// that transaction has committed; `f` may run more than once, because a
    /// failed batch runs each of its calls again alone.
    pub(super) async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> Result<T> + Send + 'static,
    {
        self.run_as(Urgency::Now, f).await
    }

    /// [`run`](Self::run), for a job of this `urgency` (on the writer).
    pub(super) async fn run_as<T, F>(&self, urgency: Urgency, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> Result<T> + Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        let job = Box::new(Call {
            f,
            urgency,
            out: None,
            reply,
        });
        let began = self.writes.then(crate::metrics::began);
        if self.jobs.send(job).is_err() {
            return Err(self.stopped().into());
        }
        let out = rx.await.map_err(|_| self.stopped())?;
        if let Some(began) = began {
            crate::metrics::sqlite_write(began);
        }
        out
    }

    fn stopped(&self) -> StoreError {
        StoreError::new(format!(
            "SQLite store at {}: its thread has stopped",
            self.path.display()
        ))
    }
}

/// A call waiting for a worker. On the writer it runs inside the batch's
/// transaction, and may run again alone if the batch fails. It replies once
/// the outcome is final.
trait Job: Send {
    /// Runs the call. Returns whether it succeeded, which decides whether its
    /// writes are kept or rolled back.
    fn run(&mut self, conn: &Connection) -> bool;

    /// The transaction holding the call failed: its changes were not
    /// committed. An error the call already returned is kept.
    fn fail(&mut self, error: &StoreError);

    /// Sends the outcome to the caller.
    fn reply(self: Box<Self>);

    /// Whether its caller waits for it.
    fn urgency(&self) -> Urgency;
}

struct Call<F, T> {
    f: F,
    urgency: Urgency,
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
            Err(StoreError::new("a SQLite store call panicked; see the log").into())
        });
        let ok = out.is_ok();
        self.out = Some(out);
        ok
    }

    fn fail(&mut self, error: &StoreError) {
        if !matches!(self.out, Some(Err(_))) {
            self.out = Some(Err(error.clone().into()));
        }
    }

    fn reply(self: Box<Self>) {
        let out = self
            .out
            .unwrap_or_else(|| Err(StoreError::new("the SQLite call did not run").into()));
        // The caller may have stopped waiting; the outcome stands either way.
        let _ = self.reply.send(out);
    }

    fn urgency(&self) -> Urgency {
        self.urgency
    }
}

/// What the writer knows of other processes' commits to its file.
struct Others {
    feed: broadcast::Sender<Change>,
    every: Duration,
    /// The connection's `data_version` when last read.
    seen: Option<i64>,
    /// When to read it next.
    next: Instant,
}

impl Others {
    fn new(feed: broadcast::Sender<Change>, every: Duration) -> Self {
        Self {
            feed,
            every,
            seen: None,
            next: Instant::now(),
        }
    }

    /// Reads `data_version` if it is time to, and announces a move. Returns
    /// how long until the next read.
    fn check(&mut self, conn: &Connection, path: &Path) -> Duration {
        let now = Instant::now();
        if now < self.next {
            return self.next - now;
        }
        match conn.query_row("PRAGMA data_version", [], |row| row.get::<_, i64>(0)) {
            Ok(version) => {
                if self
                    .seen
                    .replace(version)
                    .is_some_and(|seen| seen != version)
                {
                    // No receiver (no engine yet) is not an error.
                    let _ = self.feed.send(Change::Missed);
                }
            }
            Err(e) => tracing::warn!(
                store = %path.display(),
                error = %e,
                "SQLite store: could not read data_version to hear of other processes' changes"
            ),
        }
        self.next = now + self.every;
        self.every
    }
}

/// The writer's loop. It ends when every handle is dropped and the queue is
/// empty, and then closes the connection. Between batches it checks for
/// other processes' commits (`others`).
fn serve_writes(
    conn: Connection,
    queue: &mpsc::Receiver<Box<dyn Job>>,
    path: &Path,
    mut others: Others,
    linger: Duration,
) {
    let mut batch: Vec<Box<dyn Job>> = Vec::new();
    loop {
        let first = match queue.recv_timeout(others.check(&conn, path)) {
            Ok(job) => job,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        batch.push(first);
        take_waiting(queue, &mut batch);
        // Deferrable jobs alone, with room for more: wait a moment for one
        // to share the commit.
        if batch.len() < MAX_BATCH
            && batch.iter().all(|j| j.urgency() == Urgency::Deferrable)
            && let Ok(job) = queue.recv_timeout(linger)
        {
            batch.push(job);
            take_waiting(queue, &mut batch);
        }
        execute(&conn, &mut batch, path);
        for job in batch.drain(..) {
            job.reply();
        }
    }
}

/// Adds the jobs waiting in `queue` to `batch`, up to [`MAX_BATCH`].
fn take_waiting(queue: &mpsc::Receiver<Box<dyn Job>>, batch: &mut Vec<Box<dyn Job>>) {
    while batch.len() < MAX_BATCH {
        match queue.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
}

/// Runs `batch` in one transaction. If that transaction fails, each job runs
/// again in a transaction of its own.
fn execute(conn: &Connection, batch: &mut [Box<dyn Job>], path: &Path) {
    let Err(e) = run_in_transaction(conn, batch, path) else {
        return;
    };
    if let [job] = batch {
        job.fail(&e);
        return;
    }
    tracing::warn!(
        store = %path.display(),
        error = %crate::id::Redacted(&e),
        jobs = batch.len(),
        "SQLite batch failed; retrying its calls one by one"
    );
    for job in batch.iter_mut() {
        if let Err(e) = run_in_transaction(conn, std::slice::from_mut(job), path) {
            job.fail(&e);
        }
    }
}

/// One `BEGIN IMMEDIATE … COMMIT` around `jobs`. `Err` means nothing was
/// committed.
fn run_in_transaction(
    conn: &Connection,
    jobs: &mut [Box<dyn Job>],
    path: &Path,
) -> std::result::Result<(), StoreError> {
    let began = crate::metrics::began();
    let out = transaction(conn, jobs, path);
    crate::metrics::sqlite_commit(began);
    out
}

/// The statements that open and close a batch's transaction and its jobs'
/// savepoints. They run through the statement cache like every other
/// statement of the writer: prepared once, not parsed again per batch.
const BEGIN: &str = "BEGIN IMMEDIATE";
const COMMIT: &str = "COMMIT";
const ROLLBACK: &str = "ROLLBACK";
const SAVEPOINT: &str = "SAVEPOINT job";
const RELEASE: &str = "RELEASE job";
const ROLLBACK_TO: &str = "ROLLBACK TO job";

/// Runs one of the statements above.
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// [`run_in_transaction`], untimed. The transaction is never left open:
/// whatever fails, it is rolled back before this returns.
fn transaction(
    conn: &Connection,
    jobs: &mut [Box<dyn Job>],
    path: &Path,
) -> std::result::Result<(), StoreError> {
    let fail = |what: &str| {
        format!(
            "SQLite store at {}: could not {what} a transaction",
            path.display()
        )
    };
    exec(conn, BEGIN).context(|| fail("begin"))?;
    let out = jobs_then_commit(conn, jobs, &fail);
    // SQLite may have rolled the transaction back already (an I/O error).
    if out.is_err() && !conn.is_autocommit() {
        let _ = exec(conn, ROLLBACK);
    }
    out
}

/// Runs `jobs` in the transaction just begun, each job's writes kept only
/// if it succeeds, and commits (or rolls back a lone job that failed).
///
/// A job alone needs no savepoint: the transaction is its own. Several run
/// first without savepoints, since in the common case every one succeeds;
/// if one fails, its writes are mixed with the others', so the transaction
/// is rolled back and the batch runs again with a savepoint per job (a
/// job may run more than once: see [`Worker::run`]).
fn jobs_then_commit(
    conn: &Connection,
    jobs: &mut [Box<dyn Job>],
    fail: &dyn Fn(&str) -> String,
) -> std::result::Result<(), StoreError> {
    if let [job] = jobs {
        return if job.run(conn) {
            exec(conn, COMMIT).context(|| fail("commit"))
        } else {
            exec(conn, ROLLBACK).context(|| fail("roll back"))
        };
    }
    if jobs.iter_mut().all(|job| job.run(conn)) {
        return exec(conn, COMMIT).context(|| fail("commit"));
    }
    // SQLite may have rolled it back already (an I/O error).
    if !conn.is_autocommit() {
        exec(conn, ROLLBACK).context(|| fail("roll back"))?;
    }
    exec(conn, BEGIN).context(|| fail("begin"))?;
    for job in jobs.iter_mut() {
        exec(conn, SAVEPOINT).context(|| fail("continue"))?;
        if !job.run(conn) {
            // This fails if SQLite has already rolled back the whole
            // transaction.
            exec(conn, ROLLBACK_TO).context(|| fail("continue"))?;
        }
        exec(conn, RELEASE).context(|| fail("continue"))?;
    }
    exec(conn, COMMIT).context(|| fail("commit"))
}

/// The reader's loop: one call at a time, each in its own implicit read
/// transaction. Ends when every handle is dropped.
fn serve_reads(conn: Connection, queue: &mpsc::Receiver<Box<dyn Job>>, _path: &Path) {
    while let Ok(mut job) = queue.recv() {
        job.run(&conn);
        job.reply();
    }
}
