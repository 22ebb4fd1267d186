//! What callers and tools may ask of the engine: sizes, a principal's
//! unfinished tasks, and how fast a principal may create them.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
};

use serde::Serialize;
use serde_json::Value;

use crate::{
    error::{Error, RpcError},
    tool::JsonObject,
};

/// The engine's limits, each with its default. Set them with
/// [`EngineBuilder::limits`](crate::EngineBuilder::limits); every refusal
/// names the limit it hit, and nothing already stored is changed by one.
///
/// ```
/// use mcp_tasks_runtime::Limits;
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
    /// Most unfinished (`working` or `input_required`) tasks one principal
    /// may have (default 10 000; tasks created without a principal count
    /// together): a call that would create one more is refused with
    /// `-32603`, `data.limit = "max_unfinished_per_principal"`. The store
    /// counts them at most once a second while a principal is well under
    /// the cap (this instance adds its own creates in between), and again
    /// whenever the cap is reached, so creates by other instances of a
    /// fleet are seen within a second.
    pub max_unfinished_per_principal: usize,
    /// How many task-capable calls per second one principal may make, on
    /// average, on this instance (default 1000): a token bucket per
    /// principal, refilled at this rate and holding [`Limits::create_burst`];
    /// `f64::INFINITY` turns the limit off.
    /// A call beyond it is refused with `-32603`,
    /// `data.limit = "creates_per_second"` and `data.retryAfterMs`.
    pub creates_per_second: f64,
    /// How many task-capable calls one principal may make at once before
    /// [`Limits::creates_per_second`] applies (default 2000).
    pub create_burst: u32,
    /// How many `subscriptions/listen` streams one principal may hold open
    /// on this instance (default 64; listens without a principal count
    /// together). Each holds a connection: without a cap, one caller could
    /// take every connection the server serves. One more is refused with
    /// `-32603`, `data.limit = "max_listens_per_principal"`.
    pub max_listens_per_principal: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_argument_bytes: 1024 * 1024,
            max_answer_bytes: 1024 * 1024,
            max_status_message_bytes: 4 * 1024,
            max_result_bytes: 4 * 1024 * 1024,
            max_journal_entry_bytes: 1024 * 1024,
            max_unfinished_per_principal: 10_000,
            creates_per_second: 1000.0,
            create_burst: 2000,
            max_listens_per_principal: 64,
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

/// A token bucket per principal: how fast each may create tasks here.
#[derive(Debug, Default)]
pub(super) struct CreateRate {
    buckets: Mutex<HashMap<Option<String>, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at_ms: i64,
}

/// Beyond this many principals, buckets that have filled up again are
/// forgotten (a full bucket is the same as none).
const KEEP_BUCKETS: usize = 10_000;

impl CreateRate {
    /// Takes a token for `principal` at `now_ms`; when there is none, how
    /// long until there is.
    pub(super) fn take(
        &self,
        principal: Option<&str>,
        now_ms: i64,
        rate: f64,
        burst: u32,
    ) -> Result<(), u64> {
        if rate == f64::INFINITY {
            return Ok(());
        }
        let burst = f64::from(burst.max(1));
        let rate = if rate.is_finite() && rate > 0.0 {
            rate
        } else {
            f64::MIN_POSITIVE
        };
        let refill = |b: &Bucket| {
            let elapsed = (now_ms.saturating_sub(b.at_ms)).max(0) as f64 / 1000.0;
            (b.tokens + elapsed * rate).min(burst)
        };
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if buckets.len() > KEEP_BUCKETS {
            buckets.retain(|_, b| refill(b) < burst);
        }
        let bucket = buckets
            .entry(principal.map(str::to_owned))
            .or_insert(Bucket {
                tokens: burst,
                at_ms: now_ms,
            });
        let tokens = refill(bucket);
        if tokens >= 1.0 {
            *bucket = Bucket {
                tokens: tokens - 1.0,
                at_ms: now_ms,
            };
            Ok(())
        } else {
            let wait_ms = ((1.0 - tokens) / rate * 1000.0).ceil();
            Err(if wait_ms.is_finite() && wait_ms < u64::MAX as f64 {
                wait_ms as u64
            } else {
                u64::MAX
            })
        }
    }
}

