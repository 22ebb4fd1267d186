//! Shared by the end-to-end tests: a real server process on 127.0.0.1 (or
//! stdio), real MCP clients, and the official JSON Schemas.
#![allow(dead_code, unreachable_pub)]

pub mod digest;
pub mod effects;
pub mod jwt;
pub mod legacy;
pub mod process;
pub mod raw;
pub mod request;
pub mod session;

pub use process::bin;
#[allow(unused_imports)] // Only the gateway's tests run an upstream.
pub use process::upstreams;

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex, OnceLock},
    time::{Duration, Instant},
};

use rmcp::{
    ClientLifecycleMode, ClientServiceExt, RoleClient,
    model::{
        CallToolRequestParams, ClientCapabilities, ClientConfig, GetTaskParams, Implementation,
        JsonObject, ProtocolVersion, TaskPayload,
    },
    service::RunningService,
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};

/// A conformance server process listening on 127.0.0.1; killed on drop.
pub struct Server {
    pub child: Child,
    pub url: String,
    pub store: PathBuf,
}

impl Server {
    /// Starts the conformance example on a fresh port with `store`.
    pub fn start(store: &Path) -> Self {
        let mut child = Command::new(bin("conformance"))
            .args(["--addr", "127.0.0.1:0", "--store"])
            .arg(store)
            .env("RUST_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the conformance server starts");
        let (url, _) = process::listening(&mut child, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("the server did not say where it listens: {e}"));
        Self {
            child,
            url,
            store: store.to_owned(),
        }
    }

    /// Starts the conformance example on a fresh store in a new temporary
    /// directory (kept alive by the returned guard).
    pub fn fresh() -> (tempfile::TempDir, Self) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let server = Self::start(&dir.path().join("tasks.db"));
        (dir, server)
    }

    /// Kills the process with SIGKILL and waits for it.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Client capabilities: the tasks extension (when `tasks`) plus elicitation.
pub fn capabilities(tasks: bool) -> ClientCapabilities {
    let mut caps = json!({"elicitation": {}, "sampling": {}, "roots": {}});
    if tasks {
        caps["extensions"] = json!({"io.modelcontextprotocol/tasks": {}});
    }
    serde_json::from_value(caps).expect("valid capabilities")
}

pub type Client = RunningService<RoleClient, ClientConfig>;

/// An rmcp client over Streamable HTTP, speaking 2026-07-28.
pub async fn http_client(url: &str, tasks: bool) -> Client {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()),
    );
    ClientConfig::new(capabilities(tasks), Implementation::new("e2e", "1.0.0"))
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("the client connects")
}

pub fn args(v: Value) -> JsonObject {
    serde_json::from_value(v).expect("an object")
}

pub fn call(name: &'static str, arguments: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(name).with_arguments(args(arguments))
}

/// The id of the task a `tools/call` created (seeded `working`).
pub fn task_id(r: rmcp::model::CallToolResponse) -> String {
    match r {
        rmcp::model::CallToolResponse::Task(t) => {
            assert_eq!(t.task.status, rmcp::model::TaskStatus::Working);
            t.task.task_id
        }
        other => panic!("expected a task, got {other:?}"),
    }
}

/// Sends `tasks/update` with `responses` (a JSON object of key → answer).
pub async fn update(client: &Client, task_id: &str, responses: Value) {
    client
        .peer()
        .update_task(rmcp::model::UpdateTaskParams::new(
            task_id.to_owned(),
            serde_json::from_value(responses).expect("an object of answers"),
        ))
        .await
        .expect("tasks/update is acknowledged");
}

