//! The whole life of a short task, beside the official Rust SDK's own task
//! support: each task is created, works for 50 ms, and completes; the
//! figures cover it all, from the create until every task has completed.
//!
//! Two workloads, each task doing one thing for 50 ms and returning:
//! - `step`: one 50 ms journaled step (`checkpoint`), on the fleet
//!   fixture's `steps` tool (`steps: 1, step_ms: 50`);
//! - `sleep`: one 50 ms durable sleep (`durable::sleep`), on the conformance
//!   example's `slow_compute` (`seconds: 0.05`). A sleep this short waits in
//!   its run, its deadline journaled first; `MCP_TASKS_BENCH_PARK_SLEEPS=1`
//!   starts ours with `--sleep-in-process 0s`, so that the sleep parks the
//!   task (a timer in the store), as a sleep longer than a second does.
//!
//! The baseline, `rmcp-task-server` (rmcp's `TaskManager`, tasks in memory),
//! runs its `slow_compute` (`seconds: 0.05`, an in-memory sleep) for both:
//! in memory a 50 ms step and a 50 ms sleep are the same work.
//!
//! Each server is a release process on 127.0.0.1, started afresh for each
//! workload, driven in turn by the same load from this process. Per workload
//! and server, two phases, shown apart:
//! - sequential: creates one after another over one connection, each sent
//!   when the previous one was answered, so earlier tasks still run while
//!   later ones are created;
//! - 16 connections: the same creates from 16 connections at once.
//!
//! A phase's server CPU (user + system time from `/proc/<pid>/stat`) runs
//! from its first create until every task it created has completed (it
//! polls the last ones created until they have, then checks them all), and
//! is divided by the tasks created. On Postgres it also prints the
//! database's CPU for the same phase: the sum over the Postgres backend
//! processes serving the server (found in `pg_stat_activity` by the
//! schema's `application_name`) of their user + system time from procfs.
//! The row "server + database CPU" adds it; for the other columns, which
//! have no database server (SQLite runs in the server's process), it is
//! the server's CPU alone. Ours runs with an admin address (`--admin`), as
//! a production server would, and the table counts, off its `/metrics`,
//! the SQLite store's writes and commits per task and the steps replayed.
//!
//! The floors, measured in the same run: this disk's durable write (4 KiB
//! over written space, then `fdatasync`, in the directory the SQLite files
//! are in), and one commit round trip to the same Postgres database (an
//! `INSERT` in its own transaction, from this process over TCP), with the
//! CPU it takes the database's backend and this process. The targets are
//! printed beside the least CPU those floors allow: rmcp's, plus a flush
//! per SQLite commit the store made, or plus three Postgres commits a task
//! (its create; its step's value or its sleep's wake-up time; its end).
//!
//! `cargo bench -p mcp-tasks-tests --bench life`; `MCP_TASKS_BENCH_QUICK=1`
//! for a short run; without `--bench` (`cargo test --benches`) it runs tiny.
//! `MCP_TASKS_BENCH_SERVERS=rmcp,full` runs only the servers whose column
//! name contains one of the words (keep `rmcp`: the ratios compare with it).
//! `MCP_TASKS_PERF=DIR` records each phase of each server with `perf record`
//! into `DIR/life-PID-WORKLOAD-CONNECTIONS.data`.
//! Prints figures; asserts nothing about speed.

mod support;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use support::{
    Client, Profile, Server, Size, StoreArgs, cpu_time, fsync_floor, millis, p50_p99, percentile,
    pg, process_cpu, scrape, selected, start_server,
};

/// What each task does for 50 ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    Step,
    Sleep,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Self::Step => "one 50 ms step",
            Self::Sleep => "one 50 ms durable sleep",
        }
    }
}

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rmcp,
    Ours,
}

/// The `tools/call` that creates one task of `workload` on `kind`, and its
/// `Mcp-Name`.
fn call(kind: Kind, workload: Workload) -> (Value, &'static str) {
    match (kind, workload) {
        (Kind::Ours, Workload::Step) => (
            json!({"name": "steps", "arguments": {"tag": "life", "steps": 1, "step_ms": 50}}),
            "steps",
        ),
        _ => (
            json!({"name": "slow_compute", "arguments": {"seconds": 0.05, "label": "life"}}),
            "slow_compute",
        ),
    }
}

