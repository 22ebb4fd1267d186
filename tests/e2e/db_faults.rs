//! The fleet through the database's faults: two instances of the
//! `fleet-fixture` server (processes) on a Postgres cluster of the test's
//! own, under load from four connections, while the database restarts (fast
//! and immediate), its connections are cut (`pg_terminate_backend`, and a TCP
//! proxy of the test's own dropping every link), a multi-host URL fails over
//! to a promoted standby, PgBouncer sits in between, or `LISTEN` cannot
//! work (the proxy cuts every connection that sends it).
//!
//! Each test checks what a client can see:
//! - every create answers within [`CALL_LIMIT`]: a task, or a JSON-RPC error
//!   that says to call again (`data.reason = "store_unavailable"`); never a
//!   hang, never an HTTP error without JSON-RPC;
//! - every task created ends `completed` with its result;
//! - every journaled checkpoint's effect happened exactly once, no step
//!   began again once its value was journaled, and no step ran without its
//!   value being journaled (the instances never crash here: the database
//!   does);
//! - it prints, per fault, how long creates were refused and the slowest
//!   create: the figures the guide's fleet chapter quotes.
//!
//! The clusters are private (`initdb` into a temporary directory, run as the
//! user `postgres` when the test runs as root, on a free port of 127.0.0.1),
//! never the machine's shared one. Without the Postgres server binaries
//! (`initdb`, `pg_ctl`, `pg_basebackup`, under `/usr/lib/postgresql/*/bin`
//! or `MCP_TASKS_PG_BIN`) a test prints `SKIPPED: …` and passes, unless `CI`
//! is set, when it fails. The PgBouncer tests need `pgbouncer` on the `PATH`
//! (or in `/usr/sbin`) in the same way. The instances log at `error`;
//! `MCP_TASKS_DBFAULTS_LOG=warn` shows their retries and reconnects.

mod common;

