//! The engine's metrics: counters, gauges and histograms through the
//! [`metrics`](https://docs.rs/metrics) facade, rendered as Prometheus text
//! by `metrics-exporter-prometheus`.
//!
//! Built with the `metrics` feature. Without it every instrument below is an
//! empty inline fn, and nothing is counted. With it, nothing is recorded
//! either until [`install`] puts the Prometheus recorder in place (the admin
//! address does, see `admin::serve`); the engine's calls into the facade then
//! cost an atomic add each.
//!
//! No label carries a task id or a principal: the labels are the tool and,
//! for finished tasks, the status.
//!
//! | series | kind | labels | what |
//! |---|---|---|---|
//! | `mcp_tasks_created_total` | counter | `tool` | tasks created |
//! | `mcp_tasks_finished_total` | counter | `tool`, `status` | tasks that reached `completed`, `failed` or `cancelled` here |
//! | `mcp_tasks_polls_total` | counter | | `tasks/get` requests |
//! | `mcp_tasks_updates_total` | counter | | answers delivered (`tasks/update`) |
//! | `mcp_tasks_cancels_total` | counter | | cancel requests (`tasks/cancel`) |
//! | `mcp_tasks_expired_total` | counter | | tasks purged when their TTL ran out |
//! | `mcp_tasks_replayed_steps_total` | counter | | steps whose value came from the journal |
//! | `mcp_tasks_nondeterminism_failures_total` | counter | | replays that met another step than the journal's |
//! | `mcp_tasks_store_retries_total` | counter | | store writes retried after a failure |
//! | `mcp_tasks_store_reconnects_total` | counter | | times the Postgres store got its database back after losing it |
//! | `mcp_tasks_running` | gauge | | runs of a fn under way in this process |
//! | `mcp_tasks_queued` | gauge | | runs waiting for a worker in this process |
//! | `mcp_tasks_parked` | gauge | | tasks in `input_required`, in the store (set at each scrape) |
//! | `mcp_tasks_sleeping` | gauge | | `working` tasks asleep on a durable timer, in the store (set at each scrape) |
//! | `mcp_tasks_step_duration_seconds` | histogram | `tool` | how long a checkpoint's closure ran (replays excluded) |
//! | `mcp_tasks_time_to_result_seconds` | histogram | `tool`, `status` | from creation to the end |
//! | `mcp_tasks_input_wait_seconds` | histogram | `tool` | how long a task waited in `input_required` for its answers |
//! | `mcp_tasks_store_unavailable_seconds` | histogram | | each stretch the Postgres store spent without its database, from the first connection lost or refused to the next one made (`_sum`: the time without it in all) |
//! | `mcp_tasks_sqlite_write_seconds` | histogram | | a write to the SQLite store as its caller waits for it: queued for the writer thread, committed, handed back |
//! | `mcp_tasks_sqlite_commit_seconds` | histogram | | one transaction of the SQLite writer, `BEGIN` to `COMMIT` (the disk's flush included) or to its rollback; it may carry several writes |
//!
//! `mcp_tasks_store_reconnects_total` and `mcp_tasks_store_unavailable_seconds`
//! tell what a database's restart or failover cost: a restart counts one
//! reconnect, and its downtime as this instance saw it (the change feed's
//! connection notices the loss at once; the downtime ends with the first
//! connection made again, the feed's or the pool's).
//!
//! The two `mcp_tasks_sqlite_` histograms answer "is the disk the limit?":
//! when a write's p50 sits well above a commit's, writes wait in the queue
//! or for a thread to wake; when a commit's sits near the disk's own flush,
//! the disk is. Their buckets run from 50 µs to 5 s; the others' from 5 ms
//! to a day.

#[cfg(feature = "metrics")]
mod on {
    use std::sync::OnceLock;

    use metrics::{counter, gauge, histogram};
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

    /// Histogram buckets, in seconds: from 5 ms to a day.
    const BUCKETS: &[f64] = &[
        0.005, 0.025, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0, 3600.0, 86_400.0,
    ];

    /// Buckets of the SQLite store's histograms, in seconds: from 50 µs
    /// (a commit on a fast disk) to 5 s.
    const STORE_BUCKETS: &[f64] = &[
        0.000_05, 0.000_1, 0.000_15, 0.000_2, 0.000_25, 0.000_3, 0.000_4, 0.000_5, 0.000_75, 0.001,
        0.002, 0.005, 0.01, 0.025, 0.1, 0.5, 1.0, 5.0,
    ];

    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

