//! What the over-the-wire benchmarks share: the run's size, example servers
//! as processes, a raw JSON-RPC client, CPU time from procfs, and a Postgres
//! schema per run.

#![allow(dead_code, unreachable_pub)] // Each bench uses its own part of this.

use std::{
    path::Path,
    thread,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

/// How big a run is: `cargo bench` passes `--bench` (full, or quick with
/// `MCP_TASKS_BENCH_QUICK` set); `cargo test --benches` does not (tiny).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    Tiny,
    Quick,
    Full,
}

impl Size {
    pub fn from_args() -> Self {
        if !std::env::args().any(|a| a == "--bench") {
            Self::Tiny
        } else if std::env::var("MCP_TASKS_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0") {
            Self::Quick
        } else {
            Self::Full
        }
    }

    /// The levels of tasks a growth bench fills its stores to: 100 and
    /// 1,000 tiny, up to 100,000 quick, up to a million full.
    pub fn task_levels(self) -> &'static [usize] {
        self.pick(
            &[100, 1_000],
            &[1_000, 10_000, 100_000],
            &[1_000, 10_000, 100_000, 1_000_000],
        )
    }

    /// One of three figures, by size.
    pub fn pick<T>(self, tiny: T, quick: T, full: T) -> T {
        match self {
            Self::Tiny => tiny,
            Self::Quick => quick,
            Self::Full => full,
        }
    }
}

/// How the servers measured were built: `release` under `cargo bench`,
/// `debug` under `cargo test --benches` (a tiny run, its figures only a
/// check that the bench runs).
pub fn profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// The CPUs this machine has.
pub fn cpus() -> usize {
    thread::available_parallelism().map_or(0, std::num::NonZeroUsize::get)
}

/// `perf record` of a server process while this lives, when `MCP_TASKS_PERF`
/// names a directory: `perf record --call-graph dwarf -p PID` writes
/// `DIR/NAME.data` (read it with `perf report -i`; NAME has every character
/// but ASCII letters and digits made `-`). Without it, nothing runs.
pub struct Profile(Option<std::process::Child>);

impl Profile {
    pub fn start(pid: u32, name: &str) -> Self {
        let Some(dir) = std::env::var_os("MCP_TASKS_PERF") else {
            return Self(None);
        };
        if pid == 0 {
            return Self(None);
        }
        let name: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let out = std::path::Path::new(&dir).join(format!("{name}.data"));
        let child = std::process::Command::new("perf")
            .args([
                "record",
                "-q",
                "-F",
                "2999",
                "--call-graph",
                "dwarf,16384",
                "-p",
                &pid.to_string(),
                "-o",
            ])
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("perf runs (Debian's linux-perf)");
        // perf needs a moment to attach.
        std::thread::sleep(Duration::from_millis(300));
        Self(Some(child))
    }
}

impl Drop for Profile {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = std::process::Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }
}

/// User + system CPU time of process `pid`, from `/proc/<pid>/stat`; zero
/// once the process is gone.
pub fn cpu_time(pid: u32) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

/// The `p` quantile (0..=1) of sorted durations.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

pub fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

#[path = "../../e2e/common/process.rs"]
mod process;

pub use process::StoreArgs;
#[allow(unused_imports)] // Not every bench starts a server.
pub use process::bin;
#[allow(unused_imports)] // Only the gateway's bench runs an upstream.
pub use process::upstreams;

/// An example server process on 127.0.0.1, in a process group of its own,
/// killed when this drops.
pub type Server = process::ServerProcess;

/// Starts `bin` on `store` with `args` (`--instance`, `--lease`, ...);
/// `effects`: the fleet fixture's effects file.
pub fn start_server(bin: &str, store: &StoreArgs, args: &[&str], effects: Option<&Path>) -> Server {
    // No create rate or unfinished cap: the benchmarks measure throughput.
    let mut args = args.to_vec();
    args.extend([
        "--limit",
        "creates_per_second=inf",
        "--limit",
        "max_unfinished_per_principal=1000000000",
        "--limit",
        "max_unfinished_per_address=1000000000",
        "--limit",
        "max_listens_per_principal=1000000",
        "--limit",
        "max_listens_per_task=1000000",
        // Every client on loopback is one client: no cap on its
        // connections but `--max-connections`.
        "--max-connections-per-client",
        "1000000",
    ]);
    Server::start(bin, store, &args, effects, Duration::from_secs(30))
}

