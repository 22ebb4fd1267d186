//! [`StoreError`]: what a store was doing when it failed, and why.

use std::{error::Error as StdError, fmt, sync::Arc};

/// A store failed: what it was doing (naming the task or the file where it
/// knows them), and the underlying error, when there is one.
///
/// Carried by [`Error::Store`](crate::Error::Store). The underlying error (a
/// `rusqlite::Error`, a `serde_json::Error`, an `io::Error`, …) is the
/// error's [`source`](StdError::source), so code can inspect it. The message
/// also ends with it (`could not read task t1: disk I/O error`), because
/// store errors are mostly read as one line: in a log, or as the message of
/// the task they failed.
///
/// A store of your own builds its errors the same way:
///
/// ```
/// use std::error::Error as _;
///
/// use mcp_tasks_runtime::{Error, store::StoreError};
///
/// let io = std::io::Error::other("disk full");
/// let err = Error::from(StoreError::new("could not write task t1").with_source(io));
/// assert_eq!(err.to_string(), "store error: could not write task t1: disk full");
///
/// let Error::Store(store) = &err else { unreachable!() };
/// let io = store.source().and_then(|e| e.downcast_ref::<std::io::Error>());
/// assert_eq!(io.map(ToString::to_string).as_deref(), Some("disk full"));
///
/// // Without an underlying error, the message is the context alone.
/// assert_eq!(
///     StoreError::new("could not create task t1: it already exists").to_string(),
///     "could not create task t1: it already exists",
/// );
/// ```
// Display and Error are written by hand rather than derived with thiserror:
// the source is shared (`Arc`), and `source()` must hand out the error inside
// the `Arc` (so callers can downcast it), not the `Arc` itself.
#[derive(Debug, Clone)]
pub struct StoreError {
    context: String,
    /// The stored data itself cannot be read (as opposed to the store
    /// failing to answer).
    unreadable: bool,
    /// Shared, so that one failed transaction can fail every call in it.
    source: Option<Arc<dyn StdError + Send + Sync + 'static>>,
}

impl StoreError {
    /// An error saying what was being done, e.g. `could not read task t1`.
    pub fn new(context: impl Into<String>) -> Self {
        Self {
            context: context.into(),
            unreadable: false,
            source: None,
        }
    }

    /// Attaches the underlying error: it becomes the
    /// [`source`](StdError::source), and its message ends this one.
    #[must_use]
    pub fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }
}

impl StoreError {
    /// Marks the error as one about stored data that cannot be read back
    /// (a row a store cannot decode), not about the store being
    /// unavailable.
    #[must_use]
    pub fn unreadable(mut self) -> Self {
        self.unreadable = true;
        self
    }

    /// Whether the stored data itself cannot be read back: retrying will
    /// not help, and the engine sets such a task aside (it fails it with
    /// the reason) instead of running it.
    pub fn is_unreadable(&self) -> bool {
        self.unreadable
    }

    /// Whether the store could not be reached: its connection was lost or
    /// refused, or the database was shutting down, starting up or failing
    /// over. Nothing is wrong with the call: the same call may succeed in a
    /// moment. (A write that failed so may still have committed, its answer
    /// lost with the connection.) The front door answers such an error
    /// with a JSON-RPC error that says to call again.
    ///
    /// ```
    /// use mcp_tasks_runtime::store::StoreError;
    ///
    /// let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    /// assert!(StoreError::new("could not read task t1").with_source(refused).is_unavailable());
    /// assert!(!StoreError::new("could not create task t1: it already exists").is_unavailable());
    /// ```
    pub fn is_unavailable(&self) -> bool {
        let mut next = self.source();
        while let Some(e) = next {
            if unavailable(e) {
                return true;
            }
            next = e.source();
        }
        false
    }
}

/// Whether `e`, one error of a store error's chain, says the database
/// could not be reached.
fn unavailable(e: &(dyn StdError + 'static)) -> bool {
    if e.is::<std::io::Error>() {
        return true;
    }
    #[cfg(feature = "postgres")]
    {
        if e.is::<deadpool_postgres::PoolError>() {
            return true;
        }
        if let Some(e) = e.downcast_ref::<tokio_postgres::Error>() {
            // Class 08: connection exceptions; 57P01-03: the server is
            // shutting down, crashed, or not yet accepting connections.
            // A connect that timed out says so in its text alone.
            return e.is_closed()
                || e.to_string() == "timeout waiting for server"
                || e.code().is_some_and(|c| {
                    let c = c.code();
                    c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03")
                });
        }
    }
    false
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.context)?;
        match &self.source {
            Some(source) => write!(f, ": {source}"),
            None => Ok(()),
        }
    }
}

impl StdError for StoreError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        let source: &(dyn StdError + 'static) = self.source.as_deref()?;
        Some(source)
    }
}

/// Adds what was being done to a failed result: the one way store code
/// turns an underlying error into a [`StoreError`]. (Only the SQL stores
/// have underlying errors; the memory store never fails that way.)
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) trait Context<T> {
    /// `Err(e)` becomes `StoreError::new(context()).with_source(e)`.
    fn context<C: Into<String>>(self, context: impl FnOnce() -> C) -> Result<T, StoreError>;
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl<T, E: StdError + Send + Sync + 'static> Context<T> for Result<T, E> {
    fn context<C: Into<String>>(self, context: impl FnOnce() -> C) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::new(context()).with_source(e))
    }
}
