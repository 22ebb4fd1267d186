//! Side by side: this project's server beside a baseline built only on the
//! official Rust SDK's own task support (rmcp's in-memory `TaskManager`),
//! both as separate release processes on 127.0.0.1, driven in turn by the
//! same load from this process (a Rust client: it is not the limit).
//!
//! - ours: the conformance example on SQLite (a temporary file, WAL,
//!   `synchronous=FULL`: every create is on disk before it is answered);
//! - baseline: `rmcp-task-server` (tasks in memory, lost with the process),
//!   with rmcp's HTTP transport configured as ours configures it.
//!
//! Both serve the same tool, `slow_compute` (a task that sleeps for an hour
//! here), over the same 2026-07-28 stateless requests. It prints, for each
//! server and as a ratio (ours / baseline; below 1 is better for latency,
//! CPU and memory, above 1 for rates): create latency and rates, server CPU
//! per create and per `tasks/get` (the time its threads ran, from
//! `/proc/<pid>/task/*/schedstat`), `tasks/get` throughput with many tasks held, memory
//! per held and per parked task, and this disk's own cost of a durable write
//! (an `fdatasync`), the floor under a durable create. Checkpoints/s are
//! ours alone: the baseline has no journal.
//!
//! It also times a durable create in the SQLite store alone
//! (`SqliteStore::create` from this process, no HTTP), and prints ours'
//! create p50 on SQLite FULL as the sum of ours' on memory (HTTP, protocol,
//! engine), that store create, and the rest. Ours runs with an admin
//! address (`--admin`); around the sequential creates it reads the SQLite
//! store's two histograms off `/metrics` and prints, from inside the
//! server, a store write's p50 as the engine waits for it, split into the
//! writer's commit and the thread hand-offs around it. Server CPU per create is
//! printed for the sequential and the 16-connection run apart, never
//! blended: one request at a time, a server goes idle between requests and
//! pays for waking up. It is the CPU of a create of a task that sleeps an
//! hour (the create and the park), not of a task's whole life: the `life`
//! bench measures short tasks from create to completion.
//!
//! `cargo bench -p mcp-tasks-tests --bench peer` (10,000 and 100,000
//! tasks held); `MCP_TASKS_BENCH_QUICK=1` for a short run; without
//! `--bench` (`cargo test --benches`) it runs tiny. Prints figures; asserts
//! nothing about speed.
//!
//! Two switches narrow a run while working on one path:
//! `MCP_TASKS_BENCH_SERVERS=json,full` runs only the servers whose column
//! name contains one of the comma-separated words (case-insensitive; keep
//! `json` for the ratios, which compare with the first column), and
//! `MCP_TASKS_BENCH_ONLY=create` measures only the two create phases (no
//! gets, held or parked tasks, or checkpoints).
//!
//! Every run, the tiny one CI runs included, prints a `per request` line
//! for each server: its CPU per create and per `tasks/get` from 16
//! connections, so that a regression in either shows in the log.

mod support;

use std::{
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use support::{
    Client, Profile, Server, Size, StoreArgs, fsync_floor, millis, p50_p99, percentile,
    process_cpu, rss_kib, scrape, selected, start_server,
};

/// One server's figures, by row.
#[derive(Debug, Default, Clone)]
struct Figures(Vec<(String, f64)>);

impl Figures {
    fn put(&mut self, row: &str, value: f64) {
        self.0.push((row.to_owned(), value));
    }

    fn get(&self, row: &str) -> Option<f64> {
        self.0.iter().find(|(r, _)| r == row).map(|(_, v)| *v)
    }
}

/// How a row reads: its unit, and whether more is better.
const ROWS: &[(&str, &str, bool)] = &[
    ("create p50", "ms", false),
    ("create p99", "ms", false),
    ("creates/s, sequential", "/s", true),
    ("creates/s, 16 connections", "/s", true),
    (
        "server CPU per create of an hour's sleep, sequential",
        "µs",
        false,
    ),
    (
        "server CPU per create of an hour's sleep, 16 connections",
        "µs",
        false,
    ),
    ("tasks/get p50", "ms", false),
    ("server CPU per tasks/get", "µs", false),
    ("tasks/get/s, 16 connections, HELD_1 held", "/s", true),
    ("tasks/get p99, 16 connections, HELD_1 held", "ms", false),
    ("server CPU per tasks/get, HELD_1 held", "µs", false),
    ("tasks/get/s, 16 connections, HELD_2 held", "/s", true),
    ("tasks/get p99, 16 connections, HELD_2 held", "ms", false),
    ("server CPU per tasks/get, HELD_2 held", "µs", false),
    ("memory per held task", "KiB", false),
    ("memory per parked task", "KiB", false),
    ("checkpoints/s (journaled)", "/s", true),
];

/// Which server, and how its tools are called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ours,
    Baseline,
}

