//! What callers and tools may ask of the engine: sizes, a caller's
//! unfinished tasks, and how fast a caller may create them. A caller is
//! its principal, or without one its client address ([`Quota`]).

use std::{
    collections::{HashMap, HashSet},
    net::{IpAddr, Ipv6Addr},
    sync::{Mutex, PoisonError},
};

use serde::Serialize;
use serde_json::Value;

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
    /// (or an IPv4-mapped IPv6 one) counts alone.
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
    /// ([`Limits::max_listens_per_task`]).
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
    /// `HttpOptions::max_connections` (a listen naming no known task ends
    /// at once); each listen names at most `MAX_LISTEN_IDS` (1024) tasks,
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

/// Whom a call's create limits count against: its principal; without one,
/// its client's address; with neither, every such call together.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Quota {
    /// The caller's principal.
    Principal(String),
    /// No principal: the client's address, as [`Quota::of`] keys it.
    Address(IpAddr),
    /// No principal and no address (stdio, or an embedder's call).
    Shared,
}

impl Quota {
    /// The quota of a call from `principal` at `addr`. An IPv4-mapped IPv6
    /// address counts as its IPv4 address, and another IPv6 address by its
    /// /64 prefix: one host usually holds a whole /64 and can pick any
    /// address in it.
    pub(super) fn of(principal: Option<&str>, addr: Option<IpAddr>) -> Self {
        match (principal, addr) {
            (Some(principal), _) => Self::Principal(principal.to_owned()),
            (None, Some(IpAddr::V6(v6))) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::Address(IpAddr::V4(v4)),
                None => Self::Address(IpAddr::V6(Ipv6Addr::from_bits(
                    v6.to_bits() & !u128::from(u64::MAX),
                ))),
            },
            (None, Some(v4)) => Self::Address(v4),
            (None, None) => Self::Shared,
        }
    }

    /// The principal whose stored tasks the store counts for this quota
    /// (`None`: the tasks created without one), unless it counts by address.
    pub(super) fn principal(&self) -> Option<Option<&str>> {
        match self {
            Self::Principal(p) => Some(Some(p)),
            Self::Shared => Some(None),
            Self::Address(_) => None,
        }
    }
}

/// A token bucket per caller ([`Quota`]): how fast each may create tasks
/// here.
#[derive(Debug, Default)]
pub(super) struct CreateRate {
    buckets: Mutex<HashMap<Quota, Bucket>>,
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
    /// Takes a token for `quota` at `now_ms`; when there is none, how
    /// long until there is.
    pub(super) fn take(
        &self,
        quota: &Quota,
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
        let bucket = buckets.entry(quota.clone()).or_insert(Bucket {
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

/// The unfinished tasks each client address (a [`Quota::Address`]) created
/// on this instance, for [`Limits::max_unfinished_per_address`]: the ids
/// of its tasks, some of which may have ended since (they are weeded out
/// when the address reaches the cap, by asking the store).
#[derive(Debug, Default)]
pub(super) struct AddressTasks {
    held: Mutex<HashMap<IpAddr, Held>>,
}

#[derive(Debug, Default)]
struct Held {
    ids: HashSet<String>,
    last_ms: i64,
}

/// Beyond this many addresses, those that created nothing for this long
/// are forgotten (each then starts again from none).
const FORGET_ADDRESS_MS: i64 = 3_600_000;

impl AddressTasks {
    /// Takes a place for task `id` of `addr` when fewer than `limit` are
    /// held; otherwise the ids held, for the store to say which are still
    /// unfinished ([`AddressTasks::weeded`]).
    pub(super) fn take(
        &self,
        addr: IpAddr,
        id: &str,
        now_ms: i64,
        limit: usize,
    ) -> Result<(), Vec<String>> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.len() > KEEP_BUCKETS {
            held.retain(|_, h| now_ms.saturating_sub(h.last_ms) < FORGET_ADDRESS_MS);
        }
        let entry = held.entry(addr).or_default();
        if entry.ids.len() < limit {
            entry.ids.insert(id.to_owned());
            entry.last_ms = now_ms;
            Ok(())
        } else {
            Err(entry.ids.iter().cloned().collect())
        }
    }

    /// Of the `asked` ids of `addr`, only `unfinished` still count (ids
    /// taken since the store was asked stay); then takes a place for task
    /// `id` as [`take`](Self::take) does. `Err` holds how many still count.
    pub(super) fn weeded(
        &self,
        addr: IpAddr,
        asked: &[String],
        unfinished: &[String],
        id: &str,
        now_ms: i64,
        limit: usize,
    ) -> Result<(), usize> {
        let unfinished: HashSet<&str> = unfinished.iter().map(String::as_str).collect();
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = held.entry(addr).or_default();
        for gone in asked.iter().filter(|id| !unfinished.contains(id.as_str())) {
            entry.ids.remove(gone);
        }
        if entry.ids.len() < limit {
            entry.ids.insert(id.to_owned());
            entry.last_ms = now_ms;
            Ok(())
        } else {
            Err(entry.ids.len())
        }
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
            assert!(rate.take(&Quota::Shared, 0, f64::INFINITY, 1).is_ok());
        }
    }

    #[test]
    fn buckets_hold_a_burst_and_refill_at_the_rate() {
        let rate = CreateRate::default();
        let (a, b) = (Quota::of(Some("a"), None), Quota::of(Some("b"), None));
        for _ in 0..3 {
            assert!(rate.take(&a, 0, 2.0, 3).is_ok());
        }
        assert_eq!(rate.take(&a, 0, 2.0, 3), Err(500));
        assert!(rate.take(&b, 0, 2.0, 3).is_ok(), "per principal");
        assert!(rate.take(&a, 500, 2.0, 3).is_ok(), "refilled");
        assert!(rate.take(&a, 500, 2.0, 3).is_err());
    }

    #[test]
    fn quotas_key_by_principal_then_address() {
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert_eq!(
            Quota::of(Some("p"), ip("127.0.0.1")),
            Quota::Principal("p".into())
        );
        assert_eq!(Quota::of(None, None), Quota::Shared);
        assert_ne!(
            Quota::of(None, ip("127.0.0.1")),
            Quota::of(None, ip("127.0.0.2"))
        );
        assert_eq!(
            Quota::of(None, ip("::ffff:127.0.0.1")),
            Quota::of(None, ip("127.0.0.1")),
            "an IPv4-mapped address is its IPv4 address"
        );
        assert_eq!(
            Quota::of(None, ip("2001:db8:1:2::1")),
            Quota::of(None, ip("2001:db8:1:2:ffff::7")),
            "one /64"
        );
        assert_ne!(
            Quota::of(None, ip("2001:db8:1:2::1")),
            Quota::of(None, ip("2001:db8:1:3::1"))
        );
    }

    #[test]
    fn address_tasks_are_weeded_at_the_cap() {
        let tasks = AddressTasks::default();
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
        assert!(tasks.take(a, "1", 0, 2).is_ok());
        assert!(tasks.take(a, "2", 0, 2).is_ok());
        let mut asked = tasks.take(a, "3", 0, 2).unwrap_err();
        asked.sort();
        assert_eq!(asked, ["1", "2"]);
        assert!(tasks.take(b, "4", 0, 2).is_ok(), "per address");
        assert_eq!(
            tasks.weeded(a, &asked, &asked, "3", 0, 2),
            Err(2),
            "both still unfinished"
        );
        assert!(tasks.weeded(a, &asked, &["2".into()], "3", 0, 2).is_ok());
        assert!(tasks.take(a, "5", 0, 2).is_err(), "2 and 3 held");
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