/// How long a principal's unfinished count read from the store is trusted
/// (with this instance's creates since added to it) before it is read again.
pub(super) const RECOUNT_MS: i64 = 1_000;

/// Each principal's unfinished tasks as last counted in the store, so that
/// a create far below [`Limits::max_unfinished_per_principal`] does not
/// count them again: the count is an index range scan, which grows with the
/// tasks held.
///
/// The estimate is the stored count plus the creates made here since: an
/// upper bound on this instance (tasks only leave the count by finishing),
/// so the cap is never passed because of it here. Creates made by other
/// instances are seen at the next count, at most [`RECOUNT_MS`] later; the
/// count is read again whenever the estimate reaches the limit.
#[derive(Debug, Default)]
pub(super) struct UnfinishedCounts {
    seen: Mutex<HashMap<Option<String>, Counted>>,
}

#[derive(Debug, Clone, Copy)]
struct Counted {
    count: usize,
    at_ms: i64,
    since: usize,
}

impl UnfinishedCounts {
    /// Takes a place for one more of `principal`'s tasks when the estimate
    /// at `now_ms` is under `limit`; `false` when the store must be counted.
    pub(super) fn take(&self, principal: Option<&str>, now_ms: i64, limit: usize) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(c) = seen.get_mut(&principal.map(str::to_owned)) else {
            return false;
        };
        let fresh = now_ms.saturating_sub(c.at_ms) < RECOUNT_MS && now_ms >= c.at_ms;
        if fresh && c.count.saturating_add(c.since).saturating_add(1) <= limit {
            c.since += 1;
            true
        } else {
            false
        }
    }

    /// Records `count` read from the store at `now_ms`; when it is under
    /// `limit`, takes a place for one more (as [`take`](Self::take)).
    pub(super) fn counted(
        &self,
        principal: Option<&str>,
        now_ms: i64,
        count: usize,
        limit: usize,
    ) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() > KEEP_BUCKETS {
            seen.retain(|_, c| now_ms.saturating_sub(c.at_ms) < RECOUNT_MS);
        }
        let under = count < limit;
        seen.insert(
            principal.map(str::to_owned),
            Counted {
                count,
                at_ms: now_ms,
                since: usize::from(under),
            },
        );
        under
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_infinite_rate_is_no_limit() {
        let rate = CreateRate::default();
        for _ in 0..10_000 {
            assert!(rate.take(None, 0, f64::INFINITY, 1).is_ok());
        }
    }

    #[test]
    fn buckets_hold_a_burst_and_refill_at_the_rate() {
        let rate = CreateRate::default();
        for _ in 0..3 {
            assert!(rate.take(Some("a"), 0, 2.0, 3).is_ok());
        }
        assert_eq!(rate.take(Some("a"), 0, 2.0, 3), Err(500));
        assert!(rate.take(Some("b"), 0, 2.0, 3).is_ok(), "per principal");
        assert!(rate.take(Some("a"), 500, 2.0, 3).is_ok(), "refilled");
        assert!(rate.take(Some("a"), 500, 2.0, 3).is_err());
    }

    #[test]
    fn unfinished_counts_are_trusted_below_the_limit_and_for_a_while() {
        let counts = UnfinishedCounts::default();
        assert!(!counts.take(None, 0, 3), "never counted");
        assert!(counts.counted(None, 0, 1, 3), "1 of 3, and one more");
        assert!(counts.take(None, 5, 3), "the third");
        assert!(!counts.take(None, 10, 3), "the estimate reached the limit");
        assert!(!counts.counted(None, 10, 3, 3), "counted at the limit");
        assert!(counts.counted(Some("a"), 10, 0, 3));
        assert!(counts.take(Some("a"), 20, 3));
        assert!(counts.take(Some("a"), 30, 3));
        assert!(!counts.take(Some("a"), 40, 3), "3 of 3");
        assert!(counts.counted(None, 50, 0, 3));
        assert!(!counts.take(None, 50 + RECOUNT_MS, 3), "too old");
        assert!(!counts.take(None, 40, 3), "the clock went back");
    }

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
