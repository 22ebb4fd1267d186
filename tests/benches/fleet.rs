//! Several instances on one store, as real processes on 127.0.0.1 (release
//! builds under `cargo bench`):
//!
//! - **takeover**: instance A (the test-only `fleet-fixture` server) runs a
//!   task of checkpoints on Postgres; A is killed with SIGKILL part way
//!   through; the figure is the time from the kill until instance B begins
//!   the task's next step (read from the fixture's effects file). Several
//!   rounds, each killing A at a different point of its lease renewals, with
//!   `--lease 2s --scan-interval 200ms`.
//! - **creates/s**: `tools/call` creating durable tasks on the conformance
//!   server from concurrent clients: one instance on SQLite (the baseline),
//!   one instance on Postgres, and two instances on one Postgres schema (the
//!   same clients spread over both). With the CPU time each side used per
//!   create: the servers, the Postgres backends serving them, and this
//!   client.
//!
//! Prints figures and ratios; asserts nothing about speed. Run with
//! `cargo bench -p mcp-tasks-tests --bench fleet` (`MCP_TASKS_BENCH_QUICK=1`
//! for a short run; `cargo test --benches` runs it tiny). Postgres is
//! `MCP_TASKS_POSTGRES_URL`, or `postgres://postgres@127.0.0.1:5432/postgres`,
//! with a schema per run, dropped after it; when it cannot be reached, the
//! Postgres runs print why and are skipped.

mod support;

use std::{
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::json;
use support::{Client, Server, Size, StoreArgs, cpu_time, ms, percentile, pg, start_server};

/// The takeover runs' lease and scan interval.
const LEASE: Duration = Duration::from_secs(2);
const SCAN: Duration = Duration::from_millis(200);
/// The takeover task: `STEPS` checkpoints of `STEP_MS` each.
const STEPS: u32 = 12;
const STEP_MS: u64 = 100;

// ---------------------------------------------------------------------------
// Takeover after SIGKILL.

/// An effect line of the fleet fixture: `begin|end <tag> <step> <instance>.<n>`.
struct Effect {
    kind: String,
    tag: String,
    instance: String,
}

fn effects(path: &Path) -> Vec<Effect> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (kind, tag, _step, nonce) = (w.next()?, w.next()?, w.next()?, w.next()?);
            Some(Effect {
                kind: kind.to_owned(),
                tag: tag.to_owned(),
                instance: nonce.split('.').next()?.to_owned(),
            })
        })
        .collect()
}

