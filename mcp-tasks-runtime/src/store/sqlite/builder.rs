//! Opening a [`SqliteStore`]: its options and how durable a commit is.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use super::{LOOKUP_CONNECTIONS, SchemaVersions, SqliteStore, schema, worker, worker::Worker};
use crate::error::Result;

const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);
const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(100);
/// The shortest [`SqliteStoreBuilder::poll_interval`].
const MIN_POLL_INTERVAL: Duration = Duration::from_millis(1);
/// How many announcements wait for a slow receiver of the feed.
const FEED_CAPACITY: usize = 64;

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
    pub(super) fn pragma(self) -> &'static str {
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
    pub(super) path: PathBuf,
    pub(super) synchronous: Synchronous,
    pub(super) busy_timeout: Duration,
    pub(super) poll_interval: Duration,
    /// How long a batch of deferrable writes alone waits for company.
    pub(super) linger: Duration,
    /// Whether [`open`](Self::open) creates and migrates the file.
    pub(super) migrate: bool,
}

impl SqliteStoreBuilder {
    /// The defaults, for the store at `path`.
    pub(super) fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            synchronous: Synchronous::default(),
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            poll_interval: DEFAULT_POLL_INTERVAL,
            linger: worker::LINGER,
            migrate: true,
        }
    }

    builder_setters! {
        /// How durable a commit is. Defaults to [`Synchronous::Full`].
        pub fn synchronous(Synchronous) => synchronous;

        /// How long to wait for another connection's lock on the file before
        /// failing with "database is locked". Defaults to 5 seconds.
        pub fn busy_timeout(Duration) => busy_timeout;

        /// How often, at most, the store checks whether another process
        /// sharing the file has committed a change (one `PRAGMA
        /// data_version` on the writing connection, between its batches).
        /// When one has, the store's feed
        /// ([`Store::changes`](super::Store::changes)) says so, and the
        /// engine looks again at the tasks it follows: a listener here hears
        /// of a task that runs, is answered or expires in the other process,
        /// and a task released there is claimed here without waiting for the
        /// next scan. Defaults to 100 ms; at least 1 ms. A process alone on
        /// its file reads the version and hears nothing more.
        pub fn poll_interval(Duration) => poll_interval, at least MIN_POLL_INTERVAL;

        /// Whether [`open`](Self::open) creates a missing file and brings an
        /// older schema up to this build's (the default, `true`, as a server's
        /// start does). With `false`, `open` writes only to an existing file of
        /// this build's schema version, and refuses any other, naming both
        /// versions: for a program that must not upgrade a store under the
        /// servers of an older build (an operator's one-off write), leaving the
        /// migration to an explicit step.
        ///
        /// ```
        /// use mcp_tasks_runtime::store::SqliteStore;
        ///
        /// # #[tokio::main(flavor = "current_thread")]
        /// # async fn main() -> mcp_tasks_runtime::Result<()> {
        /// let dir = tempfile::tempdir().expect("a temporary directory");
        /// let path = dir.path().join("tasks.db");
        /// let current = SqliteStore::builder(&path).migrate(false);
        /// assert!(current.clone().open().await.is_err(), "no file: not created");
        /// drop(SqliteStore::open(&path).await?); // created and migrated
        /// let store = current.open().await?;
        /// assert_eq!(store.schema_versions().found, store.schema_versions().latest);
        /// # Ok(())
        /// # }
        /// ```
        pub fn migrate(bool) => migrate;

        /// How long a batch of deferrable writes alone waits for another job
        /// (tests stretch it to observe the sharing).
        #[cfg(test)]
        pub(crate) fn linger(Duration) => linger;
    }

    /// Opens or creates the database file, brings its schema up to date, and
    /// starts the thread that owns it (without [`migrate`](Self::migrate):
    /// opens an existing file of this build's schema only).
    ///
    /// The blocking work runs on that thread, so awaiting this does not
    /// block the async runtime. The parent directory must already exist.
    ///
    /// On Unix a new file is created readable and writable by its owner
    /// only (mode 0600, whatever the umask), and SQLite gives its `-wal`
    /// and `-shm` files the same mode: the tasks' arguments, answers and
    /// results are in them. An existing file keeps the mode it has (an
    /// operator who changed it meant to).
    ///
    /// # Errors
    ///
    /// [`Error::Store`](crate::Error::Store), naming the path, if the file
    /// cannot be opened or switched to WAL mode, or if its schema is newer
    /// than this build knows (or, without [`migrate`](Self::migrate), if
    /// there is no file or its schema is older).
    pub async fn open(self) -> Result<SqliteStore> {
        let (feed, _) = tokio::sync::broadcast::channel(FEED_CAPACITY);
        let (writer, found) = Worker::writer(&self, feed.clone()).await?;
        // The writer has created and migrated the file; now the reader.
        let reader = Worker::reader(&self).await?;
        let lookups = (0..LOOKUP_CONNECTIONS)
            .map(|_| schema::connect_lookup(&self).map(std::sync::Mutex::new))
            .collect::<Result<Vec<_>>>()?;
        Ok(SqliteStore {
            writer: Some(writer),
            reader,
            lookups,
            feed,
            versions: SchemaVersions::migrated(found, schema::LATEST),
            path: self.path,
        })
    }

    /// Opens an existing file to read it only: it migrates nothing, sets no
    /// pragma that writes (the journal mode stays as it is), and writes no
    /// byte of the file or of its `-wal` and `-shm` files, nor creates them.
    /// It can run beside servers that have the file open, of this build or
    /// an older one, and a server of the build that wrote the file still
    /// starts on it afterwards. For the checks and views that must leave a
    /// store as they found it: the replay check before a deploy, an
    /// operator listing tasks.
    ///
    /// A file of an older schema is read as it is when this build's reads
    /// work on it ([`SqliteStore::schema_versions`] says which it is), and
    /// refused otherwise, the message naming both versions and how to
    /// migrate. Every write ([`Store::create`](super::Store::create), [`Store::transition`](super::Store::transition), …)
    /// fails with an error saying the store is read-only, and the store has
    /// no feed ([`Store::changes`](super::Store::changes) is `None`).
    ///
    /// When no process has the file open (no `-wal` beside it),
    /// it is read as immutable: SQLite takes no lock and sees no later
    /// change, so a writer that starts on the file while it is open may
    /// make its reads fail. When a `-shm` is there, the `-shm` is read
    /// without being written, and the commits in the `-wal` are seen.
    ///
    /// # Errors
    ///
    /// [`Error::Store`](crate::Error::Store), naming the path, if there is
    /// no such file, it cannot be read, or its schema is newer than this
    /// build knows, or older than it reads as it is.
    pub async fn open_read_only(self) -> Result<SqliteStore> {
        let (feed, _) = tokio::sync::broadcast::channel(1);
        let (reader, found) = Worker::read_only(&self).await?;
        Ok(SqliteStore {
            writer: None,
            reader,
            lookups: Vec::new(),
            feed,
            versions: SchemaVersions::read_only(found, schema::LATEST),
            path: self.path,
        })
    }
}
