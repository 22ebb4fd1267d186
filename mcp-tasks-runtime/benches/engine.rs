//! Engine benchmarks on SQLite (a real file, `synchronous=FULL` and
//! `NORMAL`) and on Postgres, side by side: creation latency, checkpoints/s,
//! recovery; and memory per parked task (SQLite). Prints figures; never
//! asserts a timing.
//!
//! Postgres is `MCP_TASKS_POSTGRES_URL`, or
//! `postgres://postgres@127.0.0.1:5432/postgres`; each run makes a schema of
//! its own (`mcp_tasks_bench_<pid>_<n>`) and drops it at its end. When the
//! server cannot be reached, the Postgres runs print why and are skipped
//! (with `CI` set too: this is a benchmark, not a test).
//!
//! Run: `cargo bench -p mcp-tasks-runtime --bench engine`. For a quick run set
//! `MCP_TASKS_BENCH_QUICK=1`; every size can also be set on its own:
//!
//! | variable                        | default | quick | what                                   |
//! |---------------------------------|---------|-------|----------------------------------------|
//! | `MCP_TASKS_BENCH_CREATES`       | 2000    | 200   | task creations per latency run          |
//! | `MCP_TASKS_BENCH_CREATORS`      | 16      | 16    | concurrent creators                     |
//! | `MCP_TASKS_BENCH_STEP_TASKS`    | 500     | 50    | tasks in the checkpoint run             |
//! | `MCP_TASKS_BENCH_STEPS`         | 40      | 10    | checkpoints per task                    |
//! | `MCP_TASKS_BENCH_PARKED`        | 100000  | 5000  | parked tasks in the memory run          |
//! | `MCP_TASKS_BENCH_RECOVER`       | 10000   | 1000  | unfinished tasks in the recovery run    |
//! | `MCP_TASKS_BENCH_DIR`           | tmp     | tmp   | where the SQLite files go               |
//!
//! The memory run goes first, in a fresh process, so that nothing freed by
//! an earlier run is reused and hides its cost.

