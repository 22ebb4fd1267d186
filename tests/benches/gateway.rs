//! What the gateway adds to a call, beside the same call made directly.
//!
//! The upstream is `tests/e2e/upstreams/slow_server.py` (the official
//! Python SDK, `mcp` from PyPI, installed by `.ci/upstreams.sh`), over
//! stdio; each call is its `report` tool with one step of 50 ms. One after
//! another, three ways, each on an upstream process of its own:
//! - direct: an rmcp client of this process calls the upstream;
//! - gateway, plain call: a 2026-07-28 client that did not declare the
//!   tasks extension calls the gateway (SQLite `FULL`), which runs the call
//!   inline and answers with its result;
//! - gateway, task: a client that declared the extension gets a task, then
//!   polls `tasks/get` every 2 ms until it has completed (so up to 2 ms of
//!   the figure is the polling's).
//!
//! Latency is from the request until the result is in hand; CPU is the
//! gateway's (user + system, `/proc/<pid>/stat`) and the upstream's, per
//! call. `cargo bench -p mcp-tasks-tests --bench gateway` (release;
//! `MCP_TASKS_BENCH_QUICK=1` for a short run); `cargo test --benches` runs
//! it tiny.

mod support;

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use rmcp::{ServiceExt, model::CallToolRequestParams, transport::TokioChildProcess};
use serde_json::{Value, json};
use support::{Client, Size, cpu_time, ms, percentile, ratio};

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The upstream's command line: the virtualenv's python and the server.
fn upstream() -> Vec<String> {
    let python = support::upstreams("python").remove(0);
    let script = root().join("tests/e2e/upstreams/slow_server.py");
    vec![python, script.display().to_string(), "stdio".to_owned()]
}

/// The `report` call's arguments: one step of 50 ms.
fn arguments(i: usize) -> Value {
    json!({"label": format!("b{i}"), "steps": 1, "delay": 0.05})
}

/// The children of process `pid` (the gateway's upstream: a process a
/// session), found by their parent: a thread's `children` list misses the
/// children its other threads started.
fn children(pid: u32) -> Vec<u32> {
    let parent = format!("PPid:\t{pid}");
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let child: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let status = std::fs::read_to_string(format!("/proc/{child}/status")).ok()?;
            status.lines().any(|l| l == parent).then_some(child)
        })
        .collect()
}

struct Figures {
    p50: Duration,
    p95: Duration,
    gateway_cpu: Option<Duration>,
    upstream_cpu: Duration,
    /// `tasks/get` requests per call (the task way's polls).
    gets: f64,
}

async fn direct(calls: usize, line: &[String]) -> Figures {
    let mut command = tokio::process::Command::new(&line[0]);
    command.args(&line[1..]);
    let transport = TokioChildProcess::new(command).expect("the upstream starts");
    let pid = transport.id().expect("its pid");
    let client = ().serve(transport).await.expect("the client connects");
    let mut took = Vec::with_capacity(calls);
    let cpu = cpu_time(pid);
    for i in 0..calls {
        let params = CallToolRequestParams::new("report")
            .with_arguments(arguments(i).as_object().cloned().unwrap());
        let began = Instant::now();
        let result = client.peer().call_tool(params).await.expect("the call");
        took.push(began.elapsed());
        assert_eq!(result.is_error, Some(false), "{result:?}");
    }
    let upstream_cpu = (cpu_time(pid) - cpu) / calls as u32;
    client.cancel().await.ok();
    took.sort();
    Figures {
        p50: percentile(&took, 0.5),
        p95: percentile(&took, 0.95),
        gateway_cpu: None,
        upstream_cpu,
        gets: 0.0,
    }
}

