//! Over-the-wire figures for the conformance server (a separate release
//! process on 127.0.0.1), on SQLite (a temporary file, `synchronous=FULL`)
//! and on Postgres (a schema made for the run and dropped after it):
//! `tools/call` creating a durable task, and `tasks/get`, with latency seen
//! by a sequential client and the server's own CPU time per request (from
//! `/proc/<pid>/stat`), with few and with 10,000 tasks held; and push: the
//! server's memory per open `subscriptions/listen` stream and its CPU per
//! `notifications/tasks`. On Postgres it
//! also reads the CPU time of the database backends serving the server. Prints
//! figures; asserts nothing about speed.
//!
//! Run with `cargo bench -p mcp-tasks-tests --bench http`
//! (`MCP_TASKS_BENCH_QUICK=1` for a short run; `cargo test --benches` runs it
//! tiny). Postgres is `MCP_TASKS_POSTGRES_URL`, or
//! `postgres://postgres@127.0.0.1:5432/postgres`; when it cannot be reached,
//! that half prints why and is skipped.

mod support;

use std::time::Instant;

use pg::{Backends, backend_cpu};
use serde_json::json;
use support::{Client, Listener, Size, StoreArgs, cpu_time, percentile, pg, rss_kib, start_server};

async fn measure(
    label: &str,
    n: usize,
    pid: u32,
    backends: Option<&Backends>,
    mut f: impl AsyncFnMut(usize),
) {
    let mut lat = Vec::with_capacity(n);
    let pg0 = match backends {
        Some(b) => b.sample().await,
        None => Vec::new(),
    };
    let cpu0 = cpu_time(pid);
    let t0 = Instant::now();
    for i in 0..n {
        let s = Instant::now();
        f(i).await;
        lat.push(s.elapsed());
    }
    let wall = t0.elapsed();
    let cpu = cpu_time(pid) - cpu0;
    let pg = match backends {
        Some(b) => format!(
            "  Postgres backends CPU {:>6.1} µs/request",
            backend_cpu(&pg0, &b.sample().await).as_secs_f64() * 1e6 / n as f64
        ),
        None => String::new(),
    };
    lat.sort();
    println!(
        "  {label:<34} n={n:<6} p50 {:>7.3} ms  p99 {:>7.3} ms  rate {:>6.0}/s  server CPU {:>6.1} µs/request{pg}",
        percentile(&lat, 0.5).as_secs_f64() * 1e3,
        percentile(&lat, 0.99).as_secs_f64() * 1e3,
        n as f64 / wall.as_secs_f64(),
        cpu.as_secs_f64() * 1e6 / n as f64,
    );
}

/// The requests, against a conformance server on `store`.
async fn run(size: Size, store: &StoreArgs, backends: Option<&Backends>) {
    let server = start_server(support::bin("conformance"), store, &[], None);
    let pid = server.pid();
    let client = Client::new(&server.url);
    let (n_create, n_get, held) =
        size.pick((20, 50, 100), (200, 500, 1_000), (2_000, 5_000, 10_000));

    // Warm up the connection and the server.
    for _ in 0..50 {
        client.create().await;
    }
    let mut ids = Vec::new();
    measure(
        "tools/call -> durable task",
        n_create,
        pid,
        backends,
        async |_| {
            ids.push(client.create().await);
        },
    )
    .await;
    measure(
        "server/discover (no store: baseline)",
        n_get,
        pid,
        backends,
        async |_| {
            client.send("server/discover", json!({}), "").await;
        },
    )
    .await;
    let probe = ids[0].clone();
    measure(
        "tasks/get, few tasks held",
        n_get,
        pid,
        backends,
        async |_| {
            client
                .send("tasks/get", json!({"taskId": probe}), &probe)
                .await;
        },
    )
    .await;
    while ids.len() < held {
        ids.push(client.create().await);
    }
    measure(
        &format!("tasks/get, {held} tasks held"),
        n_get,
        pid,
        backends,
        async |i| {
            let id = &ids[i % ids.len()];
            client.send("tasks/get", json!({"taskId": id}), id).await;
        },
    )
    .await;
    let rss_kib = rss_kib(pid);
    println!(
        "  server RSS with {} tasks sleeping on durable timers: {:.1} MiB",
        ids.len() + 50,
        rss_kib as f64 / 1024.0
    );
    listening(size, &client, pid).await;
    server.kill();
}

