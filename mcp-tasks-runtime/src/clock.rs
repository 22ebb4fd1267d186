//! Time: the wall clock in Unix milliseconds, and an engine's clock (the
//! system's, or one a test moves on: [`TestClock`], re-exported by the
//! testing kit).

#[cfg(feature = "testing")]
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, in Unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The instant `ms` Unix milliseconds name (the epoch for a negative `ms`).
pub(crate) fn system_time(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// An engine's clock: the system's, moved on by [`Clock::advance`] (only
/// the testing kit does that, to fire durable timers without waiting), or
/// a frozen one that moves only by [`Clock::advance`] (the testing kit's
/// `TestClock::frozen`).
#[derive(Debug, Default)]
pub(crate) struct Clock {
    offset_ms: std::sync::atomic::AtomicI64,
    /// Where a frozen clock stands before any move (Unix ms); `None` for
    /// the system's time.
    frozen_at: Option<i64>,
    /// Wakes the waits of [`Clock::sleep_until`] when the clock moves on.
    advanced: tokio::sync::Notify,
}

impl Clock {
    /// A clock that reads `at_ms` until [`Clock::advance`] moves it on.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn frozen(at_ms: i64) -> Self {
        Self {
            frozen_at: Some(at_ms),
            ..Self::default()
        }
    }

    /// Whether this clock moves only when told.
    pub(crate) fn is_frozen(&self) -> bool {
        self.frozen_at.is_some()
    }

    /// Now, in Unix milliseconds, on this clock.
    pub(crate) fn now_ms(&self) -> i64 {
        self.frozen_at
            .unwrap_or_else(now_ms)
            .saturating_add(self.offset_ms.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// Moves this clock `by` ahead.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.offset_ms
            .fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
        self.advanced.notify_waiters();
    }

    /// Waits until this clock reads `at` (Unix ms) or later: the system's
    /// time passing, or [`Clock::advance`] moving it on.
    pub(crate) async fn sleep_until(&self, at: i64) {
        loop {
            let advanced = self.advanced.notified();
            let remaining = at.saturating_sub(self.now_ms());
            let Ok(ms @ 1..) = u64::try_from(remaining) else {
                return;
            };
            if self.is_frozen() {
                // Only a move of the clock brings `at` nearer.
                advanced.await;
                continue;
            }
            // `biased`: the same branch wins every time both are ready (either
            // way the loop looks at the clock again).
            tokio::select! {
                biased;
                () = advanced => {}
                () = tokio::time::sleep(Duration::from_millis(ms)) => {}
            }
        }
    }
}

#[cfg(feature = "testing")]
/// A clock that engines share across restarts: hand it to each with
/// [`EngineBuilder::clock`](crate::engine::EngineBuilder::clock), and move it on
/// with [`Engine::advance_clock`](crate::Engine::advance_clock) (which also wakes that engine's timers).
/// It reads the system's time plus how far it was moved on, like every
/// engine's clock; a test that stops an engine and starts another on the
/// same store gives the new one the old one's clock, so that a sleep that
/// was moved past stays past.
///
/// ```
/// use std::time::Duration;
///
/// use mcp_tasks_runtime::{Engine, store::MemoryStore, testing::TestClock, tool::Registry};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mcp_tasks_runtime::Result<()> {
/// let clock = TestClock::new();
/// let store = std::sync::Arc::new(MemoryStore::new());
/// let first = Engine::builder_arc(store.clone())
///     .registry(Registry::new())
///     .clock(&clock)
///     .start()
///     .await?;
/// let before = clock.now_ms();
/// first.advance_clock(Duration::from_secs(3600));
/// // A restart on the same store, an hour later on the test's clock.
/// let second = Engine::builder_arc(store)
///     .registry(Registry::new())
///     .clock(&clock)
///     .start()
///     .await?;
/// assert!(second.now_ms() >= before + 3_600_000);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct TestClock(Arc<Clock>);

#[cfg(feature = "testing")]
impl TestClock {
    /// A clock at the system's time: it reads the system's time plus how far
    /// it was moved on, so it moves as real time passes too.
    pub fn new() -> Self {
        Self::default()
    }

    /// A frozen clock: it reads `at_ms` (Unix milliseconds) until moved on,
    /// and moves only by [`TestClock::advance`] or
    /// [`Engine::advance_clock`](crate::Engine::advance_clock). A durable timer on it fires only when a
    /// move takes the clock past its deadline, however much real (or tokio)
    /// time passes; leases and question deadlines count on it as well.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use mcp_tasks_runtime::testing::TestClock;
    ///
    /// let clock = TestClock::frozen(1_000);
    /// std::thread::sleep(Duration::from_millis(5));
    /// assert_eq!(clock.now_ms(), 1_000);
    /// clock.advance(Duration::from_millis(250));
    /// assert_eq!(clock.now_ms(), 1_250);
    /// ```
    pub fn frozen(at_ms: i64) -> Self {
        Self(Arc::new(Clock::frozen(at_ms)))
    }

    /// Moves this clock `by` ahead, for every engine that shares it. Their
    /// waits on it look again; [`Engine::advance_clock`](crate::Engine::advance_clock) does the same and
    /// also wakes that engine's timers and scan.
    pub fn advance(&self, by: Duration) {
        self.0.advance(by);
    }

    /// Now, on this clock, in Unix milliseconds.
    pub fn now_ms(&self) -> i64 {
        self.0.now_ms()
    }

    /// The clock an engine built with it runs on.
    pub(crate) fn shared(&self) -> Arc<Clock> {
        self.0.clone()
    }
}