    /// Puts the Prometheus recorder in place, once per process; `false` when
    /// another recorder was installed first (nothing of the engine's is
    /// rendered then).
    pub fn install() -> bool {
        HANDLE
            .get_or_init(|| {
                let builder = PrometheusBuilder::new()
                    .set_buckets(BUCKETS)
                    .ok()?
                    .set_buckets_for_metric(
                        Matcher::Prefix("mcp_tasks_sqlite_".into()),
                        STORE_BUCKETS,
                    )
                    .ok()?;
                let handle = builder.install_recorder().ok()?;
                describe();
                // Every unlabelled counter is rendered from the start, at 0.
                for name in [
                    "mcp_tasks_polls_total",
                    "mcp_tasks_updates_total",
                    "mcp_tasks_cancels_total",
                    "mcp_tasks_expired_total",
                    "mcp_tasks_replayed_steps_total",
                    "mcp_tasks_nondeterminism_failures_total",
                    "mcp_tasks_store_retries_total",
                    "mcp_tasks_store_reconnects_total",
                ] {
                    counter!(name).increment(0);
                }
                for name in ["mcp_tasks_running", "mcp_tasks_queued"] {
                    gauge!(name).increment(0.0);
                }
                Some(handle)
            })
            .is_some()
    }

    /// The metrics as Prometheus text; `None` before [`install`].
    pub fn render() -> Option<String> {
        let handle = HANDLE.get()?.as_ref()?;
        handle.run_upkeep();
        Some(handle.render())
    }

    fn describe() {
        use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
        describe_counter!("mcp_tasks_created_total", "Tasks created.");
        describe_counter!(
            "mcp_tasks_finished_total",
            "Tasks that reached a terminal status on this instance."
        );
        describe_counter!("mcp_tasks_polls_total", "tasks/get requests.");
        describe_counter!("mcp_tasks_updates_total", "Answers delivered to tasks.");
        describe_counter!("mcp_tasks_cancels_total", "Cancel requests.");
        describe_counter!(
            "mcp_tasks_expired_total",
            "Tasks purged when their TTL ran out."
        );
        describe_counter!(
            "mcp_tasks_replayed_steps_total",
            "Steps whose value came from the journal."
        );
        describe_counter!(
            "mcp_tasks_nondeterminism_failures_total",
            "Replays that met another step than the journal's."
        );
        describe_counter!(
            "mcp_tasks_store_retries_total",
            "Store writes retried after a failure."
        );
        describe_counter!(
            "mcp_tasks_store_reconnects_total",
            "Times the Postgres store got its database back after losing it."
        );
        describe_histogram!(
            "mcp_tasks_store_unavailable_seconds",
            Unit::Seconds,
            "Each stretch the Postgres store spent without its database."
        );
        describe_gauge!("mcp_tasks_running", "Runs of a task fn under way here.");
        describe_gauge!("mcp_tasks_queued", "Runs waiting for a worker here.");
        describe_gauge!("mcp_tasks_parked", "Tasks waiting in input_required.");
        describe_gauge!("mcp_tasks_sleeping", "Working tasks asleep on a timer.");
        describe_histogram!(
            "mcp_tasks_step_duration_seconds",
            Unit::Seconds,
            "How long a checkpoint's closure ran."
        );
        describe_histogram!(
            "mcp_tasks_time_to_result_seconds",
            Unit::Seconds,
            "From a task's creation to its end."
        );
        describe_histogram!(
            "mcp_tasks_input_wait_seconds",
            Unit::Seconds,
            "How long a task waited in input_required."
        );
        describe_histogram!(
            "mcp_tasks_sqlite_write_seconds",
            Unit::Seconds,
            "A write to the SQLite store as its caller waits: queued, committed, handed back."
        );
        describe_histogram!(
            "mcp_tasks_sqlite_commit_seconds",
            Unit::Seconds,
            "One transaction of the SQLite writer, BEGIN to COMMIT, the disk's flush included."
        );
    }

    pub(crate) fn created(tool: &str) {
        counter!("mcp_tasks_created_total", "tool" => tool.to_owned()).increment(1);
    }

    pub(crate) fn finished(tool: &str, status: &'static str, after_ms: i64) {
        counter!("mcp_tasks_finished_total", "tool" => tool.to_owned(), "status" => status)
            .increment(1);
        histogram!("mcp_tasks_time_to_result_seconds", "tool" => tool.to_owned(), "status" => status)
            .record(seconds(after_ms));
    }