/// Creates one task; its id.
async fn create(client: &Client, kind: Kind, workload: Workload) -> String {
    let (params, name) = call(kind, workload);
    let body = client.send("tools/call", params, name).await;
    body["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {body}"))
        .to_owned()
}

/// The task's status.
async fn status(client: &Client, id: &str) -> String {
    let body = client.send("tasks/get", json!({"taskId": id}), id).await;
    body["result"]["status"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Polls `id` every 10 ms until it has completed.
async fn until_completed(client: &Client, id: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut polls = 0;
    loop {
        polls += 1;
        let now = status(client, id).await;
        if now == "completed" {
            return polls;
        }
        assert!(
            !["failed", "cancelled"].contains(&now.as_str()),
            "{id} ended {now}"
        );
        assert!(Instant::now() < deadline, "{id} never completed: {now}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The CPU a phase cost the database: its backends' user + system time.
struct Database<'a> {
    backends: &'a pg::Backends,
    before: Vec<(u32, Duration)>,
}

impl<'a> Database<'a> {
    async fn start(backends: &'a pg::Backends) -> Self {
        Self {
            backends,
            before: backends.sample().await,
        }
    }

    async fn used(&self) -> Duration {
        pg::backend_cpu(&self.before, &self.backends.sample().await)
    }
}

/// One phase's figures.
#[derive(Debug, Clone, Copy, Default)]
struct Phase {
    p50_ms: f64,
    p99_ms: f64,
    creates_per_s: f64,
    /// Server CPU per task, µs, over the whole life.
    cpu_us: f64,
    /// The database's CPU per task, µs (Postgres only).
    db_us: Option<f64>,
    /// `tasks/get`s made inside the CPU window to see the tasks completed.
    polls: usize,
    /// Per task, off ours' `/metrics` over the phase: writes to the SQLite
    /// store, the writer's commits, and steps replayed.
    writes: Option<f64>,
    commits: Option<f64>,
    replays: Option<f64>,
}

/// `n` tasks of `workload` created from `connections` connections; CPU until
/// all have completed.
async fn phase(
    server: &Server,
    kind: Kind,
    workload: Workload,
    n: usize,
    connections: usize,
    db: Option<&pg::Backends>,
) -> Phase {
    let pid = server.pid();
    let admin = server.admin();
    let before = match &admin {
        Some(admin) => scrape(admin).await,
        None => String::new(),
    };
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(std::sync::Mutex::new(Vec::with_capacity(n)));
    let database = match db {
        Some(b) => Some(Database::start(b).await),
        None => None,
    };
    let profile = Profile::start(pid, &format!("life-{pid}-{workload:?}-{connections}"));
    let cpu0 = cpu_time(pid);
    let t0 = Instant::now();
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let (next, done, client) = (next.clone(), done.clone(), Client::new(&server.url));
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while next.fetch_add(1, Ordering::Relaxed) < n {
                    let s = Instant::now();
                    let id = create(&client, kind, workload).await;
                    lat.push(s.elapsed());
                    done.lock().unwrap().push(id);
                }
                lat
            })
        })
        .collect();
    let mut lat = Vec::with_capacity(n);
    for w in workers {
        lat.extend(w.await.expect("a worker"));
    }
    let wall = t0.elapsed();
    // The ids in the order their creates were answered: the last ones
    // created are the last to complete (each works 50 ms).
    let ids = Arc::try_unwrap(done).unwrap().into_inner().unwrap();
    let client = Client::new(&server.url);
    let mut polls = 0;
    for id in ids.iter().rev().take(connections) {
        polls += until_completed(&client, id).await;
    }
    let mut cpu = cpu_time(pid) - cpu0;
    let mut db_cpu = match &database {
        Some(d) => Some(d.used().await),
        None => None,
    };
    // Then every task, outside the window: if one had not completed yet,
    // the window runs until it has.
    let mut late = false;
    for id in &ids {
        if status(&client, id).await != "completed" {
            late = true;
            until_completed(&client, id).await;
        }
    }
    if late {
        polls += ids.len();
        cpu = cpu_time(pid) - cpu0;
        if let Some(d) = &database {
            db_cpu = Some(d.used().await);
        }
    }
    drop(profile);
    lat.sort();
    let per = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
    let after = match &admin {
        Some(admin) => scrape(admin).await,
        None => String::new(),
    };
    // Per task; the gets that checked the tasks write nothing.
    let count = |name: &str| {
        let n_after = counter(&after, name)?;
        Some((n_after - counter(&before, name).unwrap_or(0.0)) / n as f64)
    };
    Phase {
        writes: count("mcp_tasks_sqlite_write_seconds_count"),
        commits: count("mcp_tasks_sqlite_commit_seconds_count"),
        replays: count("mcp_tasks_replayed_steps_total").or(admin.as_ref().map(|_| 0.0)),
        p50_ms: millis(percentile(&lat, 0.5)),
        p99_ms: millis(percentile(&lat, 0.99)),
        creates_per_s: n as f64 / wall.as_secs_f64(),
        cpu_us: per(cpu),
        db_us: db_cpu.map(per),
        polls,
    }
}