/// Polls the effects file every 2 ms until `done` holds; the time it took.
async fn wait_for(path: &Path, within: Duration, done: impl Fn(&[Effect]) -> bool) -> Duration {
    let start = Instant::now();
    loop {
        if done(&effects(path)) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "gave up after {within:?} waiting on {}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn fixture(store: &StoreArgs, name: &str, effects: &Path) -> Server {
    let lease = format!("{}ms", LEASE.as_millis());
    let scan = format!("{}ms", SCAN.as_millis());
    start_server(
        support::bin("fleet-fixture"),
        store,
        &[
            "--instance",
            name,
            "--lease",
            &lease,
            "--scan-interval",
            &scan,
        ],
        Some(effects),
    )
}

/// One round: A runs the task, is killed after `before_kill` finished steps;
/// returns the time until B began a step, and whether the task then completed
/// (finished by B).
async fn takeover_round(
    store: &StoreArgs,
    dir: &Path,
    round: usize,
    before_kill: usize,
) -> (Duration, bool) {
    let effects_file = dir.join(format!("effects-{round}.log"));
    let (a_name, b_name, tag) = (
        format!("a{round}"),
        format!("b{round}"),
        format!("t{round}"),
    );
    let a = fixture(store, &a_name, &effects_file);
    let b = fixture(store, &b_name, &effects_file);
    let on_a = Client::new(&a.url);
    let on_b = Client::new(&b.url);
    let body = on_a
        .send(
            "tools/call",
            json!({"name": "steps", "arguments": {"tag": tag, "steps": STEPS, "step_ms": STEP_MS}}),
            "steps",
        )
        .await;
    let id = body["result"]["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    wait_for(&effects_file, Duration::from_secs(30), |e| {
        e.iter()
            .filter(|e| e.kind == "end" && e.instance == a_name)
            .count()
            >= before_kill
    })
    .await;
    let killed = Instant::now();
    a.kill();
    wait_for(&effects_file, LEASE + SCAN + Duration::from_secs(30), |e| {
        e.iter()
            .any(|e| e.kind == "begin" && e.tag == tag && e.instance == b_name)
    })
    .await;
    let delay = killed.elapsed();
    // The task then completes on B.
    let deadline = Instant::now() + Duration::from_secs(30);
    let completed = loop {
        let got = on_b.send("tasks/get", json!({"taskId": id}), &id).await;
        let status = got["result"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if status == "completed" || Instant::now() > deadline {
            break status == "completed";
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    drop(b);
    (delay, completed)
}

async fn takeover(size: Size, url: &str) {
    let rounds = size.pick(1, 3, 8);
    println!(
        "\n[takeover after kill -9, Postgres: --lease {LEASE:?} --scan-interval {SCAN:?}, {rounds} rounds]"
    );
    let schema = pg::Schema::new(url);
    let store = schema.store();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut delays = Vec::new();
    let mut completed = 0;
    for round in 0..rounds {
        // Kill A after 2 to 8 finished steps of 100 ms: at different points
        // of its renewals (every third of the lease).
        let before_kill = 2 + round % 7;
        let (delay, done) = takeover_round(&store, dir.path(), round, before_kill).await;
        println!(
            "  round {round}: A killed after {before_kill} steps; B began the next step {}; task completed: {done}",
            ms(delay)
        );
        delays.push(delay);
        completed += usize::from(done);
    }
    delays.sort();
    let max = *delays.last().expect("a round");
    println!(
        "  takeover delay            p50 {}  min {}  max {}   (lease + scan = {}; aim: lease + 1 s = {}; max / (lease + scan) = {:.2}); {completed}/{rounds} tasks completed on B",
        ms(percentile(&delays, 0.5)),
        ms(delays[0]),
        ms(max),
        ms(LEASE + SCAN),
        ms(LEASE + Duration::from_secs(1)),
        max.as_secs_f64() / (LEASE + SCAN).as_secs_f64(),
    );
    println!(
        "  (a lease is renewed every third of it, so a dead instance's lease runs out 2/3 to 3/3 of a lease after the kill; a scan then finds it within a scan interval)"
    );
}

// ---------------------------------------------------------------------------
// Creates/s with one and with two instances.

/// What one creates/s run measured.
struct Rate {
    per_s: f64,
}

/// `n` creates from `concurrency` clients spread over the conformance
/// servers on `store` (`instances` of them).
async fn creates(
    label: &str,
    store: &StoreArgs,
    instances: usize,
    n: usize,
    concurrency: usize,
    backends: Option<&pg::Backends>,
) -> Rate {
    let servers: Vec<Server> = (0..instances)
        .map(|i| {
            let name = format!("i{i}");
            start_server(
                support::bin("conformance"),
                store,
                &["--instance", &name],
                None,
            )
        })
        .collect();
    let clients: Vec<Client> = servers.iter().map(|s| Client::new(&s.url)).collect();
    // Warm up every instance, with as many connections as it will get.
    let mut warm = Vec::new();
    for w in 0..concurrency {
        let client = clients[w % instances].clone();
        warm.push(tokio::spawn(async move {
            for _ in 0..10 {
                client.create().await;
            }
        }));
    }
    for w in warm {
        w.await.expect("warm-up");
    }

    let pids: Vec<u32> = servers.iter().map(Server::pid).collect();
    let server_cpu = || pids.iter().map(|p| cpu_time(*p)).sum::<Duration>();
    let pg0 = match backends {
        Some(b) => b.sample().await,
        None => Vec::new(),
    };
    let me = std::process::id();
    let (cpu0, me0) = (server_cpu(), cpu_time(me));
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|w| {
            let client = clients[w % instances].clone();
            let next = next.clone();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while next.fetch_add(1, Ordering::Relaxed) < n {
                    let t = Instant::now();
                    client.create().await;
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut lat = Vec::with_capacity(n);
    for w in workers {
        lat.extend(w.await.expect("a worker"));
    }
    let wall = start.elapsed();
    let (cpu, me_cpu) = (server_cpu() - cpu0, cpu_time(me) - me0);
    let pg_cpu = match backends {
        Some(b) => Some(pg::backend_cpu(&pg0, &b.sample().await)),
        None => None,
    };
    lat.sort();
    let per = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
    let per_s = n as f64 / wall.as_secs_f64();
    println!(
        "  {label:<34} {per_s:>7.0} creates/s  n={n} in {}  p50 {}  p99 {}",
        ms(wall),
        ms(percentile(&lat, 0.5)),
        ms(percentile(&lat, 0.99)),
    );
    println!(
        "  {:<34} CPU per create: servers {:.0} µs{}, client {:.0} µs",
        "",
        per(cpu),
        pg_cpu.map_or(String::new(), |c| format!(
            ", Postgres backends {:.0} µs",
            per(c)
        )),
        per(me_cpu),
    );
    drop(servers);
    Rate { per_s }
}

async fn create_rates(size: Size, url: Option<&str>) {
    let n = size.pick(40, 1_000, 5_000);
    let concurrency = 16;
    println!(
        "\n[creates/s: tools/call -> durable task, {concurrency} concurrent clients in all, spread over the instances]"
    );
    let dir = tempfile::tempdir().expect("a temporary directory");
    let sqlite = creates(
        "SQLite FULL, 1 instance",
        &StoreArgs::Sqlite(dir.path().join("bench.db")),
        1,
        n,
        concurrency,
        None,
    )
    .await;
    let Some(url) = url else {
        return;
    };
    let mut rates = Vec::new();
    for instances in [1, 2] {
        let schema = pg::Schema::new(url);
        let backends = pg::Backends {
            client: pg::connect(url).await.expect("connect to Postgres"),
            application_name: schema.name().to_owned(),
        };
        let label = format!(
            "Postgres, {instances} instance{}",
            if instances == 1 { "" } else { "s" }
        );
        rates.push(
            creates(
                &label,
                &schema.store(),
                instances,
                n,
                concurrency,
                Some(&backends),
            )
            .await,
        );
    }
    println!(
        "  ratios: Postgres 2 instances / 1 instance = {:.2}; Postgres 1 instance / SQLite 1 instance = {:.2}; Postgres 2 instances / SQLite 1 instance = {:.2}",
        rates[1].per_s / rates[0].per_s,
        rates[0].per_s / sqlite.per_s,
        rates[1].per_s / sqlite.per_s,
    );
}

#[tokio::main]
async fn main() {
    let size = Size::from_args();
    println!(
        "mcp-tasks fleet benchmarks: server processes on 127.0.0.1, {} CPUs (servers, Postgres and the client share them)",
        support::cpus()
    );
    let url = pg::server_or_skip().await;
    if let Some(url) = &url {
        takeover(size, url).await;
    }
    create_rates(size, url.as_deref()).await;
}
