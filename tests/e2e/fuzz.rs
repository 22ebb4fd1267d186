//! Generated JSON-RPC messages against a real server process over HTTP
//! (proptest): valid and invalid methods, params, ids, headers (protocol
//! version, `Mcp-Method`, `Mcp-Name`, `Content-Type`, `Accept`, a session)
//! and sizes. The server never panics (the process lives on and its stderr
//! has no "panicked"), never hangs (each request is answered within 30 s),
//! never answers 5xx, and every JSON-RPC reply is a response the official
//! schemas accept.
//!
//! `cargo test` runs 500 cases; set `MCP_TASKS_FUZZ_CASES` for more (e.g.
//! `MCP_TASKS_FUZZ_CASES=100000 cargo test -p mcp-tasks-tests --test fuzz
//! --release`).

mod common;

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    sync::{Mutex, OnceLock},
    time::Duration,
};

use futures::StreamExt as _;
use proptest::{
    collection::{btree_map, vec},
    option,
    prelude::*,
    test_runner::{Config, TestCaseError, TestRunner},
};
use serde_json::{Map, Value, json};

/// Methods the server knows (and a few it does not).
const METHODS: &[&str] = &[
    "tools/call",
    "tools/list",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "tasks/result",
    "tasks/list",
    "subscriptions/listen",
    "server/discover",
    "initialize",
    "notifications/initialized",
    "notifications/cancelled",
    "ping",
    "logging/setLevel",
    "resources/list",
    "resources/read",
    "resources/subscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
];

/// The conformance server's tools that answer promptly whatever they are
/// given (`slow_compute` gets short waits only, below).
const TOOLS: &[&str] = &[
    "greet",
    "failing_job",
    "protocol_error_job",
    "short_lived",
    "confirm_delete",
    "multi_input",
    "test_tool_with_task",
    "test_input_required_result_elicitation",
    "test_input_required_result_sampling",
    "test_input_required_result_list_roots",
    "test_input_required_result_request_state",
    "test_input_required_result_multiple_inputs",
    "test_input_required_result_multi_round",
    "test_input_required_result_tampered_state",
    "test_input_required_result_capabilities",
    "test_sampling",
    "test_elicitation",
];

const KEYS: &[&str] = &[
    "name",
    "arguments",
    "taskId",
    "inputResponses",
    "requestState",
    "notifications",
    "taskIds",
    "_meta",
    "cursor",
    "filename",
    "seconds",
    "label",
    "confirm",
    "action",
    "content",
    "protocolVersion",
    "capabilities",
    "clientInfo",
    "uri",
    "level",
];

fn pick(items: &'static [&'static str]) -> impl Strategy<Value = String> + Clone {
    proptest::sample::select(items).prop_map(str::to_owned)
}

fn key() -> impl Strategy<Value = String> + Clone {
    prop_oneof![3 => pick(KEYS), 1 => "[a-zA-Z_$./-]{0,12}", 1 => "\\PC{0,8}"]
}

fn json_value() -> impl Strategy<Value = Value> + Clone {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        "\\PC{0,24}".prop_map(Value::from),
        "[0-9a-f]{32}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            btree_map(key(), inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn object() -> impl Strategy<Value = Value> + Clone {
    btree_map(key(), json_value(), 0..6).prop_map(|m| Value::Object(m.into_iter().collect()))
}

/// `_meta` as a 2026-07-28 client sends it, or something else.
fn meta() -> impl Strategy<Value = Option<Value>> {
    let version = prop_oneof![
        8 => Just(json!("2026-07-28")),
        1 => Just(json!("2025-11-25")),
        1 => Just(json!("1999-01-01")),
        1 => json_value(),
    ];
    let capabilities = prop_oneof![
        4 => Just(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}})),
        2 => Just(json!({})),
        2 => Just(json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}})),
        1 => json_value(),
    ];
    option::weighted(
        0.9,
        prop_oneof![
            12 => (version, capabilities).prop_map(|(v, c)| json!({
                "io.modelcontextprotocol/protocolVersion": v,
                "io.modelcontextprotocol/clientCapabilities": c,
            })),
            1 => json_value(),
        ],
    )
}

fn task_id() -> impl Strategy<Value = Value> + Clone {
    prop_oneof![
        3 => "[0-9a-f]{32}".prop_map(Value::from),
        1 => json_value(),
    ]
}