use std::{
    future::Future,
    sync::{
        Arc, LazyLock,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use mcp_tasks_runtime::{
    Elicit, Engine, ToolError, ask_user, checkpoint,
    engine::{Call, CallOutcome},
    question::InputCapabilities,
    store::{PostgresStore, SqliteStore, Store, Synchronous, TaskRecord, TaskStatus},
    task_tool,
    tool::Registry,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::watch;

#[derive(Debug, Deserialize, JsonSchema, Elicit)]
struct Approval {
    approve: bool,
}

/// Tools that reached their question (they park right after).
static ASKED: AtomicUsize = AtomicUsize::new(0);
/// Recovery run: whether `hold` blocks after its checkpoint (engine A) or
/// finishes (engine B).
static HOLD: AtomicBool = AtomicBool::new(true);
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Parks on a question at once.
#[task_tool]
async fn park() -> Result<String, ToolError> {
    ASKED.fetch_add(1, Ordering::Relaxed);
    let a: Approval = ask_user("Approve?").await?;
    Ok(format!("approve={}", a.approve))
}

/// The checkpoint run's starting gun: `steps` tasks of round `r` wait until
/// it reads at least `r`.
static GO: LazyLock<watch::Sender<u64>> = LazyLock::new(|| watch::channel(0).0);

/// Waits for round `round` to start, then runs `n` journaled checkpoints.
#[task_tool]
async fn steps(round: u64, n: u32) -> Result<String, ToolError> {
    let mut go = GO.subscribe();
    go.wait_for(|r| *r >= round).await.expect("GO is static");
    let mut sum = 0u64;
    for i in 0..n {
        let v: u32 =
            checkpoint(format!("step-{i}"), || async move { Ok::<_, ToolError>(i) }).await?;
        sum += u64::from(v);
    }
    Ok(sum.to_string())
}

/// Checkpoints, then blocks (engine A) or finishes (engine B).
#[task_tool]
async fn hold() -> Result<String, ToolError> {
    let v: u32 = checkpoint("before", || async { Ok::<_, ToolError>(3) }).await?;
    if HOLD.load(Ordering::SeqCst) {
        HELD.fetch_add(1, Ordering::Relaxed);
        std::future::pending::<()>().await;
    }
    Ok(v.to_string())
}

fn registry() -> Registry {
    Registry::new()
        .with(park_tool())
        .unwrap()
        .with(steps_tool())
        .unwrap()
        .with(hold_tool())
        .unwrap()
}

// ---------------------------------------------------------------------------
// Sizes and helpers.

struct Sizes {
    creates: usize,
    creators: usize,
    step_tasks: usize,
    steps: u32,
    parked: usize,
    recover: usize,
}

fn size(name: &str, full: usize, quick: usize) -> usize {
    let quick_run = std::env::var("MCP_TASKS_BENCH_QUICK").is_ok_and(|v| v != "0" && !v.is_empty());
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick_run { quick } else { full })
}

impl Sizes {
    fn from_env() -> Self {
        Self {
            creates: size("MCP_TASKS_BENCH_CREATES", 2000, 200),
            creators: size("MCP_TASKS_BENCH_CREATORS", 16, 16).max(1),
            step_tasks: size("MCP_TASKS_BENCH_STEP_TASKS", 500, 50),
            steps: u32::try_from(size("MCP_TASKS_BENCH_STEPS", 40, 10)).unwrap_or(40),
            parked: size("MCP_TASKS_BENCH_PARKED", 100_000, 5000),
            recover: size("MCP_TASKS_BENCH_RECOVER", 10_000, 1000),
        }
    }
}

/// Where a run keeps its tasks: SQLite (a real file) with one of its
/// `synchronous` settings, or a Postgres server.
#[derive(Debug, Clone)]
enum Backend {
    Sqlite(Synchronous),
    Postgres(String),
}

impl Backend {
    fn name(&self) -> String {
        match self {
            Self::Sqlite(Synchronous::Full) => "SQLite synchronous=FULL".to_owned(),
            Self::Sqlite(Synchronous::Normal) => "SQLite synchronous=NORMAL".to_owned(),
            Self::Sqlite(other) => format!("SQLite synchronous={other:?}"),
            Self::Postgres(url) => format!("Postgres at {url}"),
        }
    }

    /// A fresh, empty database: a file in a new temporary directory, or a
    /// schema of its own (dropped when the [`Db`] drops).
    fn fresh(&self) -> Db {
        match self {
            Self::Sqlite(sync) => {
                let dir = match std::env::var_os("MCP_TASKS_BENCH_DIR") {
                    Some(d) => tempfile::tempdir_in(d),
                    None => tempfile::tempdir(),
                }
                .expect("a temporary directory");
                let path = dir.path().join("bench.db");
                Db {
                    target: Target::Sqlite { path, sync: *sync },
                    _dir: Some(dir),
                    _schema: None,
                }
            }
            Self::Postgres(url) => {
                let schema = pg::Schema::new(url, "mcp_tasks_bench");
                Db {
                    target: Target::Postgres {
                        url: schema.url(),
                        schema: schema.name().to_owned(),
                    },
                    _dir: None,
                    _schema: Some(schema),
                }
            }
        }
    }
}

/// One run's database; whatever it made is removed when it drops.
struct Db {
    target: Target,
    _dir: Option<tempfile::TempDir>,
    _schema: Option<pg::Schema>,
}

/// How to open a [`Db`]'s store again (several engines may share it).
#[derive(Debug, Clone)]
enum Target {
    Sqlite {
        path: std::path::PathBuf,
        sync: Synchronous,
    },
    Postgres {
        url: String,
        schema: String,
    },
}

impl Target {
    async fn open(&self) -> Arc<dyn Store> {
        match self {
            Self::Sqlite { path, sync } => Arc::new(
                SqliteStore::builder(path)
                    .synchronous(*sync)
                    .open()
                    .await
                    .expect("open the store"),
            ),
            Self::Postgres { url, schema } => Arc::new(
                PostgresStore::builder(url.clone())
                    .schema(schema.clone())
                    .connect()
                    .await
                    .expect("connect the store"),
            ),
        }
    }
}

impl Db {
    async fn open(&self) -> Arc<dyn Store> {
        self.target.open().await
    }

    /// The SQLite file, if this is one.
    fn file(&self) -> Option<&std::path::Path> {
        match &self.target {
            Target::Sqlite { path, .. } => Some(path),
            Target::Postgres { .. } => None,
        }
    }
}

fn task(tool: &str, arguments: serde_json::Value) -> Call {
    let serde_json::Value::Object(arguments) = arguments else {
        unreachable!()
    };
    Call::new(tool, arguments).capabilities(InputCapabilities::ALL)
}

/// Starts a task through the engine's one entry point.
async fn create(engine: &Engine, call: Call) -> mcp_tasks_runtime::Result<TaskRecord> {
    match engine.call(call).await? {
        CallOutcome::Task(record) => Ok(*record),
        other => panic!("expected a task, got {other:?}"),
    }
}

fn pct(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// Waits (polling, every 2 ms) until `done()` holds.
async fn until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Runs `n` jobs on `workers` concurrent workers; returns each job's latency.
async fn concurrently<F, Fut>(n: usize, workers: usize, job: F) -> Vec<Duration>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let job = Arc::new(job);
    let next = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..workers)
        .map(|_| {
            let job = job.clone();
            let next = next.clone();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return lat;
                    }
                    let t = Instant::now();
                    job(i).await;
                    lat.push(t.elapsed());
                }
            })
        })
        .collect();
    let mut all = Vec::with_capacity(n);
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all
}