use std::{
    collections::BTreeSet,
    io::Write as _,
    os::unix::{fs::MetadataExt as _, process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use common::{
    Client, call,
    effects::{Effect, Tally, read_effects, steps_result},
    http_client,
    process::{self, ServerProcess, StoreArgs},
    task_id,
};
use rmcp::model::GetTaskParams;
use serde_json::json;
use tokio::{net::TcpListener, task::AbortHandle};

/// The instances' lease: longer than any outage here, so a run that cannot
/// write keeps retrying (and keeps its task) until the database is back.
const LEASE: Duration = Duration::from_secs(10);
/// How often the instances look for claimable tasks.
const SCAN: Duration = Duration::from_millis(200);
/// The longest a create may take, fault or not.
const CALL_LIMIT: Duration = Duration::from_secs(20);
/// Each task: this many checkpoints of this many milliseconds.
const STEPS: u32 = 3;
const STEP_MS: u64 = 100;

// ---------------------------------------------------------------------------
// The tests.

/// The database restarts twice under load: `pg_ctl restart -m fast`, then
/// `-m immediate` (a crash: no checkpoint, recovery from the WAL). The
/// instance with an admin address counts the reconnects and the time
/// without a database in `/metrics`.
#[test]
fn the_fleet_rides_through_database_restarts() {
    with_clusters("restarts", async |env| {
        let cluster = Cluster::primary(env);
        let run = Run::start(&cluster.url(), true).await;
        for mode in ["fast", "immediate"] {
            run.fault(&format!("restart -m {mode}"), || cluster.restart(mode))
                .await;
        }
        let metrics = run.metrics().await;
        run.finish().await;
        let reconnects = series(&metrics, "mcp_tasks_store_reconnects_total");
        let without = series(&metrics, "mcp_tasks_store_unavailable_seconds_sum");
        assert!(
            reconnects >= 2.0,
            "two restarts, two reconnects at least: {metrics}"
        );
        assert!(without > 0.0, "time without a database counted: {metrics}");
        eprintln!(
            "restarts: /metrics on A: {reconnects} reconnects, {without:.2} s without a database"
        );
    });
}

/// The instances' connections are cut under load: first every backend of
/// theirs is ended with `pg_terminate_backend`; then the TCP proxy between
/// them and the database drops every link at once, and refuses new ones
/// for a second.
#[test]
fn the_fleet_rides_through_cut_connections() {
    with_clusters("cut_connections", async |env| {
        let cluster = Cluster::primary(env);
        let proxy = Proxy::start(cluster.port, false).await;
        let run = Run::start(&proxy.url(), false).await;
        run.fault("pg_terminate_backend", || {
            let ended = cluster.sql(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
            );
            assert!(ended.trim().parse::<u32>().unwrap_or(0) > 0, "{ended}");
        })
        .await;
        run.fault("proxy drops every link", || {
            proxy.cut(Duration::from_secs(1));
        })
        .await;
        run.finish().await;
    });
}

/// Where `LISTEN` cannot work (here every connection that sends it is cut,
/// as a middlebox might, while the others go through), the change feed
/// falls back to polling and says so in the log, once; every task ends.
#[test]
fn the_feed_falls_back_to_polling_where_listen_is_cut() {
    with_clusters("listen_cut", async |env| {
        let cluster = Cluster::primary(env);
        let proxy = Proxy::start(cluster.port, true).await;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = dir.path().join("a.log");
        let run = Run::start_with(&proxy.url(), false, Some(&log)).await;
        let said = |log: &Path| {
            std::fs::read_to_string(log)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("cannot listen") && l.contains("falling back to polling"))
                .count()
        };
        let deadline = Instant::now() + CALL_LIMIT;
        while said(&log) == 0 {
            assert!(
                Instant::now() < deadline,
                "A never said it polls: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        run.finish().await;
        let text = std::fs::read_to_string(&log).expect("A's log");
        assert_eq!(said(&log), 1, "the fallback is said once: {text}");
        eprintln!(
            "LISTEN cut: {}",
            text.lines()
                .find(|l| l.contains("falling back to polling"))
                .unwrap_or_default()
        );
    });
}

/// A multi-host URL (`host=a,b`, `target_session_attrs=read-write`) follows
/// a failover: the primary (with a synchronous standby, made by
/// `pg_basebackup`) is stopped with `-m immediate`, the standby promoted,
/// and the instances go on on it.
#[test]
fn a_multi_host_url_follows_a_failover_to_the_promoted_standby() {
    with_clusters("failover", async |env| {
        let primary = Cluster::primary(env);
        let standby = primary.standby(env);
        let url = format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
            primary.port, standby.port
        );
        let run = Run::start(&url, false).await;
        run.fault("failover to the standby", || {
            primary.stop("immediate");
            standby.pg_ctl(&["promote", "-w", "-t", "30"]);
        })
        .await;
        run.finish().await;
        let on = standby.sql("SELECT count(*) FROM fleet.tasks");
        assert!(on.trim() != "0", "the tasks are on the promoted standby");
    });
}

/// PgBouncer in session mode: the fleet works through it, its `LISTEN`
/// feed included, and rides through a restart of the database behind it.
#[test]
fn pgbouncer_in_session_mode_works_and_rides_through_a_restart() {
    with_clusters("pgbouncer_session", async |env| {
        let Some(pgbouncer) = env.pgbouncer_or_skip("pgbouncer_session") else {
            return;
        };
        let cluster = Cluster::primary(env);
        let bouncer = Bouncer::start(&pgbouncer, cluster.port, "session");
        let run = Run::start(&bouncer.url(), false).await;
        run.fault("restart -m fast behind PgBouncer", || {
            cluster.restart("fast")
        })
        .await;
        run.finish().await;
    });
}

/// PgBouncer in transaction mode cannot carry the store (its prepared
/// statements and its `LISTEN` need a session of their own): an instance
/// started through it stops at once, with a message naming session mode.
#[test]
fn pgbouncer_in_transaction_mode_is_refused_at_start_naming_session_mode() {
    let Some(env) = Env::or_skip("pgbouncer_transaction") else {
        return;
    };
    let Some(pgbouncer) = env.pgbouncer_or_skip("pgbouncer_transaction") else {
        return;
    };
    let cluster = Cluster::primary(&env);
    let bouncer = Bouncer::start(&pgbouncer, cluster.port, "transaction");
    let store = StoreArgs::Postgres {
        url: bouncer.url(),
        schema: "fleet".to_owned(),
    };
    let mut child = Command::new(common::bin("fleet-fixture"))
        .args(["--addr", "127.0.0.1:0", "--instance", "a"])
        .args(store.args())
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the fixture starts");
    let deadline = Instant::now() + CALL_LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("an instance through PgBouncer in transaction mode did not stop");
        }
        thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::io::read_to_string(child.stderr.take().expect("piped")).expect("stderr");
    assert!(!status.success(), "{status}: {stderr}");
    assert!(
        stderr.contains("session mode") && stderr.contains("pool_mode = session"),
        "the refusal names session mode: {stderr}"
    );
    eprintln!(
        "pgbouncer, transaction mode: refused at start: {}",
        stderr.trim()
    );
}

// ---------------------------------------------------------------------------
// A run: two instances, the load, the faults, and the checks.

/// Two instances on one store, clients on each, and the effects file.
struct Run {
    a: ServerProcess,
    b: ServerProcess,
    effects: PathBuf,
    _dir: tempfile::TempDir,
    load: Load,
}

impl Run {
    /// Starts instances A and B on the database at `url` (A with an admin
    /// address when `admin`), and the load.
    async fn start(url: &str, admin: bool) -> Self {
        Self::start_with(url, admin, None).await
    }

    /// [`Run::start`], A logging at `warn` into `log` when given.
    async fn start_with(url: &str, admin: bool, log: Option<&Path>) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let effects = dir.path().join("effects.log");
        let store = StoreArgs::Postgres {
            url: url.to_owned(),
            schema: "fleet".to_owned(),
        };
        let a = match log {
            Some(log) => logged_instance(&store, "a", &effects, log),
            None => instance(&store, "a", &effects, admin),
        };
        let b = instance(&store, "b", &effects, false);
        let clients = vec![
            http_client(&a.url, true).await,
            http_client(&a.url, true).await,
            http_client(&b.url, true).await,
            http_client(&b.url, true).await,
        ];
        let load = Load::start(clients);
        // Some tasks in flight before the first fault.
        tokio::time::sleep(Duration::from_millis(800)).await;
        Self {
            a,
            b,
            effects,
            _dir: dir,
            load,
        }
    }

    /// Runs `fault` (a blocking command) under the load, then lets the load
    /// go on for two seconds; prints what the creates saw: how many were
    /// refused (with the retryable error), until when, and the slowest.
    async fn fault(&self, name: &str, fault: impl FnOnce()) {
        let from = self.load.log.lock().unwrap().len();
        let began = Instant::now();
        tokio::task::block_in_place(fault);
        let took = began.elapsed();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let log = self.load.log.lock().unwrap();
        let window = &log[from..];
        let refused = window.iter().filter(|a| !a.ok);
        let refused_until = refused
            .clone()
            .map(|a| a.at.saturating_duration_since(began))
            .max()
            .unwrap_or_default();
        eprintln!(
            "{name}: the fault took {took:.2?}; {} creates refused (retryable), the last \
             {refused_until:.2?} after it began; {} made; slowest create {:.2?}",
            refused.count(),
            window.iter().filter(|a| a.ok).count(),
            window.iter().map(|a| a.took).max().unwrap_or_default(),
        );
    }

    /// A's `/metrics`.
    async fn metrics(&self) -> String {
        let admin = self.a.admin().expect("A has an admin address");
        reqwest::get(format!("{admin}metrics"))
            .await
            .and_then(reqwest::Response::error_for_status)
            .expect("GET /metrics")
            .text()
            .await
            .expect("the metrics' text")
    }

    /// Stops the load, waits for every task to end, and checks the results
    /// and the effects.
    async fn finish(self) {
        let stopped = Instant::now();
        let (ids, refused_tags) = self.load.stop().await;
        let reader = http_client(&self.b.url, true).await;
        let mut results = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        for id in &ids {
            loop {
                let got = reader.peer().get_task(GetTaskParams::new(id.clone())).await;
                match got {
                    Ok(t) if t.task.status().is_terminal() => {
                        results.push(steps_result(&t.task));
                        break;
                    }
                    Ok(_) => {}
                    Err(e) => assert_retryable(&e),
                }
                assert!(Instant::now() < deadline, "task {id} never ended");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let drained = stopped.elapsed();
        eprintln!("the tasks in flight ended {drained:.2?} after the load stopped");
        // A create refused after its commit (the answer lost with the
        // connection) made a task all the same: its steps run, untracked.
        let (orphans, effects): (Vec<Effect>, Vec<Effect>) = read_effects(&self.effects)
            .into_iter()
            .partition(|e| refused_tags.contains(&e.tag));
        let tally = Tally::check(&effects, &results);
        assert_eq!(tally.steps, ids.len() * STEPS as usize, "{tally:?}");
        assert!(
            tally.abandoned.is_empty(),
            "no instance crashed, yet steps ran without their value being journaled: {tally:?}"
        );
        let orphans: BTreeSet<&str> = orphans.iter().map(|e| e.tag.as_str()).collect();
        eprintln!(
            "{} tasks created, all completed, {} checkpoints each recorded once ({} by A, {} by B); \
             {} refused creates ran anyway; the tasks in flight ended {drained:.2?} after the load stopped",
            ids.len(),
            tally.steps,
            tally.journaled_by("a"),
            tally.journaled_by("b"),
            orphans.len()
        );
        drop(reader);
        drop((self.a, self.b));
    }
}

/// Instance `name` of the fleet fixture on `store`.
fn instance(store: &StoreArgs, name: &str, effects: &Path, admin: bool) -> ServerProcess {
    let mut args = process::instance_args(name, LEASE, SCAN);
    if admin {
        args.extend(["--admin".to_owned(), "127.0.0.1:0".to_owned()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let log = std::env::var("MCP_TASKS_DBFAULTS_LOG").unwrap_or_else(|_| "error".to_owned());
    let env = [
        ("MCP_TASKS_EFFECTS", effects.as_os_str()),
        ("RUST_LOG", std::ffi::OsStr::new(&log)),
    ];
    ServerProcess::start_with_env(
        common::bin("fleet-fixture"),
        store,
        &args,
        &env,
        Duration::from_secs(30),
    )
}

/// Instance `name` of the fleet fixture on `store`, logging at `warn`
/// into the file `log`.
fn logged_instance(store: &StoreArgs, name: &str, effects: &Path, log: &Path) -> ServerProcess {
    let mut command = Command::new("sh");
    command
        .args(["-c", "exec \"$0\" \"$@\" 2>>\"$MCP_TASKS_TEST_LOG\""])
        .arg(common::bin("fleet-fixture"))
        .args(["--addr", "127.0.0.1:0"])
        .args(process::instance_args(name, LEASE, SCAN))
        .args(store.args())
        .env("MCP_TASKS_EFFECTS", effects)
        .env("MCP_TASKS_TEST_LOG", log)
        .env("RUST_LOG", "warn");
    ServerProcess::spawn(command, Duration::from_secs(30))
}

/// The value of an unlabelled series in Prometheus text.
fn series(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {metrics}"))
}

// ---------------------------------------------------------------------------
// The load: four connections creating tasks back to back.

/// One create's answer.
struct Answer {
    at: Instant,
    took: Duration,
    ok: bool,
}

struct Load {
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<Answer>>>,
    /// Each connection's created ids and refused tags.
    connections: Vec<tokio::task::JoinHandle<(Vec<String>, Vec<String>)>>,
}

impl Load {
    fn start(clients: Vec<Client>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        let connections = clients
            .into_iter()
            .enumerate()
            .map(|(n, client)| {
                let (stop, log) = (stop.clone(), log.clone());
                tokio::spawn(async move { create_until(n, &client, &stop, &log).await })
            })
            .collect();
        Self {
            stop,
            log,
            connections,
        }
    }

    /// Stops it; every created task's id, and the tags of the refused
    /// creates.
    async fn stop(self) -> (Vec<String>, BTreeSet<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let mut ids = Vec::new();
        let mut refused = BTreeSet::new();
        for c in self.connections {
            let (made, not) = c.await.expect("a load connection panicked");
            ids.extend(made);
            refused.extend(not);
        }
        (ids, refused)
    }
}

/// Creates `steps` tasks on `client`, one every 100 ms, until `stop`;
/// a create refused with the retryable error is called again (under a new
/// tag) after a pause, as a client would.
async fn create_until(
    n: usize,
    client: &Client,
    stop: &AtomicBool,
    log: &Mutex<Vec<Answer>>,
) -> (Vec<String>, Vec<String>) {
    let (mut made, mut refused) = (Vec::new(), Vec::new());
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let tag = format!("c{n}t{i}");
        i += 1;
        let began = Instant::now();
        let args = json!({"tag": tag, "steps": STEPS, "step_ms": STEP_MS});
        let answer = tokio::time::timeout(CALL_LIMIT, client.call_tool_once(call("steps", args)))
            .await
            .unwrap_or_else(|_| panic!("create {tag} hung for {CALL_LIMIT:?}"));
        let took = began.elapsed();
        let ok = match answer {
            Ok(response) => {
                made.push(task_id(response));
                true
            }
            Err(e) => {
                assert_retryable(&e);
                refused.push(tag);
                false
            }
        };
        log.lock().unwrap().push(Answer {
            at: Instant::now(),
            took,
            ok,
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (made, refused)
}

/// Panics unless `e` is the JSON-RPC error that says the store cannot be
/// reached and to call again.
fn assert_retryable(e: &rmcp::ServiceError) {
    let rmcp::ServiceError::McpError(e) = e else {
        panic!("a call during a fault got no JSON-RPC answer: {e}")
    };
    assert_eq!(e.code, rmcp::model::ErrorCode::INTERNAL_ERROR, "{e:?}");
    assert_eq!(
        e.data.as_ref().and_then(|d| d.get("reason")),
        Some(&json!("store_unavailable")),
        "a call refused during a fault says the store is unavailable: {e:?}"
    );
    assert!(
        e.message.contains("call again"),
        "the refusal says to call again: {e:?}"
    );
}

// ---------------------------------------------------------------------------
// Private clusters.

/// The Postgres server binaries, the tests' runtime, and one test at a
/// time.
struct Env {
    bin: PathBuf,
    runtime: tokio::runtime::Runtime,
    _serial: std::sync::MutexGuard<'static, ()>,
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `test` on the runtime, one test at a time; skipped (loudly) when
/// the server binaries are missing and `CI` is not set.
fn with_clusters(name: &str, test: impl AsyncFnOnce(&Env)) {
    if let Some(env) = Env::or_skip(name) {
        env.runtime.block_on(test(&env));
    }
}

impl Env {
    /// `None` (after printing `SKIPPED`) when the server binaries are
    /// missing and `CI` is not set; with `CI` set, that panics.
    fn or_skip(test: &str) -> Option<Self> {
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let bin = match pg_bin() {
            Ok(bin) => bin,
            Err(why) => return skip(test, &why),
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        Some(Self {
            bin,
            runtime,
            _serial: serial,
        })
    }

    /// The `pgbouncer` binary, or `None` after printing `SKIPPED` (a panic
    /// with `CI` set).
    fn pgbouncer_or_skip(&self, test: &str) -> Option<PathBuf> {
        let found = std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .chain([PathBuf::from("/usr/sbin")])
                .map(|d| d.join("pgbouncer"))
                .find(|p| p.is_file())
        });
        match found {
            Some(p) => Some(p),
            None => skip(test, "no pgbouncer (Debian's package `pgbouncer`)"),
        }
    }
}

fn skip<T>(test: &str, why: &str) -> Option<T> {
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: {why}; CI is set, so this test must run"
    );
    // Past the harness's capture: a skip must show.
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
    None
}

/// The directory of `initdb`, `pg_ctl` and `pg_basebackup`:
/// `MCP_TASKS_PG_BIN`, or the newest `/usr/lib/postgresql/*/bin`.
fn pg_bin() -> Result<PathBuf, String> {
    let has_all = |d: &Path| {
        ["initdb", "pg_ctl", "pg_basebackup", "postgres", "psql"]
            .iter()
            .all(|b| d.join(b).is_file())
    };
    if let Some(dir) = std::env::var_os("MCP_TASKS_PG_BIN") {
        let dir = PathBuf::from(dir);
        return if has_all(&dir) {
            Ok(dir)
        } else {
            Err(format!(
                "MCP_TASKS_PG_BIN={} lacks the server binaries",
                dir.display()
            ))
        };
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| format!("no Postgres server binaries (/usr/lib/postgresql: {e})"))?
        .filter_map(|e| Some(e.ok()?.path().join("bin")))
        .filter(|d| has_all(d))
        .collect();
    dirs.sort_by_key(|d| {
        d.parent()
            .and_then(|v| v.file_name()?.to_str()?.parse::<u32>().ok())
    });
    dirs.pop()
        .ok_or_else(|| "no Postgres server binaries under /usr/lib/postgresql/*/bin".to_owned())
}

/// Whether this process runs as root (the server refuses to: its commands
/// then run as `postgres`).
fn as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `program`, to run as `postgres` when the test runs as root.
fn as_server(program: &Path) -> Command {
    if as_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// `program args…`, as `postgres` when the test runs as root; panics when
/// it fails; its stdout.
fn run_as_server(program: &Path, args: &[&str]) -> String {
    let mut command = as_server(program);
    let out = command
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the command runs");
    assert!(
        out.status.success(),
        "{} {args:?}: {}\n{}",
        program.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A directory the server's user owns, removed when this drops.
fn server_dir(prefix: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("a temporary directory");
    if as_root() {
        let status = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(dir.path())
            .status()
            .expect("chown runs");
        assert!(status.success(), "chown postgres {}", dir.path().display());
    }
    dir
}

/// A free port on 127.0.0.1 (free when asked).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A private Postgres cluster on 127.0.0.1, stopped (`-m immediate`) and
/// deleted when it drops.
struct Cluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
}

impl Cluster {
    /// A new cluster, started, with synchronous replication to any standby
    /// (a failover then loses no committed write).
    fn primary(env: &Env) -> Self {
        let dir = server_dir("mcp-tasks-pg-");
        let data = dir.path().join("data");
        run_as_server(
            &env.bin.join("initdb"),
            &[
                "-D",
                path(&data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        let cluster = Self {
            bin: env.bin.clone(),
            dir,
            port: free_port(),
        };
        cluster.start();
        cluster
    }

    /// A streaming standby of this cluster (`pg_basebackup -R`), started.
    fn standby(&self, env: &Env) -> Self {
        let dir = server_dir("mcp-tasks-pg-standby-");
        let data = dir.path().join("data");
        let port = self.port.to_string();
        run_as_server(
            &env.bin.join("pg_basebackup"),
            &[
                &connect_args(&port)[..],
                &[
                    "-D",
                    path(&data),
                    "-R",
                    "-X",
                    "stream",
                    "-c",
                    "fast",
                    "--no-sync",
                ],
            ]
            .concat(),
        );
        let standby = Self {
            bin: env.bin.clone(),
            dir,
            port: free_port(),
        };
        standby.start();
        // The standby streams; the primary's commits now wait for it.
        self.sql("ALTER SYSTEM SET synchronous_standby_names = '*'");
        self.sql("SELECT pg_reload_conf()");
        standby
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn pg_ctl(&self, args: &[&str]) -> String {
        let data = self.data();
        let mut all = vec!["-D", path(&data)];
        all.extend(args);
        run_as_server(&self.bin.join("pg_ctl"), &all)
    }

    fn start(&self) {
        let log = self.dir.path().join("server.log");
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=200",
            self.port,
            self.dir.path().display()
        );
        self.pg_ctl(&["-l", path(&log), "-o", &options, "-w", "-t", "60", "start"]);
    }

    /// `pg_ctl restart`: the new server writes to the log file (not to
    /// `pg_ctl`'s output, which it would hold open).
    fn restart(&self, mode: &str) {
        let log = self.dir.path().join("server.log");
        self.pg_ctl(&["-l", path(&log), "-m", mode, "-w", "-t", "60", "restart"]);
    }

    fn stop(&self, mode: &str) {
        self.pg_ctl(&["-m", mode, "-w", "-t", "60", "stop"]);
    }

    /// Runs `sql` with psql; its output, unaligned.
    fn sql(&self, sql: &str) -> String {
        let port = self.port.to_string();
        let args = [&connect_args(&port)[..], &["-d", "postgres", "-Atqc", sql]].concat();
        run_as_server(&self.bin.join("psql"), &args)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data();
        let mut command = as_server(&self.bin.join("pg_ctl"));
        // Already stopped (a failover's old primary) is fine.
        let _ = command
            .args(["-D", path(&data), "-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The client programs' arguments that reach the cluster at `port`.
fn connect_args(port: &str) -> [&str; 6] {
    ["-h", "127.0.0.1", "-p", port, "-U", "postgres"]
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

// ---------------------------------------------------------------------------
// A TCP proxy of the test's own, and PgBouncer.

/// Forwards 127.0.0.1:`port` to the database; [`Proxy::cut`] drops every
/// link at once. One that cuts `LISTEN` drops every link whose client sends
/// it.
struct Proxy {
    port: u16,
    /// Links are closed at once until then.
    closed_until: Arc<Mutex<Option<Instant>>>,
    links: Arc<Mutex<Vec<AbortHandle>>>,
    accept: AbortHandle,
}

impl Proxy {
    async fn start(upstream: u16, cut_listen: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let port = listener.local_addr().expect("its address").port();
        let links: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let closed_until: Arc<Mutex<Option<Instant>>> = Arc::default();
        let accept = {
            let (links, closed_until) = (links.clone(), closed_until.clone());
            tokio::spawn(async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    let closed = closed_until
                        .lock()
                        .unwrap()
                        .is_some_and(|until| Instant::now() < until);
                    if closed {
                        continue;
                    }
                    let link = tokio::spawn(async move {
                        let Ok(mut outbound) =
                            tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                        else {
                            return;
                        };
                        if cut_listen {
                            forward_but_listen(inbound, outbound).await;
                        } else {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                    let mut links = links.lock().unwrap();
                    links.retain(|l| !l.is_finished());
                    links.push(link.abort_handle());
                }
            })
            .abort_handle()
        };
        Self {
            port,
            closed_until,
            links,
            accept,
        }
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Drops every link, and closes new ones at once for `closed`.
    fn cut(&self, closed: Duration) {
        *self.closed_until.lock().unwrap() = Some(Instant::now() + closed);
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
        thread::sleep(closed);
    }
}

/// Forwards a link until its client sends `LISTEN`, then drops it.
async fn forward_but_listen(inbound: tokio::net::TcpStream, outbound: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (mut from_client, mut to_client) = inbound.into_split();
    let (mut from_server, mut to_server) = outbound.into_split();
    let down = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
    });
    let mut buf = vec![0; 16 * 1024];
    loop {
        let n = match from_client.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if buf[..n].windows(7).any(|w| w == b"LISTEN ") {
            break;
        }
        if to_server.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    down.abort();
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }
}

/// PgBouncer in `mode` in front of the cluster at `port`, as the server's
/// user; killed when it drops.
struct Bouncer {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Bouncer {
    fn start(pgbouncer: &Path, upstream: u16, mode: &str) -> Self {
        let dir = server_dir("mcp-tasks-pgbouncer-");
        let port = free_port();
        let users = dir.path().join("users.txt");
        std::fs::write(&users, "\"postgres\" \"\"\n").expect("the users file");
        let ini = dir.path().join("pgbouncer.ini");
        std::fs::write(
            &ini,
            format!(
                "[databases]\npostgres = host=127.0.0.1 port={upstream} dbname=postgres\n\
                 [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
                 unix_socket_dir =\nauth_type = trust\nauth_file = {}\n\
                 pool_mode = {mode}\ndefault_pool_size = 40\nmax_client_conn = 200\n\
                 server_login_retry = 1\n\
                 logfile = {}\n",
                users.display(),
                dir.path().join("pgbouncer.log").display()
            ),
        )
        .expect("the config");
        let mut command = as_server(pgbouncer);
        let child = command
            .arg(&ini)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pgbouncer starts");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "pgbouncer did not listen");
            thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            port,
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        // Its process group: `runuser` and pgbouncer.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
