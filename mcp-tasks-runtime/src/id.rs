//! Task ids and timestamps.

use std::{
    fmt::Write as _,
    time::{Duration, SystemTime, UNIX_EPOCH},
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

/// Now, in Unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Unix milliseconds as an RFC 3339 timestamp (`2026-11-30T10:30:00.123Z`).
pub(crate) fn rfc3339(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(t).to_string()
}
