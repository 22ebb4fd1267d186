//! Task ids and the clock.

use std::{
    fmt::Write as _,
    time::{SystemTime, UNIX_EPOCH},
};

/// 128 bits from the OS CSPRNG as 32 lowercase hex digits.
pub(crate) fn random_hex() -> String {
    let mut bytes = [0u8; 16];
    // The OS generator failing is not something a server can carry on from.
    getrandom::fill(&mut bytes).expect("the operating system's random number generator failed");
    let mut s = String::with_capacity(32);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// An engine's clock: the system's, moved on by [`Clock::advance`] (only
/// the testing kit does that, to fire durable timers without waiting).
#[derive(Debug, Default)]
pub(crate) struct Clock {
    offset_ms: std::sync::atomic::AtomicI64,
}

impl Clock {
    /// Now, in Unix milliseconds, on this clock.
    pub(crate) fn now_ms(&self) -> i64 {
        now_ms().saturating_add(self.offset_ms.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// Moves this clock `by` ahead.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn advance(&self, by: std::time::Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.offset_ms
            .fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }
}

/// How logs and traces name a task at INFO and above: the first 8 of its 32
/// hex digits. The id itself is a bearer secret when no authentication is
/// configured, so it appears only at DEBUG.
pub(crate) fn task_ref(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// Now, in Unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
