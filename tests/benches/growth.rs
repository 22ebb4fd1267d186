//! How the costs of a server grow with the tasks its store holds: at each
//! level (1,000, 10,000 and 100,000 tasks; 1,000,000 in a full run), on
//! SQLite `FULL` and on Postgres, it prints how long the server takes to
//! start and answer, the p50 and p99 of a create and of a `tasks/get`, and
//! the server's resident memory, with each figure's ratio to the first
//! level's, and the CPU it takes idle (over 5 s without requests; on
//! Postgres with its backends'), which its scans for work set.
//!
//! The tasks held are parked on a durable timer a day away (`working`, no
//! lease, a wake time, a TTL of two days), as `slow_compute` of a day leaves
//! them; they are written straight into the store by this process (16
//! writes at a time through the store's own API, not over HTTP), between
//! levels, while no server runs; on Postgres the tables are then vacuumed
//! and a checkpoint taken, as the database's upkeep leaves rows held a
//! while (see `settle`). At each level the conformance example is
//! started afresh on the store as a release process on 127.0.0.1 (its
//! startup: from the spawn until its first `tasks/get` is answered), then
//! driven by one sequential client: creates of `slow_compute` (an hour),
//! then `tasks/get`s of held tasks spread over the whole store.
//!
//! `cargo bench -p mcp-tasks-tests --bench growth` (up to 1,000,000
//! tasks: long, most of it filling the stores); `MCP_TASKS_BENCH_QUICK=1`
//! stops at 100,000; without `--bench` (`cargo test --benches`) it runs
//! tiny (100 and 1,000). `MCP_TASKS_BENCH_SERVERS=sqlite` or `postgres`
//! runs one store. Prints figures; asserts nothing about speed.

mod support;

use std::{sync::Arc, time::Instant};

use futures::{StreamExt as _, stream};
use mcp_tasks_runtime::store::{Store, TaskRecord, TaskStatus};
use serde_json::json;
use support::{
    Client, Server, Size, StoreArgs, open_store, p50_p99, pg, ratio, rss_kib, selected,
    start_server,
};

/// One level's figures.
struct Level {
    held: usize,
    startup_ms: f64,
    create: (f64, f64),
    get: (f64, f64),
    rss_mib: f64,
    /// CPU while idle, in % of one CPU: the server's, and on Postgres its
    /// backends' too (their scans for work run there).
    idle_pct: f64,
}

/// A task of `slow_compute` parked on a timer a day away, as the store
/// keeps one between its create and its wake.
fn parked(n: usize, now_ms: i64) -> TaskRecord {
    let mut t = TaskRecord::new(format!("held{n:08}"), "slow_compute", now_ms);
    t.arguments.insert("seconds".into(), json!(86_400));
    t.arguments.insert("label".into(), json!("held"));
    t.status = TaskStatus::Working;
    t.wake_at_ms = Some(now_ms + 86_400_000);
    t.ttl_ms = Some(2 * 86_400_000);
    t
}

