//! What callers and tools may ask of the engine: sizes, a caller's
//! unfinished tasks, and how fast a caller may create them. A caller is
//! its principal, or without one its client address ([`Quota`]).

mod quota;

use serde::Serialize;
use serde_json::Value;

pub(super) use self::quota::{AddressTasks, CreateRate, Quota, UnfinishedCounts};
#[cfg(feature = "server")]
pub(crate) use self::quota::{LOOPBACK_FACTOR, address_key};
use crate::{
    error::{Error, RpcError},
    tool::JsonObject,
};

/// The engine's limits, each with its default. Set them with
/// [`EngineBuilder::limits`](crate::engine::EngineBuilder::limits); every refusal
/// names the limit it hit, and nothing already stored is changed by one.
///
/// ```
/// use mcp_tasks_runtime::engine::Limits;
///
/// let mut limits = Limits::default();
/// limits.max_unfinished_per_principal = 100;
/// limits.creates_per_second = 5.0;
/// assert_eq!(limits.max_argument_bytes, 1024 * 1024);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Limits {
    /// Largest `arguments` of a call, as JSON (default 1 MiB): refused with
    /// `-32602`, before anything runs or is stored.
    pub max_argument_bytes: usize,
    /// Largest set of answers (`tasks/update` `inputResponses`, or an MRTR
    /// retry's), as JSON (default 1 MiB): refused with `-32602`; the task
    /// keeps waiting for a valid answer.
    pub max_answer_bytes: usize,
    /// Longest `statusMessage` (default 4 KiB): a longer one is cut at this
    /// many bytes (on a character boundary) and ends with `…`; a warning
    /// naming the limit is logged.
    pub max_status_message_bytes: usize,
    /// Largest result of a tool, as JSON (default 4 MiB): a larger one fails
    /// the task (or the inline call) with `-32603` naming the limit.
    pub max_result_bytes: usize,
    /// Largest value of one journaled step (a checkpoint's value, an
    /// answer), as JSON (default 1 MiB): a larger one fails the task with
    /// `-32603` naming the step and the limit.
    pub max_journal_entry_bytes: usize,
    /// Most entries one task's journal may hold (default 100 000): the step
    /// that would be one more fails the task with `-32603` before its work
    /// starts, naming the step and the limit (`data.limit =
    /// "max_journal_entries"`). Every step counts: a checkpoint, a question,
    /// a durable sleep, a `select`, a `spawn`ed step, a `patched` marker.
    ///
    /// Why a cap: a run that resumes (after a question, a sleep, a restart
    /// or a takeover) reads its whole journal and replays it from the first
    /// entry, so resuming costs time in proportion to its length. Measured
    /// on one machine (`BENCHMARKS.md`, "Resume time against journal
    /// length"): about 0.7 µs an entry on SQLite and 1.3 µs on Postgres,
    /// 67 ms and 127 ms at the default cap. A fn that loops over more items
    /// than that should split them into several tasks, or checkpoint batches
    /// of items instead of one item a step; raise the cap only knowing each
    /// resume pays for it.
    /// Entries already in a journal replay whatever the cap: lowering it
    /// stops a longer task only at its next new step.
    pub max_journal_entries: usize,
    /// Most unfinished (`working` or `input_required`) tasks one principal
    /// may have (default 10 000): a call that would create one more is
    /// refused with `-32603`, `data.limit = "max_unfinished_per_principal"`.
    /// The store counts them at most once a second while a principal is
    /// well under the cap (this instance adds its own creates in between),
    /// and again whenever the cap is reached, so creates by other instances
    /// of a fleet are seen within a second.
    ///
    /// Calls without a principal that carry no client address either (over
    /// stdio, where there is one client, or an embedder's [`Call`] without
    /// [`Call::client_addr`]) count together, as one principal. Calls
    /// without a principal but with an address count per address, under
    /// [`Limits::max_unfinished_per_address`].
    ///
    /// [`Call`]: crate::engine::Call
    /// [`Call::client_addr`]: crate::engine::Call::client_addr
    pub max_unfinished_per_principal: usize,
    /// Most unfinished tasks that calls without a principal may have from
    /// one client address on this instance (default 10 000): one more is
    /// refused with `-32603`, `data.limit = "max_unfinished_per_address"`.
    /// This way one anonymous client cannot lock out another, unless they
    /// share an address. An IPv6 address counts by its /64 prefix (what one
    /// host is usually given, and can pick addresses from); an IPv4 address
    /// (or an IPv4-mapped IPv6 one) counts alone. Over HTTP every loopback
    /// address counts as one (`127.0.0.1`: any local process can pick
    /// another 127.x address), unless
    /// `HttpOptions::loopback_addresses_apart` is set: the same address key
    /// as the HTTP transport's per-client limits.
    ///
    /// The tasks are those created here from that address, kept in memory:
    /// while an address is under the cap nothing is read; when it reaches
    /// the cap, the store is asked which of its tasks are still unfinished
    /// (one query), so tasks that ended anywhere give their place back.
    /// After a restart, or on another instance of a fleet, an address starts
    /// from none; creates under way at the moment of that query may pass
    /// the cap by as many. Behind a proxy every client has the proxy's
    /// address: give callers a principal there (a principal function, or
    /// authentication), and the per-principal limits apply instead.
    pub max_unfinished_per_address: usize,
    /// How many task-capable calls per second one caller may make, on
    /// average, on this instance (default 1000): a token bucket per
    /// principal, or, for calls without one, per client address (an IPv6
    /// address by its /64, as [`Limits::max_unfinished_per_address`]
    /// counts), or, with neither (stdio, an embedder's call with no
    /// address), one bucket for them all. Refilled at this rate and holding
    /// [`Limits::create_burst`]; `f64::INFINITY` turns the limit off.
    /// A call beyond it is refused with `-32603`,
    /// `data.limit = "creates_per_second"` and `data.retryAfterMs`.
    pub creates_per_second: f64,
    /// How many task-capable calls one caller (as
    /// [`Limits::creates_per_second`] tells them apart) may make at once
    /// before [`Limits::creates_per_second`] applies (default 2000).
    pub create_burst: u32,
    /// How many `subscriptions/listen` streams one principal may hold open
    /// on this instance (default 64). Each holds a connection: without a
    /// cap, one caller could take every connection the server serves. One
    /// more is refused with `-32603`,
    /// `data.limit = "max_listens_per_principal"`. Listens without a
    /// principal are counted per task instead
    /// ([`Limits::max_listens_per_task`]), and those that follow the tool
    /// list (`toolsListChanged`) also per client address, at this limit
    /// (loopback addresses as one, unless counted apart; stdio's one
    /// client in one count).
    pub max_listens_per_principal: usize,
    /// How many open `subscriptions/listen` streams without a principal may
    /// follow one task on this instance (default 64): a listen that would
    /// make one task's count pass it is refused with `-32603`,
    /// `data.limit = "max_listens_per_task"`, naming the task.
    ///
    /// Why per task: callers without a principal cannot be told apart
    /// (several share an address on loopback, or behind a proxy), but a
    /// stranger can only follow a task whose id it knows (ids carry 128
    /// random bits, and unknown ids are left out of a listen, uncounted). So
    /// a client holding many listens takes places only on its own tasks, and
    /// never locks another client out of its tasks.
    ///
    /// A listen naming several tasks counts once on each of them, and is
    /// refused when any one is full. What bounds one client in total: every
    /// stream holds a connection, and connections are capped by
    /// `HttpOptions::max_connections` (a listen naming no known task, and
    /// not following the tool list, ends at once); each listen names at most `MAX_LISTEN_IDS` (1024) tasks,
    /// so an instance follows at most `max_connections × 1024` tasks for
    /// listeners, whoever holds them.
    pub max_listens_per_task: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_argument_bytes: 1024 * 1024,
            max_answer_bytes: 1024 * 1024,
            max_status_message_bytes: 4 * 1024,
            max_result_bytes: 4 * 1024 * 1024,
            max_journal_entry_bytes: 1024 * 1024,
            max_journal_entries: 100_000,
            max_unfinished_per_principal: 10_000,
            max_unfinished_per_address: 10_000,
            creates_per_second: 1000.0,
            create_burst: 2000,
            max_listens_per_principal: 64,
            max_listens_per_task: 64,
        }
    }
}

