//! Helpers the store test files share (each file is its own crate and
//! includes this module with `mod common;`).

use mcp_tasks_runtime::Error;

/// The message of the store error `r` must be; panics on anything else.
pub(crate) fn store_error<T: std::fmt::Debug>(r: mcp_tasks_runtime::Result<T>) -> String {
    match r {
        Err(Error::Store(e)) => e.to_string(),
        other => panic!("expected a store error, got {other:?}"),
    }
}

/// Whether the store error `err` was caused by an `E`.
pub(crate) fn source_is<E: std::error::Error + 'static>(err: &Error) -> bool {
    let Error::Store(e) = err else {
        return false;
    };
    std::error::Error::source(e).is_some_and(|s| s.is::<E>())
}
