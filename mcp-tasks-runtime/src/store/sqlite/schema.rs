//! Opening the file: the connections' settings and the schema migrations.
//!
//! The writing connection runs in WAL mode with foreign keys on and a busy
//! timeout; [`Synchronous`](super::Synchronous) picks how hard a commit works
//! to be durable. The schema is created and upgraded by the numbered SQL
//! files in `store/migrations/`. They are applied in order, inside one
//! transaction, and tracked with `PRAGMA user_version`. The reading
//! connection is read-only and opens a file the writer has set up.
//!
//! A store opened read-only ([`connect_read_only`]) has no writer: its one
//! connection migrates nothing, changes no setting and writes no byte of the
//! file or of its `-wal` and `-shm` files, and it refuses a schema it cannot
//! read as it is.

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

/// The newest schema version this build knows.
pub(super) const LATEST: u32 = MIGRATIONS.len() as u32;

/// The oldest schema version the reads of this build work on as it is:
/// 0007 added the last column they read (`tool_version`); 0008 and 0009
/// changed only indexes.
pub(super) const READABLE_FROM: u32 = 7;

/// How many prepared statements each connection keeps.
const STATEMENT_CACHE: usize = 64;

/// What failed with the store at `path`: "could not `what``why`".
fn could_not(path: &Path, what: &str, why: &str) -> String {
    format!("SQLite store at {}: could not {what}{why}", path.display())
}

