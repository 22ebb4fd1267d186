//! Traces through OpenTelemetry, on a real process: the demo server with
//! `--otlp-endpoint` posts its spans as OTLP/HTTP (protobuf) to a collector
//! this test runs on 127.0.0.1, which decodes them with the OTLP types
//! (`opentelemetry-proto`). A `deploy` checkpoints its build, parks on the
//! approval, is answered and completes; the collector must then hold two
//! `task_run` spans (`parked`, then `done`) with their `step` children, and
//! the task's id nowhere in what it received. Spans leave every 100 ms, or,
//! with a 10-minute interval, only when the SIGTERM drains the server. A
//! collector that is down is logged and changes nothing else.

mod common;

use std::{
    collections::BTreeMap,
    io::{BufRead as _, BufReader},
    os::unix::process::CommandExt as _,
    path::Path,
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{Router, body::Bytes, extract::State, routing::post};
use common::{call, http_client, is_terminal, poll_until, task_id, update};
use opentelemetry_proto::tonic::{
    collector::trace::v1::ExportTraceServiceRequest,
    common::v1::{AnyValue, KeyValue, any_value::Value},
    trace::v1::{Span, status::StatusCode},
};
use prost::Message as _;
use rmcp::model::TaskStatus;
use serde_json::json;

/// What the collector received: each request's body, as sent.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<Vec<u8>>>>);

impl Received {
    fn bodies(&self) -> Vec<Vec<u8>> {
        self.0.lock().unwrap().clone()
    }

    /// Every span received, with its resource's `service.name`.
    fn spans(&self) -> Vec<(String, Span)> {
        let mut spans = Vec::new();
        for body in self.bodies() {
            let request = ExportTraceServiceRequest::decode(body.as_slice())
                .expect("an OTLP ExportTraceServiceRequest");
            for resource in request.resource_spans {
                let service = resource
                    .resource
                    .iter()
                    .flat_map(|r| &r.attributes)
                    .find(|kv| kv.key == "service.name")
                    .map(|kv| text(kv.value.as_ref()))
                    .unwrap_or_default();
                for scope in resource.scope_spans {
                    for span in scope.spans {
                        spans.push((service.clone(), span));
                    }
                }
            }
        }
        spans
    }
}

/// An OTLP/HTTP collector on 127.0.0.1: `POST /v1/traces` keeps the body
/// and answers with an empty `ExportTraceServiceResponse`.
async fn collector() -> (String, Received) {
    let received = Received::default();
    let app = Router::new()
        .route(
            "/v1/traces",
            post(|State(r): State<Received>, body: Bytes| async move {
                r.0.lock().unwrap().push(body.to_vec());
                ([("content-type", "application/x-protobuf")], Vec::new())
            }),
        )
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, received)
}

/// The demo server, at no pace, exporting to `endpoint` every
/// `schedule_delay_ms`, its stderr where `stderr` says; killed on drop.
struct Demo {
    child: Child,
    url: String,
}

impl Demo {
    fn start(store: &Path, endpoint: &str, schedule_delay_ms: u64, stderr: Stdio) -> Self {
        let mut child = Command::new(common::bin("demo"))
            .args(["--addr", "127.0.0.1:0", "--store"])
            .arg(store)
            .args(["--otlp-endpoint", endpoint])
            .env("RUST_LOG", "error")
            .env("MCP_TASKS_DEMO_PACE", "0")
            .env("OTEL_BSP_SCHEDULE_DELAY", schedule_delay_ms.to_string())
            .env_remove("OTEL_SERVICE_NAME")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .process_group(0)
            .spawn()
            .expect("the demo starts");
        let (url, _) = common::process::listening(&mut child, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("the server did not say where it listens: {e}"));
        Self { child, url }
    }

    /// SIGTERM (the graceful drain), then waits at most 30 s for the exit.
    fn terminate(&mut self) -> ExitStatus {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "the demo did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// An attribute's value as text (`bool` and `int` values too).
fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::IntValue(i)) => i.to_string(),
        other => format!("{other:?}"),
    }
}