impl Kind {
    /// A tool call that parks on a question, and its `Mcp-Name`.
    fn parking_call(self) -> (Value, &'static str) {
        match self {
            Self::Ours => (
                json!({"name": "confirm_delete", "arguments": {"filename": "bench"}}),
                "confirm_delete",
            ),
            Self::Baseline => (json!({"name": "ask_name", "arguments": {}}), "ask_name"),
        }
    }
}

/// The server being measured, for the names of its profiles.
static SERVER: std::sync::Mutex<&'static str> = std::sync::Mutex::new("server");

/// A `perf record` of the server during one phase, when `MCP_TASKS_PERF`
/// names a directory (see [`Profile`]), named after the server and the phase.
fn profile(pid: u32, phase: &str) -> Profile {
    let server = *SERVER.lock().unwrap();
    Profile::start(pid, &format!("{server}-{phase}"))
}

/// `n` requests from `connections` workers, each on a connection of its own;
/// `f(client, i)` makes request `i`. Returns the sorted latencies, the wall
/// time and the server's CPU time over the run (its threads' `schedstat`,
/// in nanoseconds: a tiny run's hundred requests are measured too, where
/// the 10 ms ticks of `/proc/<pid>/stat` would round them to nothing).
async fn load<F, Fut>(
    phase: &str,
    url: &str,
    pid: u32,
    n: usize,
    connections: usize,
    f: F,
) -> (Vec<Duration>, Duration, Duration)
where
    F: Fn(Client, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let f = Arc::new(f);
    let next = Arc::new(AtomicUsize::new(0));
    let perf = profile(pid, phase);
    let cpu0 = process_cpu(pid);
    let t0 = Instant::now();
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let (f, next, client) = (f.clone(), next.clone(), Client::new(url));
            tokio::spawn(async move {
                let mut lat = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return lat;
                    }
                    let s = Instant::now();
                    f(client.clone(), i).await;
                    lat.push(s.elapsed());
                }
            })
        })
        .collect();
    let mut lat = Vec::with_capacity(n);
    for w in workers {
        lat.extend(w.await.expect("a worker"));
    }
    let wall = t0.elapsed();
    let cpu = process_cpu(pid).saturating_sub(cpu0);
    drop(perf);
    lat.sort();
    (lat, wall, cpu)
}

/// Creates `n` tasks from 16 connections; returns their ids.
async fn hold(url: &str, n: usize) -> Vec<String> {
    let ids = Arc::new(std::sync::Mutex::new(Vec::with_capacity(n)));
    let sink = ids.clone();
    load("hold", url, 0, n, 16, move |c, _| {
        let sink = sink.clone();
        async move {
            let id = c.create().await;
            sink.lock().unwrap().push(id);
        }
    })
    .await;
    Arc::try_unwrap(ids).unwrap().into_inner().unwrap()
}

/// `tasks/get` over `ids`, from 16 connections: rate, p99 and CPU per get.
async fn gets(url: &str, pid: u32, ids: &Arc<Vec<String>>, n: usize) -> (f64, f64, f64) {
    let ids = ids.clone();
    let (lat, wall, cpu) = load("get-held", url, pid, n, 16, move |c, i| {
        let ids = ids.clone();
        async move {
            // A stride through the ids, so each get finds another task.
            let id = &ids[(i * 7919) % ids.len()];
            c.send("tasks/get", json!({"taskId": id}), id).await;
        }
    })
    .await;
    (
        n as f64 / wall.as_secs_f64(),
        millis(percentile(&lat, 0.99)),
        cpu.as_secs_f64() * 1e6 / n as f64,
    )
}