/// The writing connection: creates the file if needed, sets it up, and
/// brings its schema up to date. Returns it with the schema version the
/// file had (0: a new file).
pub(super) fn connect(config: &SqliteStoreBuilder) -> Result<(Connection, u32)> {
    let path = &config.path;
    let fail = |what: &'static str| move || could_not(path, what, "");
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if config.migrate {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
        create_private(path).context(fail("create the file"))?;
    } else if !path.is_file() {
        return Err(StoreError::new(format!(
            "no SQLite store at {}: there is no such file (opened without migrating, which \
             creates none)",
            path.display()
        ))
        .into());
    }
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
    let found = if config.migrate {
        migrate(&mut conn, path)?
    } else {
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .context(fail("read the schema version"))?;
        current(path, version)?
    };
    Ok((conn, found))
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
    let fail = |what: &'static str| move || could_not(path, what, " for reading");
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
/// Returns the version it found.
fn migrate(conn: &mut Connection, path: &Path) -> Result<u32> {
    let fail = |what: &str| could_not(path, what, "");
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .context(|| fail("lock the schema"))?;
    let version: i64 = tx
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .context(|| fail("read the schema version"))?;
    let latest = MIGRATIONS.len();
    let Some(from) = usize::try_from(version).ok().filter(|v| *v <= latest) else {
        return Err(too_new(path, version).into());
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
    tx.commit().context(|| fail("commit the schema"))?;
    Ok(u32::try_from(from).unwrap_or(u32::MAX))
}

/// A schema newer than this build knows: refused, whether the store would
/// write or only read.
fn too_new(path: &Path, version: i64) -> StoreError {
    StoreError::new(format!(
        "SQLite store at {}: the file has schema version {version}, but this build knows \
         versions up to {LATEST}; open it with the newer build that wrote it",
        path.display()
    ))
}

/// The one connection of a store opened read-only, with the schema version
/// of the file, which it checks this build can read as it is.
///
/// It writes nothing: not the database file, not its `-wal` and `-shm`
/// files, and it creates none of them. A read-only connection alone does
/// not promise that: SQLite creates the `-wal` and `-shm` of a WAL database
/// when they are missing, and the first connection to open a `-shm` that no
/// other process holds truncates and rebuilds it. So the file is opened by
/// a URI, one of two ways, chosen by what lies beside it:
///
/// - **No `-wal`, or an empty one with no `-shm`** (no process has the
///   file open, and the last one closed it cleanly, folding its WAL into
///   the file): `immutable=1`.
///   SQLite then reads the database file alone, takes no lock and creates
///   nothing; there is no WAL whose commits it would miss. Such a
///   connection assumes nothing else writes the file while it reads: a
///   server started on the file during a check may make its reads fail.
/// - **A `-wal` and a `-shm`** (a server has the file open, or one was
///   killed and left its WAL): `mode=ro&readonly_shm=1`. The `-shm` is opened read-only, so
///   this process cannot write it; the WAL's commits are read through it
///   while a server holds it, and without one SQLite reads the WAL into
///   memory of its own (`SQLITE_READONLY_CANTINIT`). The commits still in
///   the `-wal` are seen either way, which `immutable` would miss.
///
/// A `-wal` that holds commits with no `-shm` beside it (which SQLite
/// leaves only when something deleted the `-shm`) cannot be read without
/// writing one: refused.
pub(super) fn connect_read_only(config: &SqliteStoreBuilder) -> Result<(Connection, u32)> {
    let path = &config.path;
    let fail = |what: &'static str| move || could_not(path, what, " to read it");
    let file = match std::fs::canonicalize(path) {
        Ok(file) if file.is_file() => file,
        Ok(_) => {
            return Err(
                StoreError::new(format!("SQLite store at {}: not a file", path.display())).into(),
            );
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(StoreError::new(format!(
                "no SQLite store at {}: there is no such file",
                path.display()
            ))
            .into());
        }
        Err(e) => {
            return Err(StoreError::new(fail("find the file")())
                .with_source(e)
                .into());
        }
    };
    let beside = |suffix: &str| {
        let mut name = file.as_os_str().to_owned();
        name.push(suffix);
        std::path::PathBuf::from(name)
    };
    // A process closing the file removes its `-wal` and `-shm` between the
    // look and the open: then look again (the file is alone by then).
    let mut attempts = 0;
    loop {
        attempts += 1;
        // Without a `-wal` there is no commit to miss (and SQLite would
        // create one for a connection that reads through a `-shm`).
        let wal = std::fs::metadata(beside("-wal")).ok();
        let shared = wal.is_some() && beside("-shm").exists();
        let how = if shared {
            "readonly_shm=1"
        } else if wal.is_none_or(|wal| wal.len() == 0) {
            "immutable=1"
        } else {
            return Err(StoreError::new(format!(
                "SQLite store at {}: its -wal file holds commits but there is no -shm file \
                 beside it, and reading them would write one: open it writable once (start a \
                 server of this build on it) to recover it",
                path.display()
            ))
            .into());
        };
        let uri = format!("file:{}?mode=ro&{how}", uri_path(&file));
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let opened = Connection::open_with_flags(&uri, flags)
            .context(fail("open the file"))
            .and_then(|conn| {
                conn.busy_timeout(config.busy_timeout)
                    .context(fail("set the busy timeout"))?;
                let version: i64 = conn
                    .pragma_query_value(None, "user_version", |row| row.get(0))
                    .context(fail("read the schema version"))?;
                Ok((conn, version))
            });
        match opened {
            Ok((conn, version)) => {
                conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
                return Ok((conn, readable(path, version)?));
            }
            Err(_)
                if shared
                    && attempts < 3
                    && !(beside("-wal").exists() && beside("-shm").exists()) =>
            {
                continue;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// For a store opened to write without migrating: checks that the file has
/// this build's schema `version`.
fn current(path: &Path, version: i64) -> Result<u32, StoreError> {
    let shown = path.display();
    match u32::try_from(version) {
        Ok(LATEST) => Ok(LATEST),
        Ok(v) if v < LATEST => Err(StoreError::new(format!(
            "SQLite store at {shown}: the file has schema version {v}, older than this build's \
             ({LATEST}), and it was opened to write without migrating: migrate it first with \
             this build (`tasks --store {shown} migrate`, or start a server of this build on \
             it); builds older than this one then refuse it"
        ))),
        _ => Err(too_new(path, version)),
    }
}

/// Checks that this build reads a file of schema `version` as it is.
fn readable(path: &Path, version: i64) -> Result<u32, StoreError> {
    let shown = path.display();
    match u32::try_from(version) {
        Ok(v) if (READABLE_FROM..=LATEST).contains(&v) => Ok(v),
        Ok(0) => Err(StoreError::new(format!(
            "SQLite store at {shown}: the file holds no tasks schema (version 0; this build's \
             is {LATEST}): nothing to read"
        ))),
        Ok(v) if v < READABLE_FROM => Err(StoreError::new(format!(
            "SQLite store at {shown}: the file has schema version {v}, and this build (schema \
             version {LATEST}) reads versions {READABLE_FROM} to {LATEST} without migrating: \
             migrate it first with this build (`tasks --store {shown} migrate`, or start a \
             server of this build on it); builds older than this one then refuse it"
        ))),
        _ => Err(too_new(path, version)),
    }
}

/// `path` as the path of a `file:` URI: absolute, every byte outside
/// `[A-Za-z0-9/._~-]` percent-encoded (so that `?`, `#` and `%` in a name
/// stay part of it).
fn uri_path(path: &Path) -> String {
    #[cfg(unix)]
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()).to_vec();
    #[cfg(not(unix))]
    let bytes = {
        // `C:\dir\tasks.db` is `/C:/dir/tasks.db` in a URI.
        let text = path.to_string_lossy().replace('\\', "/");
        let text = text.trim_start_matches("//?/").to_owned();
        if text.starts_with('/') {
            text
        } else {
            format!("/{text}")
        }
        .into_bytes()
    };
    let mut out = String::with_capacity(bytes.len());
    for b in bytes {
        if b.is_ascii_alphanumeric() || b"/._~-".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