fn attributes(attributes: &[KeyValue]) -> BTreeMap<String, String> {
    attributes
        .iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

/// Waits at most 30 s until the collector holds a `task_run` span that
/// ended `exit`.
async fn wait_for_run(received: &Received, exit: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !received
        .spans()
        .iter()
        .any(|(_, s)| s.name == "task_run" && attributes(&s.attributes)["mcp_tasks.exit"] == exit)
    {
        assert!(
            Instant::now() < deadline,
            "no `{exit}` run reached the collector"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs a `deploy` that parks on its approval, answers it, waits for the
/// end, and stops the server with SIGTERM. Returns the task's id. With
/// `live`, the parked run's span must reach the collector while the task
/// waits; without, nothing may reach it before the SIGTERM.
async fn deploy_then_terminate(
    dir: &Path,
    endpoint: &str,
    received: &Received,
    live: bool,
) -> String {
    let delay = if live { 100 } else { 600_000 };
    let mut demo = Demo::start(&dir.join("demo.db"), endpoint, delay, Stdio::inherit());
    let client = http_client(&demo.url, true).await;
    let id = task_id(
        client
            .call_tool_once(call(
                "deploy",
                json!({"service": "billing", "git_ref": "v2.3.0"}),
            ))
            .await
            .unwrap(),
    );
    poll_until(&client, &id, |t| t.status() == TaskStatus::InputRequired).await;
    if live {
        wait_for_run(received, "parked").await;
    }
    update(
        &client,
        &id,
        json!({"approval": {"action": "accept", "content": {"approve": true}}}),
    )
    .await;
    let done = poll_until(&client, &id, is_terminal).await;
    assert_eq!(done.status(), TaskStatus::Completed);
    client.cancel().await.unwrap();
    if !live {
        // The batch leaves every 10 minutes: only the shutdown sends it.
        assert!(received.bodies().is_empty(), "exported before the SIGTERM");
    }
    let status = demo.terminate();
    assert!(
        status.success(),
        "the demo exits 0 after its drain: {status}"
    );
    id
}

/// The spans of one `deploy`: its two runs, `parked` then `done`, and the
/// steps under each, by parent span id; the attributes' values; and the
/// task's id in no byte the collector received.
fn check_traces(received: &Received, id: &str) {
    let spans = received.spans();
    let mut runs: Vec<&Span> = spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.name == "task_run")
        .collect();
    assert_eq!(runs.len(), 2, "two runs: {spans:#?}");
    runs.sort_by_key(|s| s.start_time_unix_nano);
    for (service, _) in &spans {
        assert_eq!(service, "mcp-tasks-demo");
    }

    let run_attrs: Vec<_> = runs.iter().map(|r| attributes(&r.attributes)).collect();
    for attrs in &run_attrs {
        assert_eq!(attrs["mcp_tasks.tool"], "deploy");
        assert_eq!(attrs["mcp_tasks.task.ref"], id[..8]);
        let mut keys: Vec<_> = attrs.keys().map(String::as_str).collect();
        keys.retain(|k| !matches!(*k, "busy_ns" | "idle_ns"));
        assert_eq!(
            keys,
            [
                "mcp_tasks.attempt",
                "mcp_tasks.exit",
                "mcp_tasks.task.ref",
                "mcp_tasks.tool"
            ]
        );
    }
    assert_eq!(run_attrs[0]["mcp_tasks.exit"], "parked");
    assert_eq!(run_attrs[1]["mcp_tasks.exit"], "done");
    let attempt = |i: usize| run_attrs[i]["mcp_tasks.attempt"].parse::<u64>().unwrap();
    assert!(attempt(0) >= 1 && attempt(1) > attempt(0));
    assert_eq!(
        runs[1].status.as_ref().map(|s| s.code),
        Some(StatusCode::Ok as i32)
    );
    for run in &runs {
        assert!(run.parent_span_id.is_empty(), "a run is a trace's root");
    }
    assert_ne!(runs[0].trace_id, runs[1].trace_id);

    // Each run's steps: (position, kind, name, replayed), by position.
    let steps = |run: &Span| -> Vec<(i64, String, String, bool)> {
        let mut children: Vec<&Span> = spans
            .iter()
            .map(|(_, s)| s)
            .filter(|s| s.parent_span_id == run.span_id)
            .collect();
        children.sort_by_key(|s| {
            attributes(&s.attributes)["mcp_tasks.step.position"]
                .parse::<i64>()
                .unwrap()
        });
        children
            .iter()
            .map(|s| {
                assert_eq!(s.name, "step");
                assert_eq!(s.trace_id, run.trace_id);
                let a = attributes(&s.attributes);
                (
                    a["mcp_tasks.step.position"].parse().unwrap(),
                    a["mcp_tasks.step.kind"].clone(),
                    a["mcp_tasks.step.name"].clone(),
                    a["mcp_tasks.step.replayed"].parse().unwrap(),
                )
            })
            .collect()
    };
    let step = |p: i64, kind: &str, name: &str, replayed: bool| {
        (p, kind.to_owned(), name.to_owned(), replayed)
    };
    assert_eq!(
        steps(runs[0]),
        [
            step(0, "checkpoint", "build", false),
            step(2, "sleep", "timeout", false)
        ]
    );
    assert_eq!(
        steps(runs[1]),
        [
            step(0, "checkpoint", "build", true),
            step(2, "sleep", "timeout", true),
            step(3, "checkpoint", "wave-1", false),
            step(4, "sleep", "sleep", false),
            step(5, "checkpoint", "wave-2", false),
            step(6, "sleep", "sleep", false),
            step(7, "checkpoint", "wave-3", false),
            step(8, "sleep", "sleep", false),
        ]
    );
    // Nothing but the runs and their steps.
    let children: usize = runs.iter().map(|r| steps(r).len()).sum();
    assert_eq!(spans.len(), runs.len() + children);

    // The id is a bearer secret: in no attribute, and in no byte sent.
    let needle = id.as_bytes();
    for body in received.bodies() {
        assert!(
            !body.windows(needle.len()).any(|w| w == needle),
            "the task id was exported"
        );
    }
    for (_, span) in &spans {
        for value in attributes(&span.attributes).values() {
            assert!(!value.contains(id), "the task id in {span:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_and_steps_reach_a_collector_without_the_task_id() {
    let dir = tempfile::tempdir().unwrap();
    let (endpoint, received) = collector().await;
    let id = deploy_then_terminate(dir.path(), &endpoint, &received, true).await;
    check_traces(&received, &id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spans_still_buffered_leave_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let (endpoint, received) = collector().await;
    let id = deploy_then_terminate(dir.path(), &endpoint, &received, false).await;
    check_traces(&received, &id);
}

/// A collector that is down: the server logs that its batches could not be
/// sent, serves on (a task parks, is answered and completes), and still
/// drains and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_is_logged_and_costs_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    // A port that was free a moment ago, and that nothing listens on now.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let mut demo = Demo::start(&dir.path().join("demo.db"), &endpoint, 100, Stdio::piped());
    let stderr = demo.child.stderr.take().expect("stderr is piped");
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let client = http_client(&demo.url, true).await;
    let id = task_id(
        client
            .call_tool_once(call(
                "deploy",
                json!({"service": "billing", "git_ref": "v2.3.0"}),
            ))
            .await
            .unwrap(),
    );
    poll_until(&client, &id, |t| t.status() == TaskStatus::InputRequired).await;
    // The parked run's span could not leave: the SDK says so on stderr.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut logged = Vec::new();
    while !logged
        .iter()
        .any(|l: &String| l.contains("BatchSpanProcessor.ExportError"))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines_rx.recv_timeout(left) {
            Ok(line) => logged.push(line),
            Err(_) => panic!("no export error was logged: {logged:#?}"),
        }
    }
    update(
        &client,
        &id,
        json!({"approval": {"action": "accept", "content": {"approve": true}}}),
    )
    .await;
    let done = poll_until(&client, &id, is_terminal).await;
    assert_eq!(done.status(), TaskStatus::Completed);
    client.cancel().await.unwrap();
    let status = demo.terminate();
    assert!(
        status.success(),
        "the demo exits 0 after its drain: {status}"
    );
}