/// Resident set size in bytes, from `/proc/self/statm` (pages) times the
/// page size the kernel reports in `/proc/self/smaps`.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * page_size()
}

fn page_size() -> u64 {
    std::fs::read_to_string("/proc/self/smaps")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("KernelPageSize:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(4096, |kb| kb * 1024)
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
}

/// No create rate or unfinished cap: the benchmarks measure the engine.
fn unlimited() -> mcp_tasks_runtime::engine::Limits {
    let mut limits = mcp_tasks_runtime::engine::Limits::default();
    limits.creates_per_second = f64::INFINITY;
    limits.max_unfinished_per_principal = usize::MAX;
    limits
}

async fn engine(store: Arc<dyn Store>) -> Engine {
    Engine::builder_arc(store)
        .registry(registry())
        .limits(unlimited())
        .start()
        .await
        .expect("start the engine")
}

// ---------------------------------------------------------------------------
// Runs.

/// Prints one latency line: percentiles of `lat` and the rate over `total`.
fn report(label: &str, mut lat: Vec<Duration>, total: Duration) {
    lat.sort();
    let n = lat.len();
    let mean = total.checked_div(u32::try_from(n.max(1)).unwrap_or(u32::MAX));
    println!(
        "  {label:<26}n={n:<6} p50 {}  p90 {}  p99 {}  rate {:.0}/s  (wall time per create {})",
        ms(pct(&lat, 50)),
        ms(pct(&lat, 90)),
        ms(pct(&lat, 99)),
        n as f64 / total.as_secs_f64(),
        ms(mean.unwrap_or_default()),
    );
}

/// A `working` row like the engine's, for the store-only baseline.
fn bare_record() -> mcp_tasks_runtime::store::TaskRecord {
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let mut id = [0u8; 16];
    let n = ASKED.fetch_add(1, Ordering::Relaxed) as u128 ^ (now as u128) << 64;
    id.copy_from_slice(&n.to_be_bytes());
    let mut record = TaskRecord::new(
        id.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        "park",
        now,
    );
    record.client_capabilities = InputCapabilities::ALL;
    record.ttl_ms = Some(3_600_000);
    record.poll_interval_ms = Some(1000);
    record
}

async fn creation(sizes: &Sizes, backend: &Backend) {
    // Baseline: the store alone (one durable insert per call, nothing runs).
    let db = backend.fresh();
    let store = db.open().await;
    for _ in 0..20 {
        store.create(bare_record()).await.unwrap();
    }
    let mut lat = Vec::with_capacity(sizes.creates);
    let start = Instant::now();
    for _ in 0..sizes.creates {
        let r = bare_record();
        let t = Instant::now();
        store.create(r).await.unwrap();
        lat.push(t.elapsed());
    }
    report("store.create, sequential", lat, start.elapsed());
    drop(store);
    drop(db);

    // The engine: each created task then runs and parks on a question.
    let db = backend.fresh();
    let engine = engine(db.open().await).await;
    // Warm up (schema pages, code paths).
    for _ in 0..20 {
        create(&engine, task("park", json!({}))).await.unwrap();
    }
    let mut lat = Vec::with_capacity(sizes.creates);
    let start = Instant::now();
    for _ in 0..sizes.creates {
        let t = Instant::now();
        create(&engine, task("park", json!({}))).await.unwrap();
        lat.push(t.elapsed());
    }
    report("create, sequential", lat, start.elapsed());

    let e = engine.clone();
    let start = Instant::now();
    let lat = concurrently(sizes.creates, sizes.creators, move |_| {
        let e = e.clone();
        async move {
            create(&e, task("park", json!({}))).await.unwrap();
        }
    })
    .await;
    report(
        &format!("create, {} concurrent", sizes.creators),
        lat,
        start.elapsed(),
    );
}

/// Creates every task first (each waits for the starting gun once it runs),
/// then times from the gun to the last task's completion.
async fn checkpoints(sizes: &Sizes, backend: &Backend) {
    let db = backend.fresh();
    let engine = Engine::builder_arc(db.open().await)
        .registry(registry())
        .limits(unlimited())
        .max_concurrency(sizes.step_tasks.max(1))
        .start()
        .await
        .expect("start the engine");
    let n = sizes.step_tasks;
    let steps = sizes.steps;
    let round = *GO.borrow() + 1;
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        ids.push(
            create(&engine, task("steps", json!({"round": round, "n": steps})))
                .await
                .unwrap()
                .id,
        );
    }
    let start = Instant::now();
    GO.send_replace(round);
    for id in &ids {
        let r = engine
            .wait(id, None, Duration::from_secs(600))
            .await
            .unwrap();
        assert_eq!(r.status, TaskStatus::Completed, "{r:?}");
    }
    let total = start.elapsed();
    let count = n as f64 * f64::from(steps);
    println!(
        "  checkpoints               {n} tasks x {steps} = {count:.0} in {}  => {:.0} checkpoints/s (all tasks running at once; includes their completions)",
        ms(total),
        count / total.as_secs_f64(),
    );
}