/// The sum of the series named `name` (over its labels) in Prometheus text;
/// `None` when there is none.
fn counter(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let value = if rest.starts_with('{') {
                rest.rsplit_once("} ")?.1
            } else {
                rest.strip_prefix(' ')?
            };
            value.trim().parse::<f64>().ok()
        })
        .reduce(|a, b| a + b)
}

/// One server's figures for one workload.
#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    sequential: Phase,
    sixteen: Phase,
}

/// The sizes of a run.
#[derive(Debug, Clone, Copy)]
struct Plan {
    warmup: usize,
    sequential: usize,
    sixteen: usize,
}

async fn measure(
    server: &Server,
    kind: Kind,
    workload: Workload,
    plan: Plan,
    db: Option<&pg::Backends>,
) -> Figures {
    let client = Client::new(&server.url);
    let mut last = String::new();
    for _ in 0..plan.warmup {
        last = create(&client, kind, workload).await;
    }
    until_completed(&client, &last).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let sequential = phase(server, kind, workload, plan.sequential, 1, db).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let sixteen = phase(server, kind, workload, plan.sixteen, 16, db).await;
    Figures {
        sequential,
        sixteen,
    }
}

/// One commit round trip to the database: an `INSERT` of one row, a
/// statement in a transaction of its own, into a table of the run's schema.
struct CommitFloor {
    /// Latency, p50 and p99, ms.
    p50_ms: f64,
    p99_ms: f64,
    /// The CPU one commit took the database's backend, and this process
    /// (the driver's side), µs, off their threads' `schedstat`.
    db_us: f64,
    client_us: f64,
}

async fn commit_floor(url: &str, schema: &str, n: usize) -> CommitFloor {
    let client = pg::connect(url).await.expect("connect to Postgres");
    let table = format!("\"{schema}\".commit_probe");
    client
        .batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS \"{schema}\"; \
             CREATE TABLE {table} (id bigint, at timestamptz DEFAULT now())"
        ))
        .await
        .expect("a probe table");
    let insert = client
        .prepare(&format!("INSERT INTO {table} (id) VALUES ($1)"))
        .await
        .expect("an insert");
    let backend: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("the backend's pid")
        .get(0);
    let backend = u32::try_from(backend).expect("a pid");
    let me = std::process::id();
    let warmup = 20;
    let mut lat = Vec::with_capacity(n);
    let (mut db, mut mine) = (Duration::ZERO, Duration::ZERO);
    for i in 0..(n + warmup) as i64 {
        if i == warmup as i64 {
            (db, mine) = (process_cpu(backend), process_cpu(me));
        }
        let s = Instant::now();
        client.execute(&insert, &[&i]).await.expect("a commit");
        if i >= warmup as i64 {
            lat.push(s.elapsed());
        }
    }
    let per = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
    let (db_us, client_us) = (
        per(process_cpu(backend).saturating_sub(db)),
        per(process_cpu(me).saturating_sub(mine)),
    );
    let (p50_ms, p99_ms) = p50_p99(&mut lat);
    CommitFloor {
        p50_ms,
        p99_ms,
        db_us,
        client_us,
    }
}

/// A column of the table: a server, and its figures per workload.
struct Column {
    name: &'static str,
    figures: Vec<(Workload, Figures)>,
}