/// A raw JSON-RPC client over HTTP (2026-07-28, stateless).
#[derive(Debug, Clone)]
pub struct Client {
    pub http: reqwest::Client,
    pub url: String,
}

impl Client {
    pub fn new(url: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            url: url.to_owned(),
        }
    }

    pub async fn send(&self, method: &str, params: Value, name: &str) -> Value {
        let mut params = params;
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {
                "extensions": {"io.modelcontextprotocol/tasks": {}},
                "elicitation": {},
            },
        });
        let mut req = self
            .http
            .post(&self.url)
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", method)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
        if !name.is_empty() {
            req = req.header("Mcp-Name", name);
        }
        let resp = req.send().await.expect("the server answers");
        let sse = resp
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        let text = resp.text().await.expect("a body");
        // An SSE answer: its last `data:` line is the response.
        let json = if sse {
            text.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim)
                .rfind(|d| !d.is_empty())
                .unwrap_or_default()
        } else {
            &text
        };
        let body: Value = serde_json::from_str(json).expect("JSON");
        assert!(body.get("result").is_some(), "{body}");
        body
    }

    /// `tools/call` of the conformance server's `slow_compute` (an hour):
    /// a durable task that sleeps on a timer. Returns its id.
    pub async fn create(&self) -> String {
        let body = self
            .send(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 3600, "label": "bench"}}),
                "slow_compute",
            )
            .await;
        body["result"]["taskId"]
            .as_str()
            .expect("a task")
            .to_owned()
    }
}

impl Client {
    /// `tools/call` of the conformance server's `confirm_delete`: a task
    /// that parks `input_required` on its question. Returns its id.
    pub async fn parked(&self) -> String {
        let body = self
            .send(
                "tools/call",
                json!({"name": "confirm_delete", "arguments": {"filename": "bench"}}),
                "confirm_delete",
            )
            .await;
        body["result"]["taskId"]
            .as_str()
            .expect("a task")
            .to_owned()
    }
}

/// ` (1.23×)`: `value`'s ratio to a level's `base`, for a table cell; empty
/// when the base is zero.
pub fn ratio(value: f64, base: f64) -> String {
    if base > 0.0 {
        format!(" ({:.2}×)", value / base)
    } else {
        String::new()
    }
}

/// An open `subscriptions/listen` stream (SSE), read message by message.
pub struct Listener {
    events: futures::stream::BoxStream<'static, reqwest::Result<Vec<u8>>>,
    buffer: Vec<u8>,
}

impl Listener {
    /// Listens to `ids`; returns once the acknowledgement has arrived.
    pub async fn open(client: &Client, ids: &[&str]) -> Self {
        use futures::StreamExt as _;
        let params = json!({
            "notifications": {"taskIds": ids},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
            },
        });
        let resp = client
            .http
            .post(&client.url)
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", "subscriptions/listen")
            .json(&json!({"jsonrpc": "2.0", "id": "listen", "method": "subscriptions/listen", "params": params}))
            .send()
            .await
            .expect("the server answers");
        let mut listener = Self {
            events: resp.bytes_stream().map(|c| c.map(|b| b.to_vec())).boxed(),
            buffer: Vec::new(),
        };
        let ack = listener.next().await.expect("an acknowledgement");
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "{ack}"
        );
        listener
    }

    /// The next message, or `None` when the stream ended.
    pub async fn next(&mut self) -> Option<Value> {
        use futures::StreamExt as _;
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buffer.drain(..end + 2).collect();
                let text = String::from_utf8_lossy(&event).into_owned();
                let data: String = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                if data.is_empty() {
                    continue;
                }
                return Some(serde_json::from_str(&data).expect("JSON"));
            }
            let chunk = self.events.next().await?.expect("the stream");
            self.buffer.extend_from_slice(&chunk);
        }
    }

    /// Reads until the task notified has `status`; returns how many
    /// `notifications/tasks` were read.
    pub async fn until(&mut self, status: &str) -> usize {
        let mut n = 0;
        loop {
            let message = self.next().await.expect("the stream is open");
            if message["method"] == "notifications/tasks" {
                n += 1;
                let now = &message["params"]["status"];
                if now == status {
                    return n;
                }
                let terminal = ["completed", "failed", "cancelled"];
                assert!(
                    !terminal.iter().any(|t| now == t),
                    "waited for {status}, the task ended: {message}"
                );
            }
        }
    }
}