async fn through_gateway(calls: usize, line: &[String], task: bool) -> Figures {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(support::bin("mcp-tasks-gateway"));
    command
        .args(["--addr", "127.0.0.1:0", "--store"])
        .arg(dir.path().join("gateway.db"))
        .env("RUST_LOG", "error")
        .arg("--")
        .args(line);
    let server = support::Server::spawn(command, Duration::from_secs(60));
    let client = Client::new(&server.url);
    let meta = if task {
        json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}})
    } else {
        json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {}})
    };
    // As the direct client is connected before it is measured: one call
    // first (it opens the call's upstream session), and a second for the
    // gateway's other session (the one that listens for the upstream's
    // tool changes) to have started; neither is counted.
    let warm = json!({"name": "report", "arguments": arguments(calls), "_meta": meta});
    send(&client, "tools/call", warm, "report").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let upstream = children(server.pid());
    let gateway_cpu = cpu_time(server.pid());
    let upstream_cpu: Duration = upstream.iter().map(|p| cpu_time(*p)).sum();
    let mut took = Vec::with_capacity(calls);
    let mut gets = 0;
    for i in 0..calls {
        let began = Instant::now();
        let params = json!({"name": "report", "arguments": arguments(i), "_meta": meta});
        let answer = send(&client, "tools/call", params, "report").await;
        let result = if task {
            let id = answer["result"]["taskId"]
                .as_str()
                .expect("a task")
                .to_owned();
            loop {
                let got = send(
                    &client,
                    "tasks/get",
                    json!({"taskId": id, "_meta": meta}),
                    &id,
                )
                .await;
                gets += 1;
                if got["result"]["status"] == "completed" {
                    break got["result"]["result"].clone();
                }
                assert_eq!(got["result"]["status"], "working", "{got}");
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        } else {
            answer["result"].clone()
        };
        took.push(began.elapsed());
        assert_eq!(result["isError"], json!(false), "{result}");
    }
    let gateway_cpu = (cpu_time(server.pid()) - gateway_cpu) / calls as u32;
    let upstream_cpu =
        (upstream.iter().map(|p| cpu_time(*p)).sum::<Duration>() - upstream_cpu) / calls as u32;
    took.sort();
    Figures {
        p50: percentile(&took, 0.5),
        p95: percentile(&took, 0.95),
        gateway_cpu: Some(gateway_cpu),
        upstream_cpu,
        gets: f64::from(gets) / calls as f64,
    }
}

/// Sends one request with these exact `params` (`_meta` included).
async fn send(client: &Client, method: &str, params: Value, name: &str) -> Value {
    let reply = client
        .http
        .post(&client.url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method)
        .header("Mcp-Name", name)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .expect("the gateway answers");
    let body: Value = reply.json().await.expect("JSON");
    assert!(body.get("result").is_some(), "{body}");
    body
}

#[tokio::main]
async fn main() {
    let size = Size::from_args();
    let calls = size.pick(5, 200, 1_000);
    let line = upstream();
    println!(
        "gateway: {calls} calls one after another of the Python SDK server's `report` (one 50 ms \
         step), {} build, {} CPUs",
        support::profile(),
        support::cpus()
    );
    let direct = direct(calls, &line).await;
    let plain = through_gateway(calls, &line, false).await;
    let task = through_gateway(calls, &line, true).await;
    println!(
        "| way | latency p50 | p95 | added p50 | gateway CPU / call | upstream CPU / call | tasks/get / call |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (way, f) in [
        ("direct (rmcp client, stdio)", &direct),
        ("gateway, plain call (inline)", &plain),
        ("gateway, task (polled every 2 ms)", &task),
    ] {
        let added = f.p50.saturating_sub(direct.p50);
        println!(
            "| {way} | {} | {} | {}{} | {} | {} µs | {:.1} |",
            ms(f.p50),
            ms(f.p95),
            ms(added),
            ratio(f.p50.as_secs_f64(), direct.p50.as_secs_f64()),
            f.gateway_cpu
                .map_or_else(|| "-".to_owned(), |c| format!("{} µs", c.as_micros())),
            f.upstream_cpu.as_micros(),
            f.gets,
        );
    }
}