/// The sizes of a run: creates, gets, the two held counts, parked tasks,
/// and the checkpoint run (tasks × steps).
struct Plan {
    creates: usize,
    gets: usize,
    held: [usize; 2],
    parked: usize,
    steps: (usize, usize),
}

async fn measure(kind: Kind, server: &Server, plan: &Plan) -> Figures {
    let url = server.url.clone();
    let pid = server.pid();
    let client = Client::new(&url);
    let mut fig = Figures::default();

    // Warm up the connection and the server.
    for _ in 0..100 {
        client.create().await;
    }

    let admin = server.admin();
    let before = match &admin {
        Some(admin) => scrape(admin).await,
        None => String::new(),
    };
    let (lat, wall, cpu) = load("create", &url, pid, plan.creates, 1, |c, _| async move {
        c.create().await;
    })
    .await;
    if let Some(admin) = &admin {
        let after = scrape(admin).await;
        for (series, key) in [
            ("mcp_tasks_sqlite_write_seconds", SQLITE_WRITE),
            ("mcp_tasks_sqlite_commit_seconds", SQLITE_COMMIT),
        ] {
            let counts = Buckets::parse(&after, series).minus(&Buckets::parse(&before, series));
            if let Some(p50) = counts.p50() {
                fig.put(key, p50 * 1e3);
                fig.put(&format!("{key} count"), counts.total());
            }
        }
    }
    fig.put("create p50", millis(percentile(&lat, 0.5)));
    fig.put("create p99", millis(percentile(&lat, 0.99)));
    fig.put(
        "creates/s, sequential",
        plan.creates as f64 / wall.as_secs_f64(),
    );
    let cpu_seq = cpu.as_secs_f64() * 1e6 / plan.creates as f64;

    let n16 = plan.creates * 2;
    let (_, wall, cpu) = load("create-16", &url, pid, n16, 16, |c, _| async move {
        c.create().await;
    })
    .await;
    fig.put("creates/s, 16 connections", n16 as f64 / wall.as_secs_f64());
    // CPU per create in each run, never blended: one at a time, a server
    // goes idle between requests and pays for waking up on each, while 16
    // connections share commits. The task sleeps an hour: this is its
    // create and its park, not its whole life (the `life` bench measures
    // tasks that complete).
    fig.put(
        "server CPU per create of an hour's sleep, sequential",
        cpu_seq,
    );
    fig.put(
        "server CPU per create of an hour's sleep, 16 connections",
        cpu.as_secs_f64() * 1e6 / n16 as f64,
    );
    if creates_only() {
        return fig;
    }

    let probe = client.create().await;
    let (lat, _, cpu) = load("get", &url, pid, plan.gets, 1, move |c, _| {
        let probe = probe.clone();
        async move {
            c.send("tasks/get", json!({"taskId": probe}), &probe).await;
        }
    })
    .await;
    fig.put("tasks/get p50", millis(percentile(&lat, 0.5)));
    fig.put(
        "server CPU per tasks/get",
        cpu.as_secs_f64() * 1e6 / plan.gets as f64,
    );

    // Tasks held: memory per task over the first batch, then gets across
    // all of them, at each size.
    let rss0 = rss_kib(pid);
    let mut ids = hold(&url, plan.held[0]).await;
    let per_held = rss_kib(pid).saturating_sub(rss0) as f64 / plan.held[0] as f64;
    fig.put("memory per held task", per_held);
    for (slot, &held) in plan.held.iter().enumerate() {
        if ids.len() < held {
            ids.extend(hold(&url, held - ids.len()).await);
        }
        let all = Arc::new(std::mem::take(&mut ids));
        let (rate, p99, cpu) = gets(&url, pid, &all, plan.gets * 2).await;
        let tag = if slot == 0 { "HELD_1" } else { "HELD_2" };
        fig.put(&format!("tasks/get/s, 16 connections, {tag} held"), rate);
        fig.put(&format!("tasks/get p99, 16 connections, {tag} held"), p99);
        fig.put(&format!("server CPU per tasks/get, {tag} held"), cpu);
        ids = Arc::try_unwrap(all).unwrap();
    }

    // Parked tasks: memory per task once they all wait on their question.
    let (call, name) = kind.parking_call();
    let rss0 = rss_kib(pid);
    let parked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = parked.clone();
    load("park", &url, 0, plan.parked, 16, move |c, _| {
        let (call, sink) = (call.clone(), sink.clone());
        async move {
            let body = c.send("tools/call", call, name).await;
            let id = body["result"]["taskId"]
                .as_str()
                .expect("a task")
                .to_owned();
            sink.lock().unwrap().push(id);
        }
    })
    .await;
    let parked = parked.lock().unwrap().clone();
    for id in parked.iter().rev().take(20) {
        wait_for(&client, id, "input_required").await;
    }
    let per_parked = rss_kib(pid).saturating_sub(rss0) as f64 / plan.parked as f64;
    fig.put("memory per parked task", per_parked);
    fig
}