async fn parked_memory(sizes: &Sizes, backend: &Backend) {
    let db = backend.fresh();
    let engine = engine(db.open().await).await;
    let n = sizes.parked;
    // The harness's own bookkeeping (the ids, as u128) is allocated and
    // touched before the first measurement, so it is not counted.
    let ids: Arc<std::sync::Mutex<Vec<u128>>> = Arc::new(std::sync::Mutex::new(vec![0u128; n]));
    // Warm up: schema pages, the page cache, code paths, allocator pools.
    let warm = 2000.min(n);
    let base = ASKED.load(Ordering::SeqCst);
    for _ in 0..warm {
        create(&engine, task("park", json!({}))).await.unwrap();
    }
    until(
        "the warm-up tasks to park",
        Duration::from_secs(120),
        || ASKED.load(Ordering::SeqCst) >= base + warm,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let before = rss_bytes();
    let base = ASKED.load(Ordering::SeqCst);
    let created = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let (e, ids2, created2) = (engine.clone(), ids.clone(), created.clone());
    concurrently(n, sizes.creators, move |i| {
        let (e, ids, created) = (e.clone(), ids2.clone(), created2.clone());
        async move {
            // Keep the backlog of tasks not yet parked bounded, as a server
            // under steady load would.
            while created.load(Ordering::Relaxed) > ASKED.load(Ordering::Relaxed) - base + 1000 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let t = create(&e, task("park", json!({}))).await.unwrap();
            created.fetch_add(1, Ordering::Relaxed);
            ids.lock().unwrap()[i] = u128::from_str_radix(&t.id, 16).unwrap();
        }
    })
    .await;
    until("every task to park", Duration::from_secs(600), || {
        ASKED.load(Ordering::SeqCst) >= base + n
    })
    .await;
    // The park transitions land right after the tools ask.
    let last = format!("{:032x}", ids.lock().unwrap()[n - 1]);
    loop {
        if engine.get(&last, None).await.unwrap().status == TaskStatus::InputRequired {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let took = start.elapsed();
    let after = rss_bytes();

    // Check (after measuring) that every one of them is parked.
    let ids = ids.lock().unwrap().clone();
    let mut not_parked = 0;
    for id in &ids {
        let r = engine.get(&format!("{id:032x}"), None).await.unwrap();
        if r.status != TaskStatus::InputRequired {
            not_parked += 1;
        }
    }
    let delta = after.saturating_sub(before);
    println!(
        "  parked tasks              n={n}  (parked in {}; not parked at the end: {not_parked})",
        ms(took)
    );
    println!(
        "  RSS before {}  after {}  delta {}  => {:.0} bytes per parked task",
        mib(before),
        mib(after),
        mib(delta),
        delta as f64 / n as f64
    );
    let file = db
        .file()
        .and_then(|f| std::fs::metadata(f).ok())
        .map_or(0, |m| m.len());
    println!(
        "  (on disk: {} for {} tasks, {:.0} bytes per task)",
        mib(file),
        n + warm,
        file as f64 / (n + warm) as f64
    );
}

/// The lease of the engine that crashes in [`recovery`].
const A_LEASE: Duration = Duration::from_millis(300);

async fn recovery(sizes: &Sizes, backend: &Backend) {
    let db = backend.fresh();
    let n = sizes.recover;
    let n_park = n / 2;
    let n_work = n - n_park;

    // Engine A on its own runtime; shutting the runtime down drops every
    // task future, as a crash would.
    let rt_a = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    HOLD.store(true, Ordering::SeqCst);
    let target = db.target.clone();
    let creators = sizes.creators;
    let (parked_ids, working_ids) = rt_a
        .spawn(async move {
            // Opened on A's runtime, so that the crash ends its connections
            // and change feed too.
            let store_a = target.open().await;
            // Held tasks keep their worker: give engine A one for each. Its
            // leases run out soon after its crash.
            let a = Engine::builder_arc(store_a)
                .registry(registry())
                .limits(unlimited())
                .max_concurrency(n + 1)
                .lease(A_LEASE)
                .start()
                .await
                .expect("start engine A");
            let asked0 = ASKED.load(Ordering::SeqCst);
            let held0 = HELD.load(Ordering::SeqCst);
            let ids = Arc::new(std::sync::Mutex::new(vec![String::new(); n]));
            let (a2, ids2) = (a.clone(), ids.clone());
            concurrently(n, creators, move |i| {
                let (a, ids) = (a2.clone(), ids2.clone());
                async move {
                    let tool = if i < n_park { "park" } else { "hold" };
                    let t = create(&a, task(tool, json!({}))).await.unwrap();
                    ids.lock().unwrap()[i] = t.id;
                }
            })
            .await;
            until(
                "engine A's tasks to park or hold",
                Duration::from_secs(600),
                || {
                    ASKED.load(Ordering::SeqCst) >= asked0 + n_park
                        && HELD.load(Ordering::SeqCst) >= held0 + n_work
                },
            )
            .await;
            let ids = ids.lock().unwrap().clone();
            for id in &ids[..n_park] {
                loop {
                    if a.get(id, None).await.unwrap().status == TaskStatus::InputRequired {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
            (ids[..n_park].to_vec(), ids[n_park..].to_vec())
        })
        .await
        .unwrap();
    rt_a.shutdown_background();
    HOLD.store(false, Ordering::SeqCst);
    // A crashed: its working tasks wait out its leases before anyone may
    // claim them. Measured from there, recovery is the replay alone.
    tokio::time::sleep(A_LEASE).await;

    // Engine B on the same database.
    let store_b = db.open().await;
    let t0 = Instant::now();
    let engine = engine(store_b).await;
    let started = t0.elapsed();
    for id in &working_ids {
        let r = engine
            .wait(id, None, Duration::from_secs(600))
            .await
            .unwrap();
        assert_eq!(r.status, TaskStatus::Completed, "{r:?}");
    }
    let resumed = t0.elapsed();
    for id in &parked_ids {
        let r = engine.get(id, None).await.unwrap();
        assert_eq!(r.status, TaskStatus::InputRequired);
    }
    println!(
        "  recovery                  {n} unfinished ({n_park} parked, {n_work} working after a checkpoint)"
    );
    println!(
        "    start() returned after {}   (its first scan claims the working tasks in pages, as workers allow)",
        ms(started)
    );
    println!(
        "    all {n_work} working tasks replayed and completed after {}   (from calling start(); {:.0} tasks/s)",
        ms(resumed),
        n_work as f64 / resumed.as_secs_f64()
    );
}

/// The Postgres server, and a schema per run.
mod pg {
    use std::time::Duration;

    use tokio_postgres::{Client, NoTls};

    const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

    /// `MCP_TASKS_POSTGRES_URL`, or the local server.
    pub(crate) fn url() -> String {
        std::env::var("MCP_TASKS_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
    }

    async fn connect(url: &str) -> Result<Client, tokio_postgres::Error> {
        let mut config: tokio_postgres::Config = url.parse()?;
        config.connect_timeout(Duration::from_secs(5));
        let (client, connection) = config.connect(NoTls).await?;
        tokio::spawn(connection);
        Ok(client)
    }

    /// The server's version if it answers at `url`, or why not.
    pub(crate) async fn probe(url: &str) -> Result<String, String> {
        let client = connect(url).await.map_err(|e| e.to_string())?;
        let row = client
            .query_one("SELECT version()", &[])
            .await
            .map_err(|e| e.to_string())?;
        Ok(row.get(0))
    }

    /// A schema for one run, dropped with everything in it when this drops.
    pub(crate) type Schema = mcp_tasks_runtime::store::testing::PostgresSchema;
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this too:
    // keep that run tiny.
    let sizes = if std::env::args().any(|a| a == "--bench") {
        Sizes::from_env()
    } else {
        Sizes {
            creates: 20,
            creators: 4,
            step_tasks: 4,
            steps: 3,
            parked: 50,
            recover: 20,
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "mcp-tasks engine benchmarks on SQLite and Postgres ({} CPUs)",
        std::thread::available_parallelism().map_or(0, std::num::NonZeroUsize::get)
    );
    rt.block_on(async {
        println!("\n[memory per parked task, SQLite synchronous=FULL]");
        parked_memory(&sizes, &Backend::Sqlite(Synchronous::Full)).await;
        let mut backends = vec![
            Backend::Sqlite(Synchronous::Full),
            Backend::Sqlite(Synchronous::Normal),
        ];
        // A benchmark, not a test: without a server, say so and go on (with
        // `CI` set too).
        let url = pg::url();
        match pg::probe(&url).await {
            Ok(version) => {
                println!("\nPostgres: {version}");
                backends.push(Backend::Postgres(url));
            }
            Err(e) => println!("\nPostgres: not reachable at {url} ({e}), skipped"),
        }
        for backend in &backends {
            println!("\n[{}]", backend.name());
            creation(&sizes, backend).await;
            checkpoints(&sizes, backend).await;
            recovery(&sizes, backend).await;
        }
    });
}