/// A process's resident memory, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The Postgres server, and a schema per run.
pub mod pg {
    use std::time::Duration;

    use mcp_tasks_runtime::store::testing::PostgresSchema;
    pub use mcp_tasks_runtime::store::testing::postgres_url as url;

    use tokio_postgres::{Client, NoTls};

    pub async fn connect(url: &str) -> Result<Client, tokio_postgres::Error> {
        let mut config: tokio_postgres::Config = url.parse()?;
        config.connect_timeout(Duration::from_secs(5));
        let (client, connection) = config.connect(NoTls).await?;
        tokio::spawn(connection);
        Ok(client)
    }

    /// The server's version if it answers at `url`, or why not.
    pub async fn probe(url: &str) -> Result<String, String> {
        let client = connect(url).await.map_err(|e| e.to_string())?;
        let row = client
            .query_one("SELECT version()", &[])
            .await
            .map_err(|e| e.to_string())?;
        Ok(row.get(0))
    }

    /// The server's URL, or `None` after printing that Postgres is skipped.
    /// Never fails: these are benchmarks, not tests.
    pub async fn server_or_skip() -> Option<String> {
        let url = url();
        match probe(&url).await {
            Ok(version) => {
                println!("Postgres: {version}");
                Some(url)
            }
            Err(e) => {
                println!("Postgres: not reachable at {url} ({e}), skipped");
                None
            }
        }
    }