    // Counted by the MCP front door only.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn poll() {
        counter!("mcp_tasks_polls_total").increment(1);
    }

    pub(crate) fn update() {
        counter!("mcp_tasks_updates_total").increment(1);
    }

    pub(crate) fn cancel() {
        counter!("mcp_tasks_cancels_total").increment(1);
    }

    pub(crate) fn expired(n: usize) {
        counter!("mcp_tasks_expired_total").increment(n as u64);
    }

    pub(crate) fn replayed() {
        counter!("mcp_tasks_replayed_steps_total").increment(1);
    }

    pub(crate) fn nondeterminism() {
        counter!("mcp_tasks_nondeterminism_failures_total").increment(1);
    }

    pub(crate) fn store_retry() {
        counter!("mcp_tasks_store_retries_total").increment(1);
    }

    /// The store got its database back after `down` without it.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn store_reconnected(down: std::time::Duration) {
        counter!("mcp_tasks_store_reconnects_total").increment(1);
        histogram!("mcp_tasks_store_unavailable_seconds").record(down.as_secs_f64());
    }

    /// When a step began.
    #[derive(Debug)]
    pub(crate) struct Began(std::time::Instant);

    pub(crate) fn began() -> Began {
        Began(std::time::Instant::now())
    }

    pub(crate) fn step(tool: &str, began: Began) {
        histogram!("mcp_tasks_step_duration_seconds", "tool" => tool.to_owned())
            .record(began.0.elapsed().as_secs_f64());
    }

    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn sqlite_write(began: Began) {
        histogram!("mcp_tasks_sqlite_write_seconds").record(began.0.elapsed().as_secs_f64());
    }

    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn sqlite_commit(began: Began) {
        histogram!("mcp_tasks_sqlite_commit_seconds").record(began.0.elapsed().as_secs_f64());
    }

    pub(crate) fn input_wait(tool: &str, waited_ms: i64) {
        histogram!("mcp_tasks_input_wait_seconds", "tool" => tool.to_owned())
            .record(seconds(waited_ms));
    }

    #[cfg_attr(not(feature = "admin"), allow(dead_code))]
    pub(crate) fn parked_and_sleeping(parked: usize, sleeping: usize) {
        gauge!("mcp_tasks_parked").set(parked as f64);
        gauge!("mcp_tasks_sleeping").set(sleeping as f64);
    }

    fn seconds(ms: i64) -> f64 {
        ms.max(0) as f64 / 1000.0
    }

    /// Counts one in a gauge while it lives.
    #[derive(Debug)]
    pub(crate) struct Gauged(&'static str);

    impl Gauged {
        pub(crate) fn running() -> Self {
            gauge!("mcp_tasks_running").increment(1.0);
            Self("mcp_tasks_running")
        }

        pub(crate) fn queued() -> Self {
            gauge!("mcp_tasks_queued").increment(1.0);
            Self("mcp_tasks_queued")
        }

        /// Counts it out now.
        pub(crate) fn end(self) {}
    }

    impl Drop for Gauged {
        fn drop(&mut self) {
            gauge!(self.0).decrement(1.0);
        }
    }
}

#[cfg(not(feature = "metrics"))]
#[allow(clippy::missing_const_for_fn, dead_code)]
mod on {
    pub(crate) fn created(_: &str) {}
    pub(crate) fn finished(_: &str, _: &'static str, _: i64) {}
    pub(crate) fn poll() {}
    pub(crate) fn update() {}
    pub(crate) fn cancel() {}
    pub(crate) fn expired(_: usize) {}
    pub(crate) fn replayed() {}
    pub(crate) fn nondeterminism() {}
    pub(crate) fn store_retry() {}
    pub(crate) fn store_reconnected(_: std::time::Duration) {}
    /// Nothing, without the `metrics` feature: no clock is read.
    #[derive(Debug)]
    pub(crate) struct Began;
    pub(crate) fn began() -> Began {
        Began
    }
    pub(crate) fn step(_: &str, _: Began) {}
    pub(crate) fn sqlite_write(_: Began) {}
    pub(crate) fn sqlite_commit(_: Began) {}
    pub(crate) fn input_wait(_: &str, _: i64) {}
    pub(crate) fn parked_and_sleeping(_: usize, _: usize) {}

    /// Nothing, without the `metrics` feature.
    #[derive(Debug)]
    pub(crate) struct Gauged;

    impl Gauged {
        pub(crate) fn running() -> Self {
            Self
        }
        pub(crate) fn queued() -> Self {
            Self
        }
        pub(crate) fn end(self) {}
    }
}

#[allow(unused_imports)]
pub(crate) use on::{
    Gauged, began, cancel, created, expired, finished, input_wait, nondeterminism,
    parked_and_sleeping, poll, replayed, sqlite_commit, sqlite_write, step, store_reconnected,
    store_retry, update,
};
#[cfg(feature = "metrics")]
pub use on::{install, render};
