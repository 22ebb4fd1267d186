//! Opening the file: the connections' settings and the schema migrations.
//!
//! The writing connection runs in WAL mode with foreign keys on and a busy
//! timeout; [`Synchronous`](super::Synchronous) picks how hard a commit works
//! to be durable. The schema is created and upgraded by the numbered SQL
//! files in `store/migrations/`. They are applied in order, inside one
//! transaction, and tracked with `PRAGMA user_version`. The reading
//! connection is read-only and opens a file the writer has set up.

use std::path::Path;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::SqliteStoreBuilder;
use crate::{
    error::Result,
    store::{StoreError, error::Context},
};

/// The schema, one step per file, in order. Step `n` (from 1) takes the
/// file from `user_version = n - 1` to `user_version = n`.
const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_tasks_and_journal.sql",
        include_str!("../migrations/0001_tasks_and_journal.sql"),
    ),
    (
        "0002_task_version.sql",
        include_str!("../migrations/0002_task_version.sql"),
    ),
    (
        "0003_list_and_sessions.sql",
        include_str!("../migrations/0003_list_and_sessions.sql"),
    ),
    (
        "0004_leases.sql",
        include_str!("../migrations/0004_leases.sql"),
    ),
    (
        "0005_question_deadlines.sql",
        include_str!("../migrations/0005_question_deadlines.sql"),
    ),
    (
        "0006_spent_states.sql",
        include_str!("../migrations/0006_spent_states.sql"),
    ),
    (
        "0007_tool_version.sql",
        include_str!("../migrations/0007_tool_version.sql"),
    ),
    (
        "0008_one_unfinished_index.sql",
        include_str!("../migrations/0008_one_unfinished_index.sql"),
    ),
    (
        "0009_claimable_by_due_time.sql",
        include_str!("../migrations/0009_claimable_by_due_time.sql"),
    ),
];

/// How many prepared statements each connection keeps.
const STATEMENT_CACHE: usize = 64;

/// The writing connection: creates the file if needed, sets it up, and
/// brings its schema up to date.
pub(super) fn connect(config: &SqliteStoreBuilder) -> Result<Connection> {
    let path = &config.path;
    let fail = |what: &'static str| {
        move || format!("SQLite store at {}: could not {what}", path.display())
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    create_private(path).context(fail("create the file"))?;
    let mut conn = Connection::open_with_flags(path, flags).context(fail("open the file"))?;
    conn.busy_timeout(config.busy_timeout)
        .context(fail("set the busy timeout"))?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .context(fail("switch to WAL mode"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::new(format!(
            "SQLite store at {}: could not switch to WAL mode: the journal mode stays {mode:?}",
            path.display()
        ))
        .into());
    }
    conn.pragma_update(None, "synchronous", config.synchronous.pragma())
        .context(fail("set `synchronous`"))?;
    conn.pragma_update(None, "foreign_keys", true)
        .context(fail("turn on foreign keys"))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    migrate(&mut conn, path)?;
    Ok(conn)
}

/// Creates the database file, empty and readable by its owner only (0600,
/// whatever the umask), when there is none: the tasks' arguments, answers
/// and results are in it. SQLite creates the `-wal` and `-shm` files with
/// the database file's mode, so they are 0600 too. An existing file is left
/// as it is, mode included: an operator who widened it meant to.
#[cfg(unix)]
fn create_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    if path.as_os_str() == ":memory:" || path.as_os_str().is_empty() {
        return Ok(());
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        // The umask may have taken bits away, never added any; set them
        // exactly anyway.
        Ok(file) => file.set_permissions(std::fs::Permissions::from_mode(0o600)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Elsewhere, the file is created by SQLite, with the platform's defaults.
#[cfg(not(unix))]
fn create_private(_: &Path) -> std::io::Result<()> {
    Ok(())
}

/// The read connection: read-only, on a file the writer has set up.
pub(super) fn connect_reader(config: &SqliteStoreBuilder) -> Result<Connection> {
    let path = &config.path;
    let fail = |what: &'static str| {
        move || {
            format!(
                "SQLite store at {}: could not {what} for reading",
                path.display()
            )
        }
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).context(fail("open the file"))?;
    conn.busy_timeout(config.busy_timeout)
        .context(fail("set the busy timeout"))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

/// Opens a read-only connection for point lookups made in place on an async
/// thread: it never waits for a lock (busy timeout zero), so a read that
/// would wait fails at once and is sent to the reader thread instead.
pub(super) fn connect_lookup(config: &SqliteStoreBuilder) -> Result<Connection> {
    let conn = connect_reader(config)?;
    conn.busy_timeout(std::time::Duration::ZERO).context(|| {
        format!(
            "SQLite store at {}: could not set the busy timeout for lookups",
            config.path.display()
        )
    })?;
    Ok(conn)
}

/// Applies the migrations the file has not seen yet, all in one transaction.
fn migrate(conn: &mut Connection, path: &Path) -> Result<()> {
    let fail = |what: &str| format!("SQLite store at {}: could not {what}", path.display());
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .context(|| fail("lock the schema"))?;
    let version: i64 = tx
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .context(|| fail("read the schema version"))?;
    let latest = MIGRATIONS.len();
    let Some(from) = usize::try_from(version).ok().filter(|v| *v <= latest) else {
        return Err(StoreError::new(format!(
            "SQLite store at {}: the file has schema version {version}, but this build knows \
             versions up to {latest}; open it with the newer build that wrote it",
            path.display()
        ))
        .into());
    };
    for (name, sql) in &MIGRATIONS[from..] {
        tx.execute_batch(sql)
            .context(|| fail(&format!("apply migration {name}")))?;
    }
    if from < latest {
        tx.pragma_update(None, "user_version", latest as i64)
            .context(|| fail("record the schema version"))?;
        tracing::info!(store = %path.display(), from, to = latest, "SQLite schema migrated");
    }
    Ok(tx.commit().context(|| fail("commit the schema"))?)
}