    /// The process ids of the server backends serving `application_name`.
    pub async fn backends(client: &Client, application_name: &str) -> Vec<u32> {
        client
            .query(
                "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
                &[&application_name],
            )
            .await
            .map(|rows| {
                rows.iter()
                    .map(|r| u32::try_from(r.get::<_, i32>(0)).unwrap_or(0))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The backends serving one application name (a schema's servers), to
    /// count their CPU time.
    #[derive(Debug)]
    pub struct Backends {
        pub client: Client,
        pub application_name: String,
    }

    impl Backends {
        /// The backends' pids and CPU time now.
        pub async fn sample(&self) -> Vec<(u32, Duration)> {
            backends(&self.client, &self.application_name)
                .await
                .into_iter()
                .map(|pid| (pid, super::cpu_time(pid)))
                .collect()
        }
    }

    /// CPU time the backends in `after` used since `before` (new ones from
    /// zero).
    pub fn backend_cpu(before: &[(u32, Duration)], after: &[(u32, Duration)]) -> Duration {
        after
            .iter()
            .map(|(pid, cpu)| {
                let was = before
                    .iter()
                    .find(|(p, _)| p == pid)
                    .map_or(Duration::ZERO, |(_, c)| *c);
                cpu.saturating_sub(was)
            })
            .sum()
    }

    /// A schema for each level of a run, each dropped when this drops.
    #[derive(Debug)]
    pub struct Levels(Vec<(usize, Schema)>);

    impl Levels {
        pub fn new(url: &str, levels: &[usize]) -> Self {
            Self(levels.iter().map(|&l| (l, Schema::new(url))).collect())
        }

        /// What the servers of level `level` are started with.
        pub fn store(&self, level: usize) -> super::StoreArgs {
            let (_, schema) = self
                .0
                .iter()
                .find(|(l, _)| *l == level)
                .expect("a level of the run");
            schema.store()
        }
    }

    /// A schema for one run, dropped with everything in it when this drops.
    #[derive(Debug)]
    pub struct Schema(PostgresSchema);

    impl Schema {
        pub fn new(url: &str) -> Self {
            Self(PostgresSchema::new(url, "mcp_tasks_bench"))
        }

        pub fn name(&self) -> &str {
            self.0.name()
        }

        /// The server's URL with the schema's name as the application name,
        /// so that its backends can be found, and ended at the drop.
        pub fn url(&self) -> String {
            self.0.url()
        }

        /// What the servers on this schema are started with.
        pub fn store(&self) -> super::StoreArgs {
            super::StoreArgs::Postgres {
                url: self.url(),
                schema: self.name().to_owned(),
            }
        }
    }
}

/// Opens `store` in this process (to write into it directly, as the
/// `growth` and `journal` benches set their stores up).
pub async fn open_store(store: &StoreArgs) -> std::sync::Arc<dyn mcp_tasks_runtime::store::Store> {
    use mcp_tasks_runtime::store::{PostgresStore, SqliteStore};
    match store {
        StoreArgs::Sqlite(path) => {
            std::sync::Arc::new(SqliteStore::open(path).await.expect("the SQLite file"))
        }
        StoreArgs::Postgres { url, schema } => std::sync::Arc::new(
            PostgresStore::builder(url.clone())
                .schema(schema.clone())
                .connect()
                .await
                .expect("the Postgres schema"),
        ),
        StoreArgs::Memory => unreachable!("a memory store holds nothing between processes"),
    }
}

/// Now, in Unix milliseconds (as the stores record times).
pub fn unix_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is past 1970");
    i64::try_from(since.as_millis()).expect("a time in range")
}

/// `d` in milliseconds.
pub fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The p50 and p99 of `lat`, in milliseconds (sorts it).
pub fn p50_p99(lat: &mut [Duration]) -> (f64, f64) {
    lat.sort();
    (millis(percentile(lat, 0.5)), millis(percentile(lat, 0.99)))
}

/// This disk's cost of a durable write, as a WAL commit makes it: a 4 KiB
/// block written over space the file already has (as SQLite reuses its
/// WAL), then `fdatasync`, in the directory the SQLite store uses. Returns
/// what it measured.
pub fn fsync_floor(dir: &Path, n: usize) -> Floor {
    use std::os::unix::fs::FileExt as _;
    const BLOCKS: u64 = 256;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.join("fsync-probe"))
        .expect("a probe file");
    file.write_all_at(&vec![0u8; (BLOCKS * 4096) as usize], 0)
        .unwrap();
    file.sync_all().unwrap();
    let block = [7u8; 4096];
    let mut lat = Vec::with_capacity(n);
    let cpu_before = thread_cpu_ns();
    for i in 0..n as u64 {
        let s = Instant::now();
        file.write_all_at(&block, (i % BLOCKS) * 4096).unwrap();
        file.sync_data().unwrap();
        lat.push(s.elapsed());
    }
    let cpu_ns = thread_cpu_ns().saturating_sub(cpu_before);
    let (p50, p99) = p50_p99(&mut lat);
    Floor {
        p50,
        p99,
        cpu_us: cpu_ns as f64 / 1e3 / n.max(1) as f64,
    }
}

/// What [`fsync_floor`] measured.
#[derive(Debug, Clone, Copy)]
pub struct Floor {
    /// Latency of one durable write, p50, ms.
    pub p50: f64,
    /// Latency of one durable write, p99, ms.
    pub p99: f64,
    /// The CPU time (user + system, µs) one durable write took this
    /// process, on average: the write and the `fdatasync` system call, off
    /// the probing thread's own clock.
    pub cpu_us: f64,
}

/// The CPU time this thread has run, in nanoseconds, from
/// `/proc/thread-self/schedstat` (finer than the 10 ms ticks of `stat`).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The CPU time process `pid` has run, all its threads, from their
/// `schedstat` (nanoseconds, finer than the 10 ms ticks of [`cpu_time`]);
/// zero once it is gone.
pub fn process_cpu(pid: u32) -> Duration {
    let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Duration::ZERO;
    };
    let ns: u64 = threads
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

/// Whether `MCP_TASKS_BENCH_SERVERS` (comma-separated words, matched
/// case-insensitively against the column name) selects the server `name`;
/// every server when it is not set.
pub fn selected(name: &str) -> bool {
    let Ok(words) = std::env::var("MCP_TASKS_BENCH_SERVERS") else {
        return true;
    };
    let name = name.to_lowercase();
    words
        .split(',')
        .map(|w| w.trim().to_lowercase())
        .any(|w| !w.is_empty() && name.contains(&w))
}

/// The text of ours' `/metrics` at the admin address `admin`.
pub async fn scrape(admin: &str) -> String {
    reqwest::get(format!("{admin}metrics"))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("the metrics' text")
}