impl Column {
    fn get(&self, workload: Workload) -> Option<&Figures> {
        self.figures
            .iter()
            .find(|(w, _)| *w == workload)
            .map(|(_, f)| f)
    }
}

/// A row: its label, unit, whether more is better, and how it reads a phase.
type Row = (
    &'static str,
    &'static str,
    bool,
    fn(&Figures) -> Option<f64>,
);

const ROWS: &[Row] = &[
    ("create p50, sequential", "ms", false, |f| {
        Some(f.sequential.p50_ms)
    }),
    ("create p99, sequential", "ms", false, |f| {
        Some(f.sequential.p99_ms)
    }),
    ("creates/s, sequential", "/s", true, |f| {
        Some(f.sequential.creates_per_s)
    }),
    (
        "server CPU per task, whole life, sequential",
        "µs",
        false,
        |f| Some(f.sequential.cpu_us),
    ),
    (
        "server + database CPU per task, whole life, sequential",
        "µs",
        false,
        |f| Some(f.sequential.cpu_us + f.sequential.db_us.unwrap_or(0.0)),
    ),
    ("store writes per task, sequential", "", false, |f| {
        f.sequential.writes
    }),
    ("store commits per task, sequential", "", false, |f| {
        f.sequential.commits
    }),
    ("steps replayed per task, sequential", "", false, |f| {
        f.sequential.replays
    }),
    ("create p50, 16 connections", "ms", false, |f| {
        Some(f.sixteen.p50_ms)
    }),
    ("create p99, 16 connections", "ms", false, |f| {
        Some(f.sixteen.p99_ms)
    }),
    ("creates/s, 16 connections", "/s", true, |f| {
        Some(f.sixteen.creates_per_s)
    }),
    (
        "server CPU per task, whole life, 16 connections",
        "µs",
        false,
        |f| Some(f.sixteen.cpu_us),
    ),
    (
        "server + database CPU per task, whole life, 16 connections",
        "µs",
        false,
        |f| Some(f.sixteen.cpu_us + f.sixteen.db_us.unwrap_or(0.0)),
    ),
    ("store writes per task, 16 connections", "", false, |f| {
        f.sixteen.writes
    }),
    ("store commits per task, 16 connections", "", false, |f| {
        f.sixteen.commits
    }),
];

fn print_table(workload: Workload, columns: &[Column]) {
    let Some(baseline) = columns.first() else {
        return;
    };
    let ours: Vec<&Column> = columns.iter().skip(1).collect();
    println!("\n[{}, then return]", workload.name());
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
    println!("{header}\n{rule}");
    for &(label, unit, more_is_better, read) in ROWS {
        let value = |c: &Column| c.get(workload).and_then(read);
        let mut line = format!("| {label} |");
        for c in columns {
            line += &match value(c) {
                None => " — |".to_owned(),
                Some(v) if unit == "ms" => format!(" {v:.3} ms |"),
                Some(v) if unit == "/s" => format!(" {v:.0}/s |"),
                Some(v) if unit.is_empty() => format!(" {v:.2} |"),
                Some(v) => format!(" {v:.0} {unit} |"),
            };
        }
        for c in &ours {
            line += &match (value(c), value(baseline)) {
                (Some(o), Some(b)) if b > 0.0 && !unit.is_empty() => {
                    let r = o / b;
                    let better = if more_is_better { r >= 1.0 } else { r <= 1.0 };
                    format!(" {r:.2}× ({}) |", if better { "better" } else { "worse" })
                }
                _ => " — |".to_owned(),
            };
        }
        println!("{line}");
    }
    let polls: Vec<String> = columns
        .iter()
        .filter_map(|c| {
            let f = c.get(workload)?;
            Some(format!(
                "{} {} / {}",
                c.name, f.sequential.polls, f.sixteen.polls
            ))
        })
        .collect();
    println!(
        "(tasks/get polls inside the CPU windows, sequential / 16 connections: {})",
        polls.join(", ")
    );
}