/// `MCP_TASKS_BENCH_ONLY=create`: only the create phases run.
fn creates_only() -> bool {
    std::env::var("MCP_TASKS_BENCH_ONLY").is_ok_and(|v| v.trim().eq_ignore_ascii_case("create"))
}

/// Figures read off ours' `/metrics` over the sequential create run (not
/// rows of the table): p50 of a write to the SQLite store as the engine
/// waits for it, and of one commit of its writer thread, in ms.
const SQLITE_WRITE: &str = "inside: SQLite write p50";
const SQLITE_COMMIT: &str = "inside: SQLite commit p50";

/// A Prometheus histogram's cumulative bucket counts, by upper bound (s).
#[derive(Debug, Default)]
struct Buckets(Vec<(f64, f64)>);

impl Buckets {
    /// `name`'s buckets in Prometheus text (an unlabelled histogram).
    fn parse(text: &str, name: &str) -> Self {
        let prefix = format!("{name}_bucket{{le=\"");
        Self(
            text.lines()
                .filter_map(|line| {
                    let (le, count) = line.strip_prefix(&prefix)?.split_once("\"} ")?;
                    let le = if le == "+Inf" {
                        f64::INFINITY
                    } else {
                        le.parse().ok()?
                    };
                    Some((le, count.trim().parse().ok()?))
                })
                .collect(),
        )
    }

    /// The counts of `self` less those of `earlier` (the same series read
    /// before): what was recorded in between.
    fn minus(&self, earlier: &Self) -> Self {
        Self(
            self.0
                .iter()
                .map(|&(le, n)| {
                    let before = earlier
                        .0
                        .iter()
                        .find(|(l, _)| *l == le)
                        .map_or(0.0, |b| b.1);
                    (le, n - before)
                })
                .collect(),
        )
    }

    fn total(&self) -> f64 {
        self.0.last().map_or(0.0, |b| b.1)
    }

    /// The median, interpolated linearly inside the bucket that holds it
    /// (as Prometheus's `histogram_quantile` does); `None` when empty.
    fn p50(&self) -> Option<f64> {
        let half = self.total() / 2.0;
        if half <= 0.0 {
            return None;
        }
        let mut low = (0.0, 0.0);
        for &(le, n) in &self.0 {
            if n >= half {
                if !le.is_finite() {
                    return Some(low.0);
                }
                let share = if n > low.1 {
                    (half - low.1) / (n - low.1)
                } else {
                    1.0
                };
                return Some(low.0 + (le - low.0) * share);
            }
            low = (le, n);
        }
        None
    }
}