/// `subscriptions/listen`: the server's memory per open stream, and its CPU
/// per `notifications/tasks`, as the difference between a round heard by
/// many listeners and one heard by one (so the answer and the run, the same
/// in both, cancel out).
async fn listening(size: Size, client: &Client, pid: u32) {
    let (streams, rounds) = size.pick((10, 2), (100, 10), (500, 20));
    let parked = |client: &Client| {
        let client = client.clone();
        async move { client.parked().await }
    };
    // Memory: `streams` listeners on one parked task.
    let id = parked(client).await;
    let mut warm = Listener::open(client, &[&id]).await;
    warm.until("input_required").await;
    let rss0 = rss_kib(pid);
    let mut open = Vec::with_capacity(streams);
    for _ in 0..streams {
        let mut l = Listener::open(client, &[&id]).await;
        l.next().await;
        open.push(l);
    }
    let per_stream = (rss_kib(pid).saturating_sub(rss0)) as f64 / streams as f64;
    drop(open);
    drop(warm);
    println!(
        "  {:<34} {streams} open: server RSS {per_stream:>6.1} KiB per stream (its connection included)",
        "subscriptions/listen, memory"
    );

    // CPU: rounds heard by one listener, then by `streams`.
    let mut cpu = [std::time::Duration::ZERO; 2];
    let mut notified = [0usize; 2];
    for (slot, n) in [(0, 1), (1, streams)] {
        for _ in 0..rounds {
            let id = parked(client).await;
            let mut ls = Vec::with_capacity(n);
            for _ in 0..n {
                let mut l = Listener::open(client, &[&id]).await;
                l.until("input_required").await;
                ls.push(l);
            }
            let c0 = cpu_time(pid);
            client
                .send(
                    "tasks/update",
                    json!({"taskId": id, "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": true}}}}),
                    &id,
                )
                .await;
            for l in &mut ls {
                notified[slot] += l.until("completed").await;
            }
            cpu[slot] += cpu_time(pid) - c0;
        }
    }
    let extra = notified[1].saturating_sub(notified[0]).max(1);
    let per = cpu[1].saturating_sub(cpu[0]).as_secs_f64() * 1e6 / extra as f64;
    println!(
        "  {:<34} {rounds} answered tasks heard by 1 and by {streams}: server CPU {per:>6.1} µs per notification ({} vs {} notifications, {:.1} vs {:.1} ms)",
        "notifications/tasks, CPU",
        notified[0],
        notified[1],
        cpu[0].as_secs_f64() * 1e3,
        cpu[1].as_secs_f64() * 1e3,
    );
}

#[tokio::main]
async fn main() {
    let size = Size::from_args();
    println!(
        "mcp-tasks over HTTP on 127.0.0.1 (conformance server, sequential client, {} CPUs)",
        support::cpus()
    );

    println!("\n[SQLite, synchronous=FULL]");
    let dir = tempfile::tempdir().unwrap();
    run(size, &StoreArgs::Sqlite(dir.path().join("bench.db")), None).await;

    println!();
    if let Some(url) = pg::server_or_skip().await {
        let schema = pg::Schema::new(&url);
        println!("[Postgres, schema {}]", schema.name());
        let backends = Backends {
            client: pg::connect(&url).await.expect("connect to Postgres"),
            application_name: schema.name().to_owned(),
        };
        run(size, &schema.store(), Some(&backends)).await;
        drop(backends);
        drop(schema);
    }
}
