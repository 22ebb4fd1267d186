//! Idempotent starts: a call that carries a key ([`Call::idempotency_key`])
//! creates its task under an id that the key, the tool and the principal
//! decide, so that a repeat of the call, on any instance sharing the store,
//! finds the task instead of starting a second one. The store's uniqueness
//! of ids is the index: there is nothing else to keep, and the key lasts as
//! long as its task is kept.

use sha2::{Digest as _, Sha256};

use super::{Call, Engine};
use crate::{
    error::{Error, Result},
    store::TaskRecord,
};

/// The `_meta` key under which a `tools/call` carries its idempotency key
/// ([`Call::idempotency_key`]), in both protocol eras and over every
/// transport, until the spec names one.
pub const IDEMPOTENCY_KEY: &str = "mcp-tasks/idempotencyKey";

/// The shortest key taken: a key is as good as a task id at finding its
/// task, so it must be as hard to guess.
const MIN_KEY: usize = 16;
/// The longest key taken.
const MAX_KEY: usize = 255;

/// The key a request's `_meta` carries under [`IDEMPOTENCY_KEY`]
/// (`value`), if any.
///
/// # Errors
///
/// [`Error::IdempotencyKey`] when it is not a string.
#[cfg(feature = "server")]
pub(crate) fn key_in_meta(value: Option<&serde_json::Value>) -> Result<Option<String>> {
    match value {
        None => Ok(None),
        Some(serde_json::Value::String(key)) => Ok(Some(key.clone())),
        Some(other) => Err(Error::IdempotencyKey(format!(
            "`_meta[\"{IDEMPOTENCY_KEY}\"]` must be a string, not {other}"
        ))),
    }
}

/// Checks `key`: 16 to 255 visible ASCII characters.
pub(super) fn check(key: &str) -> Result<()> {
    let refuse = |problem: String| Err(Error::IdempotencyKey(problem));
    if !(MIN_KEY..=MAX_KEY).contains(&key.len()) {
        return refuse(format!(
            "the key is {} characters long; it must be {MIN_KEY} to {MAX_KEY} (a random one, \
             such as a UUID, so that no one else can guess it)",
            key.len()
        ));
    }
    if let Some(c) = key.chars().find(|c| !c.is_ascii_graphic()) {
        return refuse(format!(
            "the key holds {c:?}; it must be visible ASCII characters only"
        ));
    }
    Ok(())
}

/// The id of the task that `key` starts for `tool` and `principal`: 128
/// bits of SHA-256 over the three, each length-prefixed, as 32 hex digits
/// (the form of every task id).
pub(super) fn task_id(principal: Option<&str>, tool: &str, key: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(b"mcp-tasks idempotency key v1");
    for part in [principal.unwrap_or(""), tool, key] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    hash.update([u8::from(principal.is_some())]);
    crate::id::hex(&hash.finalize()[..16])
}

impl Engine {
    /// The task a keyed `call` started before, as task `id`: `None` when
    /// there is none; [`Error::IdempotencyKey`] when the task was started
    /// with other arguments (or, by a collision of 128 bits, is another's).
    pub(super) async fn keyed_task(&self, call: &Call, id: &str) -> Result<Option<TaskRecord>> {
        let Some(record) = self.inner.store.get(id).await? else {
            return Ok(None);
        };
        if record.tool != call.tool || record.principal != call.principal {
            return Err(Error::IdempotencyKey(
                "the key belongs to another call; choose another".to_owned(),
            ));
        }
        if record.arguments != call.arguments {
            return Err(Error::IdempotencyKey(format!(
                "the key started task {} of `{}` with other arguments; a repeat must send the \
                 same arguments, and a new call a new key",
                record.id, record.tool
            )));
        }
        Ok(Some(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_tool_and_principal_decide_the_id() {
        let key = "0123456789abcdef";
        let id = task_id(None, "deploy", key);
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(id, task_id(None, "deploy", key));
        assert_ne!(id, task_id(None, "report", key));
        assert_ne!(id, task_id(Some("alice"), "deploy", key));
        assert_ne!(id, task_id(Some(""), "deploy", key));
        assert_ne!(id, task_id(None, "deploy", "0123456789abcdeg"));
        // Length prefixes: moving a character from one part to the next
        // is another call.
        assert_ne!(task_id(Some("ab"), "c", key), task_id(Some("a"), "bc", key));
    }

    #[test]
    fn short_long_and_invisible_keys_are_refused() {
        assert!(check("0123456789abcdef").is_ok());
        assert!(check(&"k".repeat(255)).is_ok());
        for bad in [
            "short",
            &"k".repeat(256),
            "0123456789abcde f",
            "0123456789abcdeé",
        ] {
            let e = check(bad).expect_err(bad).to_string();
            assert!(e.starts_with("invalid idempotency key: "), "{e}");
        }
    }
}