/// Polls task `id` until it has `status`.
async fn wait_for(client: &Client, id: &str, status: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let body = client.send("tasks/get", json!({"taskId": id}), id).await;
        if body["result"]["status"] == status {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{id} never reached {status}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Journaled checkpoints per second: `tasks` tasks of `steps` checkpoints
/// each, all at once, on the fleet fixture (its effects go to /dev/null),
/// started with `args` on `store`.
async fn checkpoints(store: &StoreArgs, args: &[&str], (tasks, steps): (usize, usize)) -> f64 {
    let server = start_server(
        support::bin("fleet-fixture"),
        store,
        args,
        Some(Path::new("/dev/null")),
    );
    let client = Client::new(&server.url);
    let t0 = Instant::now();
    let mut ids = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let body = client
            .send(
                "tools/call",
                json!({"name": "steps", "arguments": {"tag": format!("t{i}"), "steps": steps, "step_ms": 0}}),
                "steps",
            )
            .await;
        ids.push(
            body["result"]["taskId"]
                .as_str()
                .expect("a task")
                .to_owned(),
        );
    }
    for id in &ids {
        wait_for(&client, id, "completed").await;
    }
    (tasks * steps) as f64 / t0.elapsed().as_secs_f64()
}

/// A durable create in the SQLite store alone: `SqliteStore::create`
/// (`synchronous=FULL`, as the server's default) of a record like the
/// server's (arguments, claimed by an instance, an hour's TTL), awaited one
/// at a time from this process, with no HTTP, protocol or engine around it;
/// after each, the task is put to sleep as its run does (untimed), so the
/// file sees the server's pattern of writes. Returns the create's p50 and
/// p99. With ours' memory column (HTTP, protocol and engine, no disk), it
/// splits ours' create p50 on SQLite FULL into what each part costs.
async fn store_floor(dir: &Path, n: usize) -> (f64, f64) {
    use mcp_tasks_runtime::store::{SqliteStore, Store as _, TaskRecord, Transition};
    let store = SqliteStore::open(dir.join("store-floor.db"))
        .await
        .expect("a SQLite store");
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    };
    let mut lat = Vec::with_capacity(n);
    for i in 0..n + 100 {
        let t = now();
        let mut record = TaskRecord::new(format!("{:032x}", rand_id(i)), "slow_compute", t);
        record.arguments = json!({"seconds": 3600, "label": "bench"})
            .as_object()
            .cloned()
            .unwrap_or_default();
        record.ttl_ms = Some(3_600_000);
        record.claim("bench-instance", t, t + 30_000);
        let (id, fence) = (record.id.clone(), record.fence);
        let s = Instant::now();
        store.create(record).await.expect("a create");
        if i >= 100 {
            lat.push(s.elapsed());
        }
        let sleep = Transition::Sleep {
            wake_at_ms: t + 3_600_000,
        };
        store
            .transition(&id, sleep, t, Some(fence))
            .await
            .expect("a sleep");
    }
    p50_p99(&mut lat)
}

/// A task id for [`store_floor`]: spread over the key space, as random ids are.
fn rand_id(i: usize) -> u128 {
    (i as u128 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)
}

/// The last term of a sum that accounts for a p50: `+ the rest, 0.027 ms`
/// (or `-` when the parts named add up to more than the whole).
fn and_the_rest(rest: f64) -> String {
    let sign = if rest < 0.0 { '-' } else { '+' };
    format!("{sign} the rest, {:.3} ms", rest.abs())
}

/// One line per server, printed in every run (the tiny one CI runs too, on
/// debug builds), so that a regression in what one request costs the
/// server shows in the log: its CPU per create and per `tasks/get`, both
/// from 16 connections.
fn per_request(name: &str, plan: &Plan, figures: &Figures) {
    let us = |row: &str| {
        figures
            .get(row)
            .map_or("—".to_owned(), |v| format!("{v:.0} µs"))
    };
    println!(
        "per request, {name} ({} build): server CPU per create {}, per tasks/get {} \
         (16 connections; the gets with {} tasks held)",
        support::profile(),
        us("server CPU per create of an hour's sleep, 16 connections"),
        us("server CPU per tasks/get, HELD_1 held"),
        plan.held[0],
    );
}