/// Writes tasks `from..to` into `store`, 16 at a time.
async fn fill(store: Arc<dyn Store>, from: usize, to: usize) {
    let now_ms = support::unix_ms();
    stream::iter(from..to)
        .map(|n| {
            let store = store.clone();
            async move { store.create(parked(n, now_ms)).await.expect("a held task") }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
}

/// Starts the server on `store`; returns it and how long it took to answer
/// its first `tasks/get`.
async fn start(store: &StoreArgs) -> (Server, f64) {
    let began = Instant::now();
    let server = start_server(support::bin("conformance"), store, &[], None);
    let client = Client::new(&server.url);
    client
        .send(
            "tasks/get",
            json!({"taskId": "held00000000"}),
            "held00000000",
        )
        .await;
    (server, began.elapsed().as_secs_f64() * 1e3)
}

/// The CPU the server (and, on Postgres, its backends) takes over 5 s with
/// no requests, in % of one CPU: what holding the tasks costs by itself,
/// its scans for work (once a second) above all.
async fn idle_cpu(server: &Server, store: &StoreArgs) -> f64 {
    const IDLE: std::time::Duration = std::time::Duration::from_secs(5);
    let backends = match store {
        StoreArgs::Postgres { url, schema } => Some(pg::Backends {
            client: pg::connect(url).await.expect("connect to Postgres"),
            application_name: schema.clone(),
        }),
        _ => None,
    };
    let db_before = match &backends {
        Some(b) => b.sample().await,
        None => Vec::new(),
    };
    let before = support::cpu_time(server.pid());
    tokio::time::sleep(IDLE).await;
    let used = support::cpu_time(server.pid()).saturating_sub(before)
        + match &backends {
            Some(b) => pg::backend_cpu(&db_before, &b.sample().await),
            None => std::time::Duration::ZERO,
        };
    used.as_secs_f64() / IDLE.as_secs_f64() * 100.0
}

/// Measures one level on a server started on `store` holding `held` tasks.
async fn measure(store: &StoreArgs, held: usize, creates: usize, gets: usize) -> Level {
    let (server, startup_ms) = start(store).await;
    let client = Client::new(&server.url);
    for _ in 0..10 {
        client.create().await;
    }
    let mut lat = Vec::with_capacity(creates);
    for _ in 0..creates {
        let s = Instant::now();
        client.create().await;
        lat.push(s.elapsed());
    }
    let create = p50_p99(&mut lat);
    let mut lat = Vec::with_capacity(gets);
    for i in 0..gets {
        // Spread over the whole store: a stride prime to any level.
        let id = format!("held{:08}", (i * 7_919) % held);
        let s = Instant::now();
        let body = client.send("tasks/get", json!({"taskId": id}), &id).await;
        lat.push(s.elapsed());
        assert_eq!(body["result"]["status"], "working", "{body}");
    }
    let get = p50_p99(&mut lat);
    let rss_mib = rss_kib(server.pid()) as f64 / 1024.0;
    let idle_pct = idle_cpu(&server, store).await;
    drop(server);
    Level {
        held,
        startup_ms,
        create,
        get,
        rss_mib,
        idle_pct,
    }
}

/// Brings the rows just written to the state of rows held a while, as the
/// database's own upkeep would: on Postgres, a `VACUUM (ANALYZE)` of the
/// tables (visibility and statistics, which autovacuum sets some time after
/// a burst of inserts) and a `CHECKPOINT` (the burst's pages written out).
/// Measured without it, the level right after 900,000 inserts measures the
/// upkeep running beside the requests. SQLite needs none: the server
/// checkpoints its WAL itself and keeps no statistics.
async fn settle(store: &StoreArgs) {
    let StoreArgs::Postgres { url, schema } = store else {
        return;
    };
    let client = pg::connect(url).await.expect("connect to Postgres");
    for sql in [
        format!("VACUUM (ANALYZE) \"{schema}\".tasks"),
        format!("VACUUM (ANALYZE) \"{schema}\".journal"),
        "CHECKPOINT".to_owned(),
    ] {
        client
            .batch_execute(&sql)
            .await
            .expect("the store's upkeep");
    }
}

/// Fills the store level by level and measures each level.
async fn run(name: &str, store: &StoreArgs, levels: &[usize], creates: usize, gets: usize) {
    let mut figures = Vec::new();
    let mut have = 0;
    for &held in levels {
        let began = Instant::now();
        let handle = open_store(store).await;
        fill(handle.clone(), have, held).await;
        drop(handle);
        let written = began.elapsed().as_secs_f64();
        let began = Instant::now();
        settle(store).await;
        println!(
            "{name}: {} tasks written in {written:.1} s, settled in {:.1} s; measuring at {held} held",
            held - have,
            began.elapsed().as_secs_f64()
        );
        have = held;
        figures.push(measure(store, held, creates, gets).await);
    }
    print_table(name, &figures);
}

fn print_table(name: &str, levels: &[Level]) {
    let Some(first) = levels.first() else { return };
    println!("\n[{name}]");
    println!(
        "| tasks held | startup | create p50 | create p99 | tasks/get p50 | tasks/get p99 | server RSS | CPU idle |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for l in levels {
        println!(
            "| {} | {:.0} ms{} | {:.3} ms{} | {:.3} ms | {:.3} ms | {:.3} ms{} | {:.1} MiB | {:.1}% |",
            l.held,
            l.startup_ms,
            ratio(l.startup_ms, first.startup_ms),
            l.create.0,
            ratio(l.create.0, first.create.0),
            l.create.1,
            l.get.0,
            l.get.1,
            ratio(l.get.1, first.get.1),
            l.rss_mib,
            l.idle_pct,
        );
    }
    if let Some(last) = levels.last() {
        println!(
            "from {} to {} held: tasks/get p99 {:.2}× (target ≤ 2×), create p50 {:.2}× (target ≤ 1.3×); \
             startup with {} parked {:.0} ms (target ≤ 2,000 ms)",
            first.held,
            last.held,
            last.get.1 / first.get.1,
            last.create.0 / first.create.0,
            last.held,
            last.startup_ms,
        );
    }
}

#[tokio::main]
async fn main() {
    let size = Size::from_args();
    let levels = size.task_levels();
    let creates = size.pick(20, 300, 1_000);
    let gets = size.pick(50, 2_000, 5_000);
    println!(
        "costs against tasks held, over HTTP on 127.0.0.1 ({} CPUs; {} processes; {size:?} run: \
         levels {levels:?}, {creates} sequential creates and {gets} sequential tasks/get per level)",
        support::cpus(),
        support::profile(),
    );
    if selected("sqlite") {
        let dir = tempfile::tempdir().unwrap();
        let store = StoreArgs::Sqlite(dir.path().join("growth.db"));
        run("SQLite FULL", &store, levels, creates, gets).await;
    }
    if selected("postgres")
        && let Some(url) = pg::server_or_skip().await
    {
        let schema = pg::Schema::new(&url);
        run("Postgres", &schema.store(), levels, creates, gets).await;
        drop(schema);
    }
}
