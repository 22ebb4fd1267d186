//! Over-the-wire figures for the conformance server (a separate release
//! process on 127.0.0.1, SQLite in a temporary file): `tools/call` creating a
//! durable task, and `tasks/get`, with latency seen by a sequential client and
//! the server's own CPU time per request (from `/proc/<pid>/stat`), with few
//! and with 10,000 tasks held. Prints figures; asserts nothing about speed.
//!
//! Run with `cargo bench -p mcp-tasks-examples --bench http`
//! (`MCP_TASKS_BENCH_QUICK=1` for a short run).

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

fn quick() -> bool {
    std::env::var_os("MCP_TASKS_BENCH_QUICK").is_some()
}

/// User + system CPU time of process `pid`, from `/proc/<pid>/stat`.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("procfs");
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

struct Client {
    http: reqwest::Client,
    url: String,
}

impl Client {
    async fn send(&self, method: &str, params: Value, name: &str) -> Value {
        let mut params = params;
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
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
        let body: Value = resp.json().await.expect("JSON");
        assert!(body.get("result").is_some(), "{body}");
        body
    }

    async fn create(&self) -> String {
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

async fn measure(label: &str, n: usize, pid: u32, mut f: impl AsyncFnMut(usize)) {
    let mut lat = Vec::with_capacity(n);
    let cpu0 = cpu_time(pid);
    let t0 = Instant::now();
    for i in 0..n {
        let s = Instant::now();
        f(i).await;
        lat.push(s.elapsed());
    }
    let wall = t0.elapsed();
    let cpu = cpu_time(pid) - cpu0;
    lat.sort();
    println!(
        "  {label:<34} n={n:<6} p50 {:>7.3} ms  p99 {:>7.3} ms  rate {:>6.0}/s  server CPU {:>6.1} µs/request",
        percentile(&lat, 0.5).as_secs_f64() * 1e3,
        percentile(&lat, 0.99).as_secs_f64() * 1e3,
        n as f64 / wall.as_secs_f64(),
        cpu.as_secs_f64() * 1e6 / n as f64,
    );
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_conformance"))
        .args(["--addr", "127.0.0.1:0", "--store"])
        .arg(dir.path().join("bench.db"))
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .spawn()
        .expect("the conformance server starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("the server prints its URL")
        .to_owned();
    let pid = child.id();
    let client = Client {
        http: reqwest::Client::new(),
        url,
    };
    let (n_create, n_get, held) = if quick() {
        (200, 500, 1_000)
    } else {
        (2_000, 5_000, 10_000)
    };

    println!(
        "mcp-tasks over HTTP on 127.0.0.1 (conformance server, SQLite synchronous=FULL, 2 CPUs)"
    );
    // Warm up the connection and the server.
    for _ in 0..50 {
        client.create().await;
    }
    let mut ids = Vec::new();
    measure("tools/call -> durable task", n_create, pid, async |_| {
        ids.push(client.create().await);
    })
    .await;
    measure(
        "server/discover (no store: baseline)",
        n_get,
        pid,
        async |_| {
            client.send("server/discover", json!({}), "").await;
        },
    )
    .await;
    let probe = ids[0].clone();
    measure("tasks/get, few tasks held", n_get, pid, async |_| {
        client
            .send("tasks/get", json!({"taskId": probe}), &probe)
            .await;
    })
    .await;
    while ids.len() < held {
        ids.push(client.create().await);
    }
    measure(
        &format!("tasks/get, {held} tasks held"),
        n_get,
        pid,
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
    let _ = child.kill();
    let _ = child.wait();
}