/// One server of the run: its name in the table, and its figures.
struct Column {
    name: &'static str,
    figures: Figures,
}

/// The table: a column per server, then each of ours against the first
/// baseline (rmcp configured as ours configures it).
fn print_table(plan: &Plan, columns: &[Column]) {
    let fmt = |v: Option<f64>, unit: &str| match v {
        None => "—".to_owned(),
        Some(v) if unit == "ms" => format!("{v:.3} ms"),
        Some(v) if unit == "KiB" => format!("{v:.2} KiB"),
        Some(v) if unit == "/s" => format!("{v:.0}/s"),
        Some(v) => format!("{v:.0} {unit}"),
    };
    let Some(baseline) = columns.first() else {
        println!("\nno server matched MCP_TASKS_BENCH_SERVERS");
        return;
    };
    let ours: Vec<&Column> = columns
        .iter()
        .filter(|c| c.name.starts_with("ours"))
        .collect();
    let mut header = "| metric |".to_owned();
    let mut rule = "|---|".to_owned();
    for c in columns {
        header += &format!(" {} |", c.name);
        rule += "---:|";
    }
    for c in &ours {
        header += &format!(" {} / {} |", c.name, baseline.name);
        rule += "---:|";
    }
    println!("\n{header}\n{rule}");
    for &(row, unit, more_is_better) in ROWS {
        let label = row
            .replace("HELD_1", &plan.held[0].to_string())
            .replace("HELD_2", &plan.held[1].to_string());
        let mut line = format!("| {label} |");
        for c in columns {
            line += &format!(" {} |", fmt(c.figures.get(row), unit));
        }
        for c in &ours {
            let ratio = match (c.figures.get(row), baseline.figures.get(row)) {
                (Some(o), Some(b)) if b > 0.0 => {
                    let r = o / b;
                    let better = if more_is_better { r >= 1.0 } else { r <= 1.0 };
                    format!("{r:.2}× ({})", if better { "better" } else { "worse" })
                }
                _ => "—".to_owned(),
            };
            line += &format!(" {ratio} |");
        }
        println!("{line}");
    }
}

