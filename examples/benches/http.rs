//! Over-the-wire figures for the conformance server (a separate release
//! process on 127.0.0.1), on SQLite (a temporary file, `synchronous=FULL`)
//! and on Postgres (a schema made for the run and dropped after it):
//! `tools/call` creating a durable task, and `tasks/get`, with latency seen
//! by a sequential client and the server's own CPU time per request (from
//! `/proc/<pid>/stat`), with few and with 10,000 tasks held. On Postgres it
//! also reads the CPU time of the database backends serving the server. Prints
//! figures; asserts nothing about speed.
//!
//! Run with `cargo bench -p mcp-tasks-examples --bench http`
//! (`MCP_TASKS_BENCH_QUICK=1` for a short run; `cargo test --benches` runs it
//! tiny). Postgres is `MCP_TASKS_POSTGRES_URL`, or
//! `postgres://postgres@127.0.0.1:5432/postgres`; when it cannot be reached,
//! that half prints why and is skipped.

mod support;

use std::time::Instant;

use pg::{Backends, backend_cpu};
use serde_json::json;
use support::{Client, Size, StoreArgs, cpu_time, percentile, pg, start_server};

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
    let server = start_server(env!("CARGO_BIN_EXE_conformance"), store, &[], None);
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
    let rss_kib: u64 = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0);
    println!(
        "  server RSS with {} tasks sleeping on durable timers: {:.1} MiB",
        ids.len() + 50,
        rss_kib as f64 / 1024.0
    );
    server.kill();
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
