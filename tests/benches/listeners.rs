//! How push costs grow with the listeners a server holds open: at each level
//! (100, 1,000 and 10,000 open `subscriptions/listen` streams; 10 and 100 in
//! a tiny run), on SQLite `FULL` and on Postgres, it prints the server's
//! memory per open listener and its CPU per `notifications/tasks` sent, with
//! each figure's ratio to the first level's.
//!
//! Each level starts the conformance example afresh, as a release process on
//! 127.0.0.1, on a fresh store. One client creates `confirm_delete` tasks
//! over HTTP, 16 at a time, which park `input_required`; then:
//!
//! - **memory**: it opens one listen stream (one connection each) on each of
//!   the level's idle tasks, and reads each stream's acknowledgement and
//!   first notification; the server's resident memory grows by the figure
//!   printed times the level;
//! - **CPU per notification**: with all those streams open, it answers `K`
//!   other tasks (`tasks/update`) one after the other, each followed by one
//!   listener until it hears `completed`; then `K` more, each followed by
//!   four. The server's CPU (from `/proc/<pid>/stat`) of the second round
//!   less the first's, over the notifications heard beyond the first's, is
//!   the cost of one notification; the first round's CPU per task (its
//!   answer, its run to the end, one listener's notifications) is printed
//!   too, to show whether idle listeners slow what the server does besides.
//!
//! `cargo bench -p mcp-tasks-tests --bench listeners`;
//! `MCP_TASKS_BENCH_QUICK=1` stops at 1,000; without `--bench`
//! (`cargo test --benches`) it runs tiny. `MCP_TASKS_BENCH_SERVERS=sqlite`
//! or `postgres` runs one store. A level that needs more open files than
//! this process may have (two per stream: one here, one in the server) is
//! skipped, saying so. Prints figures; asserts nothing about speed.

mod support;

use std::time::Duration;

use futures::{StreamExt as _, stream};
use serde_json::json;
use support::{Client, Listener, Server, Size, StoreArgs, cpu_time, pg, ratio, rss_kib, selected};

/// Listeners on each task of the second CPU round.
const FANOUT: usize = 4;

/// One level's figures.
struct Level {
    listeners: usize,
    kib_per_listener: f64,
    idle_cpu_ms_per_s: f64,
    us_per_task: f64,
    us_per_notification: f64,
    notified: (usize, usize),
}

/// Starts the conformance server on `store`, taking as many connections as
/// the level's streams need (a connection each), with room for the rest.
fn start(store: &StoreArgs, streams: usize) -> Server {
    let connections = (streams + 256).to_string();
    support::start_server(
        support::bin("conformance"),
        store,
        &["--max-connections", &connections],
        None,
    )
}

/// Creates `n` `confirm_delete` tasks, 16 at a time; returns their ids.
async fn parked(client: &Client, n: usize) -> Vec<String> {
    stream::iter(0..n)
        .map(|_| {
            let client = client.clone();
            async move { client.parked().await }
        })
        .buffer_unordered(16)
        .collect()
        .await
}

/// Opens a listener on each of `ids`, 32 at a time, each read until it has
/// heard its task `input_required`.
async fn listen(client: &Client, ids: &[String]) -> Vec<Listener> {
    stream::iter(ids)
        .map(|id| {
            let client = client.clone();
            async move {
                let mut l = Listener::open(&client, &[id]).await;
                l.until("input_required").await;
                l
            }
        })
        .buffer_unordered(32)
        .collect()
        .await
}

/// Answers each of `ids` in turn, and waits until each of its `per_task`
/// listeners has heard it `completed`. Returns the server's CPU time over
/// the round and the notifications heard.
async fn answer(client: &Client, pid: u32, ids: &[String], per_task: usize) -> (Duration, usize) {
    let mut heard = Vec::with_capacity(ids.len());
    for id in ids {
        heard.push(listen(client, &vec![id.clone(); per_task]).await);
    }
    let cpu0 = cpu_time(pid);
    let mut notified = 0;
    for (id, ls) in ids.iter().zip(&mut heard) {
        client
            .send(
                "tasks/update",
                json!({"taskId": id, "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": true}}}}),
                id,
            )
            .await;
        for l in ls {
            notified += l.until("completed").await;
        }
    }
    (cpu_time(pid) - cpu0, notified)
}

