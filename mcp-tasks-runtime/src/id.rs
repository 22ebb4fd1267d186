//! Task ids, and how logs name them.

use std::fmt::Write as _;

#[cfg(feature = "server")]
pub(crate) use crate::clock::now_ms;

/// 128 bits from the OS CSPRNG as 32 lowercase hex digits (from a seeded
/// sequence instead on a thread given one by the testing kit's
/// [`seed_ids`](crate::testing::seed_ids)).
pub(crate) fn random_hex() -> String {
    let mut bytes = [0u8; 16];
    #[cfg(feature = "testing")]
    let seeded = seeded::fill(&mut bytes);
    #[cfg(not(feature = "testing"))]
    let seeded = false;
    if !seeded {
        // The OS generator failing is not something a server can carry on from.
        getrandom::fill(&mut bytes).expect("the operating system's random number generator failed");
    }
    hex(&bytes)
}

/// `bytes` as lowercase hex digits.
pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Ids from a seeded sequence, per thread: a deterministic simulation
/// drives its engines on one thread and gives it a seed, so that the same
/// seed makes the same task ids. Feature `testing`.
#[cfg(feature = "testing")]
pub(crate) mod seeded {
    use std::cell::Cell;

    thread_local! {
        static STATE: Cell<Option<u64>> = const { Cell::new(None) };
    }

    /// Seeds this thread's ids (`None`: the OS generator again).
    pub(crate) fn seed(seed: Option<u64>) {
        STATE.with(|s| s.set(seed));
    }

    /// Fills `bytes` from this thread's sequence; `false` when it has none.
    pub(crate) fn fill(bytes: &mut [u8]) -> bool {
        STATE.with(|s| {
            let Some(mut x) = s.get() else {
                return false;
            };
            for chunk in bytes.chunks_mut(8) {
                // splitmix64
                x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = x;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^= z >> 31;
                chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
            }
            s.set(Some(x));
            true
        })
    }
}

/// How logs and traces name a task at INFO and above: the first 8 of its 32
/// hex digits. The id itself is a bearer secret when no authentication is
/// configured, so it appears only at DEBUG.
pub(crate) fn task_ref(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// Shows an error's text with every task id in it cut to its reference
/// ([`task_ref`]): how errors are logged at INFO and above, since a store's
/// messages name the task they were about.
pub(crate) struct Redacted<'a, T: ?Sized>(pub(crate) &'a T);

impl<T: std::fmt::Display + ?Sized> std::fmt::Display for Redacted<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redact(&self.0.to_string()))
    }
}

/// `text` with each run of exactly 32 lowercase hex digits (a task id's
/// shape) cut to its first 8 and `…`.
pub(crate) fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
        if hex(bytes[i]) {
            let start = i;
            while i < bytes.len() && hex(bytes[i]) {
                i += 1;
            }
            let run = &text[start..i];
            if run.len() == 32 {
                out.push_str(&run[..8]);
                out.push('…');
            } else {
                out.push_str(run);
            }
        } else {
            let c = text[i..].chars().next().unwrap_or_default();
            out.push(c);
            i += c.len_utf8().max(1);
        }
    }
    out
}

#[cfg(test)]
mod redact_tests {
    #[test]
    fn only_task_ids_are_cut() {
        let id = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            super::redact(&format!(
                "could not answer task {id}: é busy; deadbeef; {id}0"
            )),
            format!("could not answer task 01234567…: é busy; deadbeef; {id}0")
        );
    }
}