/// Params shaped like the methods' own, or anything.
fn params() -> impl Strategy<Value = Option<Value>> {
    let shaped = (
        option::of(
            prop_oneof![4 => pick(TOOLS), 1 => Just("slow_compute".to_owned()), 1 => "\\PC{0,16}"],
        ),
        option::of(prop_oneof![
            2 => object(),
            1 => (0.0f64..0.2, "[a-z]{0,8}").prop_map(|(s, l)| json!({"seconds": s, "label": l})),
            1 => "[a-z.]{0,12}".prop_map(|f| json!({"filename": f})),
            1 => json_value(),
        ]),
        option::of(task_id()),
        option::of(prop_oneof![object(), json_value()]),
        option::of(prop_oneof![
            "[A-Za-z0-9_-]{0,60}".prop_map(Value::from),
            json_value()
        ]),
        option::of(vec(task_id(), 0..4).prop_map(|ids| json!({"taskIds": ids}))),
        meta(),
    )
        .prop_map(
            |(name, arguments, task, answers, state, notifications, meta)| {
                let mut p = Map::new();
                let mut put = |k: &str, v: Option<Value>| {
                    if let Some(v) = v {
                        p.insert(k.to_owned(), v);
                    }
                };
                put("name", name.map(Value::from));
                put("arguments", arguments);
                put("taskId", task);
                put("inputResponses", answers);
                put("requestState", state);
                put("notifications", notifications);
                put("_meta", meta);
                Value::Object(p)
            },
        );
    option::weighted(0.9, prop_oneof![5 => shaped, 1 => json_value()])
}

/// One JSON-RPC message, valid or not.
fn message() -> impl Strategy<Value = Value> {
    let id = prop_oneof![
        12 => any::<u32>().prop_map(|n| Some(json!(n))),
        4 => "\\PC{0,12}".prop_map(|s| Some(json!(s))),
        1 => Just(None),
        1 => Just(Some(Value::Null)),
        1 => json_value().prop_map(Some),
    ];
    let jsonrpc = prop_oneof![
        18 => Just(Some(json!("2.0"))),
        1 => Just(None),
        1 => json_value().prop_map(Some),
    ];
    let method = prop_oneof![8 => pick(METHODS).prop_map(Value::from), 1 => json_value()];
    (
        jsonrpc,
        id,
        option::weighted(0.95, method),
        params(),
        0usize..4,
    )
        .prop_map(|(jsonrpc, id, method, params, pad)| {
            let mut m = Map::new();
            if let Some(v) = jsonrpc {
                m.insert("jsonrpc".into(), v);
            }
            if let Some(v) = id {
                m.insert("id".into(), v);
            }
            if let Some(v) = method {
                m.insert("method".into(), v);
            }
            if let Some(mut v) = params {
                // Now and then, a large string (up to 256 KiB).
                if pad == 3
                    && let Some(obj) = v.as_object_mut()
                {
                    obj.insert("pad".into(), json!("x".repeat(256 * 1024)));
                }
                m.insert("params".into(), v);
            }
            Value::Object(m)
        })
}

/// A body: a message, a batch, a message cut short, or bytes.
#[derive(Debug, Clone)]
enum Body {
    Message(Value),
    Batch(Vec<Value>),
    Truncated(Value, usize),
    Bytes(Vec<u8>),
}

impl Body {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Self::Message(m) => m.to_string().into_bytes(),
            Self::Batch(ms) => Value::Array(ms.clone()).to_string().into_bytes(),
            Self::Truncated(m, at) => {
                let s = m.to_string().into_bytes();
                s[..(*at).min(s.len().saturating_sub(1))].to_vec()
            }
            Self::Bytes(b) => b.clone(),
        }
    }

    /// The method and task id the message names, for headers that match.
    fn names(&self) -> (Option<String>, Option<String>) {
        let Self::Message(m) = self else {
            return (None, None);
        };
        (
            m["method"].as_str().map(str::to_owned),
            m.pointer("/params/taskId")
                .or_else(|| m.pointer("/params/name"))
                .and_then(Value::as_str)
                .map(str::to_owned),
        )
    }
}

fn body() -> impl Strategy<Value = Body> {
    prop_oneof![
        12 => message().prop_map(Body::Message),
        1 => vec(message(), 0..3).prop_map(Body::Batch),
        1 => (message(), 0usize..200).prop_map(|(m, at)| Body::Truncated(m, at)),
        1 => vec(any::<u8>(), 0..64).prop_map(Body::Bytes),
    ]
}

/// A header: left out, matching the body, or some other value.
#[derive(Debug, Clone)]
enum Header {
    Absent,
    Matching,
    Value(String),
}

fn header(values: &'static [&'static str]) -> impl Strategy<Value = Header> {
    prop_oneof![
        2 => Just(Header::Absent),
        3 => Just(Header::Matching),
        2 => pick(values).prop_map(Header::Value),
        1 => "[ -~]{0,24}".prop_map(Header::Value),
    ]
}

