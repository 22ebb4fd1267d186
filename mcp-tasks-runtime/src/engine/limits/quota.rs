//! How many tasks a caller may hold unfinished, and how fast it may create
//! them: the counts and token buckets kept per caller ([`Quota`]).

use std::{
    collections::{HashMap, HashSet},
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    sync::{Mutex, PoisonError},
};

/// How many times a client's per-client caps the loopback addresses get
/// together, as one client ("this machine"): the HTTP transport's
/// `max_sessions_per_client` and `max_connections_per_client`.
#[cfg(feature = "server")]
pub(crate) const LOOPBACK_FACTOR: usize = 4;

/// The address part of the one definition of "a client" that every
/// per-client limit uses (sessions, connections, creates and unfinished
/// tasks; a principal, when there is one, comes first): an IPv4 address
/// as it is, an IPv4-mapped IPv6 address as its IPv4 address, another IPv6
/// address by its /64 prefix (one host usually holds a whole /64 and can
/// pick any address in it). Unless `loopback_apart`, every loopback address
/// (127.0.0.0/8 and `::1`) is one client, keyed `127.0.0.1`: any local
/// process can pick another 127.x address.
pub(crate) fn address_key(ip: IpAddr, loopback_apart: bool) -> IpAddr {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    };
    if !loopback_apart && ip.is_loopback() {
        return IpAddr::V4(Ipv4Addr::LOCALHOST);
    }
    match ip {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() & !u128::from(u64::MAX))),
        v4 @ IpAddr::V4(_) => v4,
    }
}

/// Whom a call's create limits count against: its principal; without one,
/// its client's address; with neither, every such call together.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(in crate::engine) enum Quota {
    /// The caller's principal.
    Principal(String),
    /// No principal: the client's address, as [`Quota::of`] keys it.
    Address(IpAddr),
    /// No principal and no address (stdio, or an embedder's call).
    Shared,
}

impl Quota {
    /// The quota of a call from `principal` at `addr`, keyed by
    /// [`address_key`]: an IPv4-mapped IPv6 address counts as its IPv4
    /// address, and another IPv6 address by its /64 prefix. Loopback
    /// addresses are taken as given: the HTTP transport passes every
    /// loopback address as `127.0.0.1` already, unless
    /// `HttpOptions::loopback_addresses_apart` is set.
    pub(in crate::engine) fn of(principal: Option<&str>, addr: Option<IpAddr>) -> Self {
        match (principal, addr) {
            (Some(principal), _) => Self::Principal(principal.to_owned()),
            (None, Some(ip)) => Self::Address(address_key(ip, true)),
            (None, None) => Self::Shared,
        }
    }

    /// The principal whose stored tasks the store counts for this quota
    /// (`None`: the tasks created without one), unless it counts by address.
    pub(in crate::engine) fn principal(&self) -> Option<Option<&str>> {
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
pub(in crate::engine) struct CreateRate {
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
    pub(in crate::engine) fn take(
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
pub(in crate::engine) const RECOUNT_MS: i64 = 1_000;

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
pub(in crate::engine) struct UnfinishedCounts {
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
    pub(in crate::engine) fn take(
        &self,
        principal: Option<&str>,
        now_ms: i64,
        limit: usize,
    ) -> bool {
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
    pub(in crate::engine) fn counted(
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
pub(in crate::engine) struct AddressTasks {
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
    pub(in crate::engine) fn take(
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
    pub(in crate::engine) fn weeded(
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
    fn loopback_is_one_client_unless_counted_apart() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let local = ip("127.0.0.1");
        for a in [
            "127.0.0.1",
            "127.0.0.25",
            "127.255.0.9",
            "::1",
            "::ffff:127.0.0.3",
        ] {
            assert_eq!(address_key(ip(a), false), local, "{a}");
        }
        assert_eq!(address_key(ip("127.0.0.25"), true), ip("127.0.0.25"));
        assert_eq!(address_key(ip("::ffff:127.0.0.3"), true), ip("127.0.0.3"));
        assert_eq!(address_key(ip("192.0.2.7"), false), ip("192.0.2.7"));
        assert_eq!(
            address_key(ip("2001:db8:1:2:ffff::7"), false),
            ip("2001:db8:1:2::")
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
}