#[tokio::main]
async fn main() {
    let size = Size::from_args();
    let plan = size.pick(
        Plan {
            creates: 50,
            gets: 100,
            held: [200, 400],
            parked: 50,
            steps: (10, 10),
        },
        Plan {
            creates: 500,
            gets: 2_000,
            held: [5_000, 20_000],
            parked: 2_000,
            steps: (100, 40),
        },
        Plan {
            creates: 2_000,
            gets: 10_000,
            held: [10_000, 100_000],
            parked: 10_000,
            steps: (500, 40),
        },
    );
    println!(
        "mcp-tasks beside rmcp's own task support, over HTTP on 127.0.0.1 ({} CPUs; {} processes; {size:?} run)",
        support::cpus(),
        support::profile()
    );
    let dir = tempfile::tempdir().unwrap();
    let fsync = fsync_floor(dir.path(), size.pick(20, 200, 1_000));
    let (f50, f99) = (fsync.p50, fsync.p99);
    println!(
        "this disk's durable write (4 KiB over written space + fdatasync): p50 {f50:.3} ms, p99 {f99:.3} ms"
    );
    let (s50, s99) = store_floor(dir.path(), size.pick(20, 500, 2_000)).await;
    println!(
        "a durable create in the SQLite store alone (SqliteStore::create, FULL, no HTTP): p50 {s50:.3} ms, p99 {s99:.3} ms"
    );

    let rmcp = support::bin("rmcp-task-server");
    let conformance = support::bin("conformance");
    let file = |name: &str| StoreArgs::Sqlite(dir.path().join(name));
    // (column, binary, store, arguments, which tools)
    let servers: [(&'static str, &str, StoreArgs, &[&str], Kind); 5] = [
        ("rmcp (JSON)", rmcp, StoreArgs::Memory, &[], Kind::Baseline),
        (
            "rmcp (SSE)",
            rmcp,
            StoreArgs::Memory,
            &["--sse"],
            Kind::Baseline,
        ),
        (
            "ours: memory",
            conformance,
            StoreArgs::Memory,
            &["--store", "memory"],
            Kind::Ours,
        ),
        (
            "ours: SQLite NORMAL",
            conformance,
            file("normal.db"),
            &["--sqlite-sync", "normal"],
            Kind::Ours,
        ),
        (
            "ours: SQLite FULL",
            conformance,
            file("full.db"),
            &[],
            Kind::Ours,
        ),
    ];
    let mut columns = Vec::new();
    for (name, bin, store, args, kind) in servers {
        if !selected(name) {
            continue;
        }
        println!("{name}: {bin} {args:?} {store:?}");
        let server = match kind {
            Kind::Ours => {
                let mut args = args.to_vec();
                args.extend(["--admin", "127.0.0.1:0"]);
                start_server(bin, &store, &args, None)
            }
            Kind::Baseline => Server::start(bin, &store, args, None, Duration::from_secs(30)),
        };
        *SERVER.lock().unwrap() = name;
        let mut figures = measure(kind, &server, &plan).await;
        drop(server);
        per_request(name, &plan, &figures);
        if kind == Kind::Ours && !creates_only() {
            let steps = match &store {
                StoreArgs::Sqlite(path) => StoreArgs::Sqlite(path.with_extension("steps.db")),
                other => other.clone(),
            };
            let extra: &[&str] = args;
            figures.put(
                "checkpoints/s (journaled)",
                checkpoints(&steps, extra, plan.steps).await,
            );
        }
        columns.push(Column { name, figures });
    }

    print_table(&plan, &columns);
    let p50 = |name: &str| {
        columns
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.figures.get("create p50"))
    };
    if let Some(full) = p50("ours: SQLite FULL") {
        println!(
            "\nfloor: a durable create waits for at least one fdatasync ({f50:.3} ms p50 here); ours' create p50 on SQLite FULL is {:.2}× it",
            full / f50
        );
        if let Some(rmcp) = p50("rmcp (JSON)") {
            let target = 1.2 * rmcp;
            println!(
                "target: 1.2× rmcp's create p50 ({rmcp:.3} ms) = {target:.3} ms; rmcp's own create made durable by that one \
                 fdatasync would take at least {:.3} ms ({:.2}× its in-memory create), so a durable create within {target:.3} ms \
                 must do all its other work in {:.3} ms, {:.2}× rmcp's whole create in memory",
                rmcp + f50,
                (rmcp + f50) / rmcp,
                target - f50,
                (target - f50) / rmcp,
            );
        }
        if let Some(memory) = p50("ours: memory") {
            println!(
                "gap: ours' create p50 on SQLite FULL ({full:.3} ms) = ours on memory ({memory:.3} ms: HTTP, protocol, engine) \
                 + the store's durable create alone ({s50:.3} ms) {}",
                and_the_rest(full - memory - s50)
            );
        }
    }
    for column in columns.iter().filter(|c| c.name.starts_with("ours")) {
        let figures = &column.figures;
        let (Some(write), Some(commit)) = (figures.get(SQLITE_WRITE), figures.get(SQLITE_COMMIT))
        else {
            continue;
        };
        let count = |key: &str| figures.get(&format!("{key} count")).unwrap_or(0.0);
        println!(
            "inside {} over the sequential creates (its /metrics, p50s interpolated in buckets): \
             a write to the store {write:.3} ms as the engine waits for it = the writer's commit {commit:.3} ms \
             + waiting for the writer thread and the hand-back {:.3} ms ({:.0} writes in {:.0} commits)",
            column.name,
            write - commit,
            count(SQLITE_WRITE),
            count(SQLITE_COMMIT),
        );
        if let (Some(create), Some(memory)) = (figures.get("create p50"), p50("ours: memory")) {
            println!(
                "  so its create p50 ({create:.3} ms) = ours on memory ({memory:.3} ms) + that write ({write:.3} ms) {}",
                and_the_rest(create - memory - write)
            );
        }
    }
}
