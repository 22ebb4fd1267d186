//! Creates while the server purges expired tasks: at each level (1,000,
//! 10,000 and 100,000 expired tasks; 1,000,000 in a full run; 100 and 1,000
//! in a tiny run), on SQLite `FULL` and on Postgres, it prints how long the
//! purge took and the p50, p99 and largest latency of the creates made
//! while it ran, beside those of the creates made after it, in the same run.
//!
//! Each level has a store of its own, filled by this process (16 writes at a
//! time through the store's own API) with tasks that completed and whose TTL
//! has passed, each with a journal of two entries; no server runs meanwhile.
//! Then the conformance example starts on it as a release process on
//! 127.0.0.1, with an admin address; its expiry sweep starts at once. One
//! client creates `slow_compute` tasks (an hour) one after the other from
//! the moment the server answers, while this process reads the server's
//! `mcp_tasks_expired_total` (every 20 ms) until it counts every expired
//! task; it goes on creating for a second after that, for the baseline.
//! This process holds no handle on the store meanwhile: a second process
//! with the SQLite file open changes what is measured (see `BENCHMARKS.md`).
//!
//! `cargo bench -p mcp-tasks-tests --bench purge`;
//! `MCP_TASKS_BENCH_QUICK=1` stops at 100,000; without `--bench`
//! (`cargo test --benches`) it runs tiny. `MCP_TASKS_BENCH_SERVERS=sqlite`
//! or `postgres` runs one store. Prints figures; asserts nothing about
//! speed.

mod support;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use futures::{StreamExt as _, stream};
use mcp_tasks_runtime::store::{JournalEntry, StepKind, Store, TaskRecord, TaskStatus};
use serde_json::json;
use support::{Client, Size, StoreArgs, open_store, p50_p99, pg, scrape, selected, start_server};

/// One level's figures.
struct Level {
    expired: usize,
    fill_s: f64,
    purge_ms: f64,
    during: Creates,
    after: Creates,
}

/// The creates of one phase.
struct Creates {
    n: usize,
    p50: f64,
    p99: f64,
    max: f64,
}

impl Creates {
    fn of(mut lat: Vec<Duration>) -> Self {
        let max = lat.iter().max().map_or(0.0, |d| d.as_secs_f64() * 1e3);
        let (p50, p99) = p50_p99(&mut lat);
        Self {
            n: lat.len(),
            p50,
            p99,
            max,
        }
    }
}

/// A task of `slow_compute` that completed and expired an hour ago, as the
/// store keeps one until the sweep deletes it.
fn expired(n: usize, now_ms: i64) -> (TaskRecord, Vec<JournalEntry>) {
    let mut t = TaskRecord::new(format!("gone{n:08}"), "slow_compute", now_ms - 7_200_000);
    t.arguments.insert("seconds".into(), json!(1));
    t.arguments.insert("label".into(), json!("gone"));
    t.status = TaskStatus::Completed;
    t.ttl_ms = Some(3_600_000);
    let journal = (0..2)
        .map(|i| JournalEntry {
            position: i,
            kind: StepKind::Checkpoint,
            name: format!("step-{i}"),
            value: json!(i),
        })
        .collect();
    (t, journal)
}

/// Writes `n` expired tasks into `store`, 16 at a time.
async fn fill(store: Arc<dyn Store>, n: usize) {
    let now_ms = support::unix_ms();
    stream::iter(0..n)
        .map(|i| {
            let store = store.clone();
            let (task, journal) = expired(i, now_ms);
            async move {
                store
                    .create_with_journal(task, journal)
                    .await
                    .expect("an expired task");
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
}

/// How many expired tasks the server at `admin` has purged.
async fn purged(admin: &str) -> usize {
    scrape(admin)
        .await
        .lines()
        .find_map(|l| l.strip_prefix("mcp_tasks_expired_total "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Measures one level on `store`.
async fn measure(store: &StoreArgs, expired: usize) -> Level {
    let began = Instant::now();
    let handle = open_store(store).await;
    fill(handle.clone(), expired).await;
    drop(handle);
    let fill_s = began.elapsed().as_secs_f64();

    let spawned = Instant::now();
    let args = ["--admin", "127.0.0.1:0"];
    let server = start_server(support::bin("conformance"), store, &args, None);
    let admin = server.admin().expect("the admin address");
    let watcher = tokio::spawn(async move {
        // Bounded, so that a counter that stops short fails the bench
        // instead of hanging it.
        loop {
            let seen = purged(&admin).await;
            if seen >= expired {
                break;
            }
            assert!(
                spawned.elapsed() < Duration::from_secs(600),
                "the server's mcp_tasks_expired_total stayed at {seen} of {expired}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        spawned.elapsed()
    });
    let client = Client::new(&server.url);
    let (mut during, mut after) = (Vec::new(), Vec::new());
    let mut purged_at: Option<Instant> = None;
    loop {
        // The watcher ends when the purge has (or when it gave up: its panic
        // comes out below).
        let finished = watcher.is_finished();
        if finished && purged_at.get_or_insert_with(Instant::now).elapsed() > Duration::from_secs(1)
        {
            break;
        }
        let s = Instant::now();
        client.create().await;
        let took = s.elapsed();
        if finished {
            after.push(took);
        } else {
            during.push(took);
        }
    }
    let purge = watcher.await.expect("the watcher");
    drop(server);
    Level {
        expired,
        fill_s,
        purge_ms: purge.as_secs_f64() * 1e3,
        during: Creates::of(during),
        after: Creates::of(after),
    }
}

/// Measures each level, each on a store `store(level)` names.
async fn run(name: &str, levels: &[usize], store: impl Fn(usize) -> StoreArgs) {
    let mut figures = Vec::new();
    for &n in levels {
        let level = measure(&store(n), n).await;
        println!(
            "{name}: {n} expired tasks written in {:.1} s, purged {:.0} ms after the server's spawn",
            level.fill_s, level.purge_ms
        );
        figures.push(level);
    }
    println!("\n[{name}]");
    println!(
        "| expired tasks | purged within (from spawn) | creates during: n, p50 / p99 / max | creates after: n, p50 / p99 / max | during p99 / after p99 |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for l in &figures {
        let (d, a) = (&l.during, &l.after);
        let ratio = if d.n > 0 && a.p99 > 0.0 {
            format!("{:.2}×", d.p99 / a.p99)
        } else {
            "none during".to_owned()
        };
        println!(
            "| {} | {:.0} ms | {}, {:.3} / {:.3} / {:.1} ms | {}, {:.3} / {:.3} / {:.1} ms | {ratio} |",
            l.expired, l.purge_ms, d.n, d.p50, d.p99, d.max, a.n, a.p50, a.p99, a.max,
        );
    }
}

#[tokio::main]
async fn main() {
    let size = Size::from_args();
    let levels = size.task_levels();
    println!(
        "creates while expired tasks are purged, over HTTP on 127.0.0.1 ({} CPUs; {} processes; \
         {size:?} run: levels {levels:?})",
        support::cpus(),
        support::profile(),
    );
    if selected("sqlite") {
        let dir = tempfile::tempdir().unwrap();
        run("SQLite FULL", levels, |n| {
            StoreArgs::Sqlite(dir.path().join(format!("purge-{n}.db")))
        })
        .await;
    }
    if selected("postgres")
        && let Some(url) = pg::server_or_skip().await
    {
        let schemas = pg::Levels::new(&url, levels);
        run("Postgres", levels, |n| schemas.store(n)).await;
        drop(schemas);
    }
}