/// The targets, checked against this run's figures.
fn print_targets(columns: &[Column], fsync: support::Floor, commit: Option<&CommitFloor>) {
    let fsync_p50 = fsync.p50;
    let find = |name: &str| columns.iter().find(|c| c.name == name);
    let Some(rmcp) = find(RMCP) else {
        return;
    };
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    println!();
    for workload in [Workload::Step, Workload::Sleep] {
        let Some(base) = rmcp.get(workload) else {
            continue;
        };
        let base = base.sequential;
        if let Some(full) = find(SQLITE).and_then(|c| c.get(workload)) {
            let full = full.sequential;
            let cpu = full.cpu_us / base.cpu_us;
            let floor = base.p50_ms + fsync_p50;
            let p50 = full.p50_ms / floor;
            println!(
                "{} (SQLite FULL, sequential): CPU per task {:.0} µs = {cpu:.2}× rmcp's {:.0} µs (target ≤ 1.5×: {}); \
                 create p50 {:.3} ms = {p50:.2}× (rmcp's p50 {:.3} ms + fdatasync p50 {fsync_p50:.3} ms = {floor:.3} ms) \
                 (target ≤ 1.2×: {})",
                workload.name(),
                full.cpu_us,
                base.cpu_us,
                verdict(cpu <= 1.5),
                full.p50_ms,
                base.p50_ms,
                verdict(p50 <= 1.2),
            );
            // The CPU no durable store avoids: one flush per commit.
            let flush = fsync.cpu_us;
            if let Some(commits) = full.commits {
                let floor = base.cpu_us + commits * flush;
                println!(
                    "  its flushes alone: rmcp's {:.0} µs + {commits:.2} commits per task × {flush:.0} µs of CPU per \
                     durable write (write + fdatasync, measured above) = {floor:.0} µs = {:.2}× rmcp's; \
                     the rest of ours: {:.0} µs per task",
                    base.cpu_us,
                    floor / base.cpu_us,
                    (full.cpu_us - commits * flush).max(0.0),
                );
            }
        }
        if let (Some(pg), Some(floor)) = (find(POSTGRES).and_then(|c| c.get(workload)), commit) {
            let pg = pg.sequential;
            let commit = floor.p50_ms;
            let total = pg.cpu_us + pg.db_us.unwrap_or(0.0);
            let cpu = total / base.cpu_us;
            let latency = base.p50_ms + commit;
            let p50 = pg.p50_ms / latency;
            println!(
                "{} (Postgres, sequential): CPU per task, ours {:.0} µs + the database's {:.0} µs = {cpu:.2}× rmcp's \
                 (target ≤ 3×: {}); create p50 {:.3} ms = {p50:.2}× (rmcp's p50 {:.3} ms + a commit round trip \
                 {commit:.3} ms = {latency:.3} ms) (target ≤ 1.2×: {})",
                workload.name(),
                pg.cpu_us,
                pg.db_us.unwrap_or(0.0),
                verdict(cpu <= 3.0),
                pg.p50_ms,
                base.p50_ms,
                verdict(p50 <= 1.2),
            );
            // The CPU no Postgres store avoids: a commit for each write a
            // task's life promises is durable before it goes on.
            let per_commit = floor.db_us + floor.client_us;
            let least = base.cpu_us + 3.0 * per_commit;
            println!(
                "  its commits alone (three: its create, answered once committed; {}, durable before the run goes \
                 on; its end): rmcp's {:.0} µs + 3 × ({:.0} µs of the database's + {:.0} µs of the client's CPU per \
                 commit, measured above) = {least:.0} µs = {:.2}× rmcp's",
                match workload {
                    Workload::Step => "its step's value",
                    Workload::Sleep => "its sleep's wake-up time",
                },
                base.cpu_us,
                floor.db_us,
                floor.client_us,
                least / base.cpu_us,
            );
        }
    }
}

const RMCP: &str = "rmcp (memory)";
const MEMORY: &str = "ours: memory";
const SQLITE: &str = "ours: SQLite FULL";
const POSTGRES: &str = "ours: Postgres";