#[derive(Debug, Clone)]
struct Request {
    body: Body,
    protocol_version: Header,
    mcp_method: Header,
    mcp_name: Header,
    content_type: Header,
    accept: Header,
    session: Option<String>,
}

fn request() -> impl Strategy<Value = Request> {
    let mixed = (
        body(),
        header(&[
            "2026-07-28",
            "2025-11-25",
            "2025-06-18",
            "2024-11-05",
            "2030-01-01",
        ]),
        header(&["tools/call", "tasks/get", "subscriptions/listen", "ping"]),
        header(&["=?base64?AAAA?=", "0123456789abcdef0123456789abcdef", ""]),
        header(&[
            "text/plain",
            "application/json; charset=utf-8",
            "application/x-www-form-urlencoded",
        ]),
        header(&["application/json", "text/event-stream", "*/*", "text/html"]),
        option::weighted(0.05, "[0-9a-f-]{8,36}"),
    )
        .prop_map(
            |(body, protocol_version, mcp_method, mcp_name, content_type, accept, session)| {
                Request {
                    body,
                    protocol_version,
                    mcp_method,
                    mcp_name,
                    content_type,
                    accept,
                    session,
                }
            },
        );
    // Headers as a client sends them, so that the bodies reach the handlers.
    let proper = body().prop_map(|body| Request {
        body,
        protocol_version: Header::Matching,
        mcp_method: Header::Matching,
        mcp_name: Header::Matching,
        content_type: Header::Matching,
        accept: Header::Matching,
        session: None,
    });
    prop_oneof![3 => proper, 1 => mixed]
}

/// The server under test and what it wrote to stderr.
struct Target {
    child: Mutex<Child>,
    url: String,
    stderr: std::path::PathBuf,
}

impl Drop for Target {
    fn drop(&mut self) {
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Target {
    fn start(dir: &Path) -> Self {
        let stderr = dir.join("stderr.log");
        let mut child = Command::new(common::bin("conformance"))
            .args(["--addr", "127.0.0.1:0", "--store"])
            .arg(dir.join("tasks.db"))
            .env("RUST_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("the conformance server starts");
        let (url, _) = common::process::listening(&mut child, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("the server did not say where it listens: {e}"));
        Self {
            child: Mutex::new(child),
            url,
            stderr,
        }
    }

    /// Fails when the process has exited or wrote a panic.
    fn alive(&self) -> Result<(), TestCaseError> {
        if let Ok(Some(status)) = self.child.lock().unwrap().try_wait() {
            return Err(TestCaseError::fail(format!("the server exited: {status}")));
        }
        let log = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        if log.contains("panicked") {
            return Err(TestCaseError::fail(format!("the server panicked:\n{log}")));
        }
        Ok(())
    }
}

/// The official schemas' `JSONRPCResponse` and `JSONRPCMessage`, compiled
/// once, for 2026-07-28 and 2025-11-25.
struct Validators {
    responses: Vec<jsonschema::Validator>,
    messages: Vec<jsonschema::Validator>,
}

fn validators() -> &'static Validators {
    static V: OnceLock<Validators> = OnceLock::new();
    V.get_or_init(|| {
        let compile = |file: &str, def: &str| {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/spec")
                .join(file);
            let doc: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let schema = json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "$defs": doc["$defs"],
                "$ref": format!("#/$defs/{def}"),
            });
            jsonschema::draft202012::new(&schema).expect("the official schema compiles")
        };
        let files = ["mcp-2026-07-28.schema.json", "mcp-2025-11-25.schema.json"];
        Validators {
            responses: files
                .iter()
                .map(|f| compile(f, "JSONRPCResponse"))
                .collect(),
            messages: files.iter().map(|f| compile(f, "JSONRPCMessage")).collect(),
        }
    })
}

fn valid(reply: &Value, against: &[jsonschema::Validator]) -> Result<(), TestCaseError> {
    if against.iter().any(|v| v.is_valid(reply)) {
        return Ok(());
    }
    let errors: Vec<String> = against[0]
        .iter_errors(reply)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect();
    Err(TestCaseError::fail(format!(
        "not a JSON-RPC response the schemas accept: {reply}\n{}",
        errors.join("\n")
    )))
}

/// How many answers had each HTTP status.
static STATUSES: Mutex<std::collections::BTreeMap<u16, usize>> =
    Mutex::new(std::collections::BTreeMap::new());

fn record(status: u16) {
    *STATUSES.lock().unwrap().entry(status).or_default() += 1;
}