/// The most streams open at once at a level: its idle listeners, and the
/// second CPU round's.
fn streams(listeners: usize, rounds: usize) -> usize {
    listeners + rounds * FANOUT
}

/// How many files this process may have open.
fn open_file_limit() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|soft| soft.parse().ok())
        })
        .unwrap_or(1024)
}

/// Measures one level on a fresh server on `store`.
async fn measure(store: &StoreArgs, listeners: usize, rounds: usize) -> Level {
    let server = start(store, streams(listeners, rounds));
    let pid = server.pid();
    let client = Client::new(&server.url);
    let idle = parked(&client, listeners).await;
    let first = parked(&client, rounds).await;
    let second = parked(&client, rounds).await;

    let rss0 = rss_kib(pid);
    let open = listen(&client, &idle).await;
    let kib_per_listener = rss_kib(pid).saturating_sub(rss0) as f64 / listeners as f64;

    let idle0 = cpu_time(pid);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_cpu_ms_per_s = (cpu_time(pid) - idle0).as_secs_f64() * 1e3;

    let (cpu1, n1) = answer(&client, pid, &first, 1).await;
    let (cpu4, n4) = answer(&client, pid, &second, FANOUT).await;
    let extra = n4.saturating_sub(n1).max(1);
    drop(open);
    drop(server);
    Level {
        listeners,
        kib_per_listener,
        idle_cpu_ms_per_s,
        us_per_task: cpu1.as_secs_f64() * 1e6 / rounds as f64,
        us_per_notification: cpu4.saturating_sub(cpu1).as_secs_f64() * 1e6 / extra as f64,
        notified: (n1, n4),
    }
}

/// Measures each level, each on a store `store(level)` names.
async fn run(name: &str, levels: &[usize], rounds: usize, store: impl Fn(usize) -> StoreArgs) {
    let limit = open_file_limit();
    let mut figures = Vec::new();
    for &listeners in levels {
        // One descriptor a stream here, and a few hundred for the rest.
        if streams(listeners, rounds) + 256 > limit {
            println!(
                "{name}: {listeners} listeners skipped: this process may open {limit} files \
                 (ulimit -n), and they need more"
            );
            continue;
        }
        figures.push(measure(&store(listeners), listeners, rounds).await);
    }
    print_table(name, &figures, rounds);
}

fn print_table(name: &str, levels: &[Level], rounds: usize) {
    let Some(first) = levels.first() else { return };
    println!("\n[{name}]");
    println!(
        "| open listeners | server RSS per listener | idle server CPU | CPU per answered task (1 listener) | CPU per notification | notifications heard (×1 / ×{FANOUT}) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for l in levels {
        println!(
            "| {} | {:.1} KiB{} | {:.1} ms/s | {:.0} µs{} | {:.1} µs{} | {} / {} |",
            l.listeners,
            l.kib_per_listener,
            ratio(l.kib_per_listener, first.kib_per_listener),
            l.idle_cpu_ms_per_s,
            l.us_per_task,
            ratio(l.us_per_task, first.us_per_task),
            l.us_per_notification,
            ratio(l.us_per_notification, first.us_per_notification),
            l.notified.0,
            l.notified.1,
        );
    }
    println!(
        "({rounds} tasks answered per round; CPU is counted in 10 ms ticks, so a round's figure \
         moves by up to {:.0} µs per task)",
        10_000.0 / rounds as f64
    );
}

#[tokio::main]
async fn main() {
    let size = Size::from_args();
    let levels: &[usize] = size.pick(&[10, 100], &[100, 1_000], &[100, 1_000, 10_000]);
    let rounds = size.pick(5, 200, 200);
    println!(
        "push costs against open listeners, over HTTP on 127.0.0.1 ({} CPUs; {} processes; \
         {size:?} run: levels {levels:?}, {rounds} tasks answered per CPU round)",
        support::cpus(),
        support::profile(),
    );
    if selected("sqlite") {
        let dir = tempfile::tempdir().unwrap();
        run("SQLite FULL", levels, rounds, |n| {
            StoreArgs::Sqlite(dir.path().join(format!("listeners-{n}.db")))
        })
        .await;
    }
    if selected("postgres")
        && let Some(url) = pg::server_or_skip().await
    {
        // A schema per level, each dropped at the end.
        let schemas = pg::Levels::new(&url, levels);
        run("Postgres", levels, rounds, |n| schemas.store(n)).await;
        drop(schemas);
    }
}