impl Limits {
    /// Refuses answers (`inputResponses`, of `tasks/update` or of an MRTR
    /// retry) over [`Limits::max_answer_bytes`].
    pub(crate) fn check_answers(&self, answers: &impl Serialize) -> Result<(), Error> {
        check_size(
            "max_answer_bytes",
            "the answers (inputResponses)",
            json_len(answers),
            self.max_answer_bytes,
        )
    }
}

/// The size of `value` as JSON.
pub(super) fn json_len(value: &impl Serialize) -> usize {
    /// Counts the bytes written to it, and keeps none.
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).map_or(usize::MAX, |()| count.0)
}

/// Refuses a value of `actual` bytes over `max`, naming `limit` and `what`.
pub(super) fn check_size(
    limit: &'static str,
    what: &str,
    actual: usize,
    max: usize,
) -> Result<(), Error> {
    if actual <= max {
        return Ok(());
    }
    Err(Error::LimitExceeded {
        limit,
        message: format!("{what}: {actual} bytes, over the limit of {max} bytes ({limit})"),
        retry_after_ms: None,
    })
}

/// The same refusal as a task's (or an inline call's) JSON-RPC error.
pub(super) fn size_error(limit: &'static str, what: &str, actual: usize, max: usize) -> RpcError {
    RpcError::internal(format!(
        "{what}: {actual} bytes, over the limit of {max} bytes ({limit})"
    ))
    .with_data(serde_json::json!({"limit": limit, "max": max, "actual": actual}))
}