/// Sends `req` and checks the answer.
async fn exchange(
    http: &reqwest::Client,
    target: &Target,
    req: &Request,
) -> Result<(), TestCaseError> {
    let (method, name) = req.body.names();
    let mut builder = http.post(&target.url).body(req.body.bytes());
    let headers = [
        (
            "MCP-Protocol-Version",
            &req.protocol_version,
            Some("2026-07-28".to_owned()),
        ),
        ("Mcp-Method", &req.mcp_method, method),
        ("Mcp-Name", &req.mcp_name, name),
        (
            "Content-Type",
            &req.content_type,
            Some("application/json".to_owned()),
        ),
        (
            "Accept",
            &req.accept,
            Some("application/json, text/event-stream".to_owned()),
        ),
    ];
    for (header, choice, matching) in headers {
        let value = match choice {
            Header::Absent => None,
            Header::Matching => matching,
            Header::Value(v) => Some(v.clone()),
        };
        if let Some(v) = value
            && let Ok(v) = reqwest::header::HeaderValue::from_str(&v)
        {
            builder = builder.header(header, v);
        }
    }
    if let Some(session) = &req.session {
        builder = builder.header("Mcp-Session-Id", session);
    }
    let response = builder
        .send()
        .await
        .map_err(|e| TestCaseError::fail(format!("no answer: {e}")))?;
    let status = response.status();
    record(status.as_u16());
    if status.is_server_error() {
        let text = response.text().await.unwrap_or_default();
        return Err(TestCaseError::fail(format!("HTTP {status}: {text}")));
    }
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if content_type.starts_with("text/event-stream") {
        // A stream (a listen): its first message must be a JSON-RPC
        // message; the stream itself may stay open.
        let mut stream = response.bytes_stream();
        let mut buffer = Vec::new();
        while !buffer.windows(2).any(|w| w == b"\n\n") {
            match stream.next().await {
                Some(Ok(chunk)) => buffer.extend_from_slice(&chunk),
                Some(Err(e)) => return Err(TestCaseError::fail(format!("stream: {e}"))),
                None => break,
            }
        }
        let text = String::from_utf8_lossy(&buffer);
        for data in text.lines().filter_map(|l| l.strip_prefix("data:")) {
            let data = data.trim();
            if data.is_empty() {
                continue;
            }
            let message: Value = serde_json::from_str(data)
                .map_err(|e| TestCaseError::fail(format!("SSE data is no JSON ({e}): {data}")))?;
            valid(&message, &validators().messages)?;
        }
        return Ok(());
    }
    let text = response
        .text()
        .await
        .map_err(|e| TestCaseError::fail(format!("body: {e}")))?;
    if content_type.starts_with("application/json") {
        let reply: Value = serde_json::from_str(&text)
            .map_err(|e| TestCaseError::fail(format!("JSON reply is no JSON ({e}): {text}")))?;
        valid(&reply, &validators().responses)?;
    } else if status.is_success() && !text.is_empty() {
        return Err(TestCaseError::fail(format!(
            "HTTP {status} with a {content_type:?} body: {text}"
        )));
    }
    Ok(())
}

#[test]
fn generated_messages_never_crash_hang_or_break_the_protocol() {
    // Generating nested values and compiling the schemas need more stack
    // than a test thread has in a debug build.
    std::thread::Builder::new()
        .stack_size(64 * 1024 * 1024)
        .spawn(run)
        .unwrap()
        .join()
        .unwrap();
}

fn run() {
    let cases = std::env::var("MCP_TASKS_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(500);
    let dir = tempfile::tempdir().unwrap();
    let target = Target::start(dir.path());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Config::default()
    });
    let outcome = runner.run(&request(), |req| {
        runtime.block_on(async {
            // A stream held open counts as answered; 30 s is the hang limit.
            tokio::time::timeout(Duration::from_secs(30), exchange(&http, &target, &req))
                .await
                .map_err(|_| TestCaseError::fail("no answer within 30 s"))?
        })?;
        target.alive()
    });
    let statuses = STATUSES.lock().unwrap().clone();
    eprintln!("answers by HTTP status: {statuses:?}");
    if let Err(e) = outcome {
        panic!("{e}");
    }
    // The generated messages reach the handlers, not only the envelope
    // checks: some are answered 200.
    assert!(statuses.get(&200).is_some_and(|n| *n > 0), "{statuses:?}");
    target.alive().unwrap();
    // The server still serves an ordinary request after all that.
    let listed = runtime.block_on(async {
        http.post(&target.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", "tools/list")
            .body(
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                }}})
                .to_string(),
            )
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    });
    assert!(listed["result"]["tools"].is_array(), "{listed}");
}
