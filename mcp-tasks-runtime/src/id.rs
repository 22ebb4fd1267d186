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

/// Now, in Unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