#[tokio::main]
async fn main() {
    let size = Size::from_args();
    let plan = size.pick(
        Plan {
            warmup: 5,
            sequential: 20,
            sixteen: 32,
        },
        Plan {
            warmup: 100,
            sequential: 1_000,
            sixteen: 2_000,
        },
        Plan {
            warmup: 200,
            sequential: 3_000,
            sixteen: 6_000,
        },
    );
    println!(
        "a short task's whole life, beside rmcp's own task support, over HTTP on 127.0.0.1 ({} CPUs; \
         {} processes; {size:?} run: {} sequential creates, {} from 16 connections, per workload and server)",
        support::cpus(),
        support::profile(),
        plan.sequential,
        plan.sixteen,
    );
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average at the start: {}", load.trim());
    }
    // Ours parks every durable sleep, as a sleep over
    // `--sleep-in-process` (1 s by default) does.
    let park_sleeps =
        std::env::var("MCP_TASKS_BENCH_PARK_SLEEPS").is_ok_and(|v| !v.is_empty() && v != "0");
    if park_sleeps {
        println!(
            "ours parks every durable sleep (MCP_TASKS_BENCH_PARK_SLEEPS: --sleep-in-process 0s)"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let fsync = fsync_floor(dir.path(), size.pick(20, 500, 1_000));
    let (f50, f99) = (fsync.p50, fsync.p99);
    println!(
        "floor, this disk's durable write (4 KiB over written space + fdatasync): p50 {f50:.3} ms, p99 {f99:.3} ms, \
         {:.0} µs of CPU each",
        fsync.cpu_us
    );
    let postgres = if selected(POSTGRES) {
        pg::server_or_skip().await
    } else {
        None
    };
    let schema = postgres.as_deref().map(pg::Schema::new);
    let mut commit = None;
    let backends = match (&postgres, &schema) {
        (Some(url), Some(schema)) => {
            let floor = commit_floor(url, schema.name(), size.pick(20, 500, 1_000)).await;
            println!(
                "floor, one commit round trip to the same Postgres database (an INSERT in its own transaction): \
                 p50 {:.3} ms, p99 {:.3} ms; CPU per commit: the database's backend {:.0} µs, this client {:.0} µs",
                floor.p50_ms, floor.p99_ms, floor.db_us, floor.client_us,
            );
            commit = Some(floor);
            Some(pg::Backends {
                client: pg::connect(url).await.expect("connect to Postgres"),
                application_name: schema.name().to_owned(),
            })
        }
        _ => None,
    };

    let rmcp = support::bin("rmcp-task-server");
    let mut columns: Vec<Column> = Vec::new();
    let mut servers: Vec<(&'static str, Kind, StoreArgs, &[&str])> = vec![
        (RMCP, Kind::Rmcp, StoreArgs::Memory, &[]),
        (
            MEMORY,
            Kind::Ours,
            StoreArgs::Memory,
            &["--store", "memory"],
        ),
        (SQLITE, Kind::Ours, StoreArgs::Memory, &[]),
    ];
    if let Some(schema) = &schema {
        servers.push((POSTGRES, Kind::Ours, schema.store(), &[]));
    }
    for (name, kind, store, args) in servers {
        if !selected(name) {
            continue;
        }
        let mut column = Column {
            name,
            figures: Vec::new(),
        };
        for workload in [Workload::Step, Workload::Sleep] {
            let server = match kind {
                Kind::Rmcp => Server::start(rmcp, &store, args, None, Duration::from_secs(30)),
                Kind::Ours => {
                    let bin = match workload {
                        Workload::Step => support::bin("fleet-fixture"),
                        Workload::Sleep => support::bin("conformance"),
                    };
                    // SQLite: a fresh file per server (FULL, the default).
                    let store = if name == SQLITE {
                        StoreArgs::Sqlite(dir.path().join(format!("{workload:?}.db")))
                    } else {
                        store.clone()
                    };
                    // With an admin address, as a production server runs:
                    // its `/metrics` count the store's writes and commits.
                    let mut args = args.to_vec();
                    args.extend(["--admin", "127.0.0.1:0"]);
                    if park_sleeps {
                        args.extend(["--sleep-in-process", "0s"]);
                    }
                    start_server(bin, &store, &args, None)
                }
            };
            let db = if name == POSTGRES {
                backends.as_ref()
            } else {
                None
            };
            println!("{name}, {}: {}", workload.name(), server.line);
            let figures = measure(&server, kind, workload, plan, db).await;
            drop(server);
            column.figures.push((workload, figures));
        }
        columns.push(column);
    }
    for workload in [Workload::Step, Workload::Sleep] {
        print_table(workload, &columns);
    }
    print_targets(&columns, fsync, commit.as_ref());
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average at the end: {}", load.trim());
    }
    drop(backends);
    drop(schema);
}