/// Polls `tasks/get` until `done` says so (or 20 s pass).
pub async fn poll_until(
    client: &Client,
    task_id: &str,
    done: impl Fn(&rmcp::model::DetailedTask) -> bool,
) -> rmcp::model::DetailedTask {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let t = client
            .peer()
            .get_task(GetTaskParams::new(task_id.to_owned()))
            .await
            .expect("tasks/get")
            .task;
        if done(&t) {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "task {task_id} never got there: {t:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (at most 20 s) until task `id` has a journal in `store` (a
/// connection of the test's own to a server's SQLite file), and returns it.
#[allow(dead_code)]
pub async fn journaled(
    store: &mcp_tasks_runtime::store::SqliteStore,
    id: &str,
) -> Vec<mcp_tasks_runtime::store::JournalEntry> {
    use mcp_tasks_runtime::store::Store;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let journal = store.journal(id).await.expect("read the journal");
        if !journal.is_empty() {
            return journal;
        }
        assert!(Instant::now() < deadline, "task {id} journaled nothing");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Asserts that task `id`, read through `store`, still has `journal` (a
/// durable sleep's deadline, journaled once) and ended at that deadline or
/// after it.
#[allow(dead_code)]
pub async fn assert_kept_its_deadline(
    store: &mcp_tasks_runtime::store::SqliteStore,
    id: &str,
    journal: &[mcp_tasks_runtime::store::JournalEntry],
) {
    use mcp_tasks_runtime::store::Store;
    assert_eq!(
        store.journal(id).await.expect("read the journal"),
        journal,
        "the same deadline"
    );
    let ended = store
        .get(id)
        .await
        .expect("read the task")
        .expect("the task is stored");
    let deadline = journal[0].value.as_i64().expect("a deadline in Unix ms");
    assert!(ended.status.is_terminal(), "{ended:?}");
    assert!(
        ended.updated_at_ms >= deadline,
        "ended before its deadline: {ended:?}"
    );
}

pub fn is_terminal(t: &rmcp::model::DetailedTask) -> bool {
    t.status().is_terminal()
}

/// The text of a completed task's result.
pub fn result_text(t: &rmcp::model::DetailedTask) -> (String, bool) {
    match &t.payload {
        TaskPayload::Completed { result } => {
            let text = result["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            (text, result.get("isError") == Some(&json!(true)))
        }
        other => panic!("expected a completed task, got {other:?}"),
    }
}

/// The official schemas, with a validator per definition, compiled once
/// per test process: compiling a whole schema takes long enough in a debug
/// build (and longer on a loaded machine) to eat into the short deadlines
/// some tests set.
pub struct Schemas {
    core: Value,
    tasks: Value,
    legacy: Value,
    /// The validators compiled so far, by schema and definition.
    compiled: Mutex<HashMap<(&'static str, String), Arc<jsonschema::Validator>>>,
}

pub fn schemas() -> &'static Schemas {
    static S: OnceLock<Schemas> = OnceLock::new();
    S.get_or_init(|| {
        let read = |name: &str| -> Value {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/spec")
                .join(name);
            serde_json::from_str(
                &std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display())),
            )
            .expect("valid JSON")
        };
        Schemas {
            core: read("mcp-2026-07-28.schema.json"),
            tasks: read("tasks-extension.schema.json"),
            legacy: read("mcp-2025-11-25.schema.json"),
            compiled: Mutex::default(),
        }
    })
}

impl Schemas {
    fn check(&self, which: &'static str, doc: &Value, def: &str, instance: &Value) {
        let validator = {
            let mut compiled = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
            compiled
                .entry((which, def.to_owned()))
                .or_insert_with(|| {
                    let schema = json!({
                        "$schema": "https://json-schema.org/draft/2020-12/schema",
                        "$defs": doc["$defs"],
                        "$ref": format!("#/$defs/{def}"),
                    });
                    Arc::new(
                        jsonschema::draft202012::new(&schema)
                            .expect("the official schema compiles"),
                    )
                })
                .clone()
        };
        let errors: Vec<String> = validator
            .iter_errors(instance)
            .map(|e| format!("{e} at {}", e.instance_path))
            .collect();
        assert!(
            errors.is_empty(),
            "{def} rejects {instance:#}:\n{}",
            errors.join("\n")
        );
    }

    /// Validates against a definition of the core 2026-07-28 schema.
    pub fn core(&self, def: &str, instance: &Value) {
        self.check("core", &self.core, def, instance);
    }

    /// Validates against a definition of the tasks extension schema.
    pub fn tasks(&self, def: &str, instance: &Value) {
        self.check("tasks", &self.tasks, def, instance);
    }

    /// Validates against a definition of the 2025-11-25 schema.
    pub fn legacy(&self, def: &str, instance: &Value) {
        self.check("legacy", &self.legacy, def, instance);
    }
}

/// The test Postgres server's URL (`MCP_TASKS_POSTGRES_URL`, or the local
/// server), or `None` after saying so on stderr when it does not answer
/// within 5 s. With `CI` set, an unreachable server fails the test.
pub async fn postgres_or_skip(test: &str) -> Option<String> {
    mcp_tasks_runtime::store::testing::postgres_server_or_skip(test).await
}