/// The first argument a closed input schema (`additionalProperties:
/// false`) does not list. Schemas that allow more (no
/// `additionalProperties`, `true`, or a schema) accept every key.
pub(super) fn unknown_argument<'a>(schema: &JsonObject, args: &'a JsonObject) -> Option<&'a str> {
    if schema.get("additionalProperties") != Some(&Value::Bool(false)) {
        return None;
    }
    let known = schema.get("properties").and_then(Value::as_object);
    args.keys()
        .find(|k| !known.is_some_and(|p| p.contains_key(*k)))
        .map(String::as_str)
}

/// `message` cut to at most `max` bytes on a character boundary, ending
/// with `…` when cut.
pub(super) fn cap_status(message: String, max: usize) -> String {
    if message.len() <= max {
        return message;
    }
    let ellipsis = '…'.len_utf8();
    let mut end = max.saturating_sub(ellipsis);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    tracing::warn!(
        bytes = message.len(),
        max,
        "statusMessage cut to max_status_message_bytes"
    );
    let mut cut = message[..end].to_owned();
    if max >= ellipsis {
        cut.push('…');
    }
    cut
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn closed_schemas_name_the_first_unknown_key() {
        let closed =
            json!({"type": "object", "properties": {"a": {}}, "additionalProperties": false});
        let open = json!({"type": "object", "properties": {"a": {}}});
        let args = json!({"a": 1, "junk": 2});
        let (closed, open, args) = (
            closed.as_object().unwrap(),
            open.as_object().unwrap(),
            args.as_object().unwrap(),
        );
        assert_eq!(unknown_argument(closed, args), Some("junk"));
        assert_eq!(unknown_argument(open, args), None);
    }

    #[test]
    fn status_messages_are_cut_on_a_character_boundary() {
        assert_eq!(cap_status("short".into(), 10), "short");
        let cut = cap_status("ééééé".into(), 6);
        assert!(cut.len() <= 6 && cut.ends_with('…'), "{cut}");
    }
}
