//! Deploying new code with tasks in flight, end to end: the
//! `versioned-report` server as real processes on 127.0.0.1 and one real
//! SQLite file, driven over HTTP with raw JSON-RPC, every response
//! validated against the official JSON Schemas.
//!
//! `MCP_TASKS_REPORT_VERSION` picks the version of `report` a process
//! serves, as deploying that build would: version 1 sends the report as
//! text; version 2 sends HTML behind `patched("html")`, so tasks of version 1
//! finish as text; version 3 replays only versions 2 and 3.

mod common;

use std::{
    ffi::OsStr,
    path::Path,
    time::{Duration, Instant},
};

use common::{
    process::{ServerProcess, StoreArgs},
    raw::{Raw, Reply},
    schemas,
};
use serde_json::{Value, json};

/// Every wait in these tests gives up after this long.
const PATIENCE: Duration = Duration::from_secs(20);

/// Deploys version `version` of `report` on the SQLite file `store`.
fn deploy(store: &Path, version: &str) -> ServerProcess {
    deploy_on(&StoreArgs::Sqlite(store.to_owned()), version)
}

/// Deploys version `version` of `report` on `store`.
fn deploy_on(store: &StoreArgs, version: &str) -> ServerProcess {
    ServerProcess::start_with_env(
        common::bin("versioned-report"),
        store,
        &["--scan-interval", "200ms"],
        &[("MCP_TASKS_REPORT_VERSION", OsStr::new(version))],
        PATIENCE,
    )
}

/// What these tests do over raw JSON-RPC.
impl Raw {
    /// Sends `method` and returns its result, checked to be one.
    async fn result_of(&mut self, method: &str, params: Value) -> Value {
        let name = params
            .get("taskId")
            .or_else(|| params.get("name"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let Reply { status, body } = self.send(method, params, true, name.as_deref()).await;
        assert_eq!(status, 200, "{body}");
        body.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("expected a result: {body}"))
    }

    /// Calls `report` for `team` as a task; returns the task id.
    async fn report(&mut self, team: &str) -> String {
        let created = self
            .result_of(
                "tools/call",
                json!({"name": "report", "arguments": {"team": team}}),
            )
            .await;
        schemas().tasks("CreateTaskResult", &created);
        created["taskId"].as_str().unwrap().to_owned()
    }

    async fn get(&mut self, id: &str) -> Value {
        let task = self.result_of("tasks/get", json!({"taskId": id})).await;
        schemas().tasks("GetTaskResult", &task);
        task
    }

    /// Polls `tasks/get` until the task has status `status`.
    async fn until(&mut self, id: &str, status: &str) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let task = self.get(id).await;
            if task["status"] == status {
                return task;
            }
            assert!(Instant::now() < deadline, "task {id} is stuck at {task}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Answers the question `send`.
    async fn send_it(&mut self, id: &str) {
        let r = self
            .result_of(
                "tasks/update",
                json!({
                    "taskId": id,
                    "inputResponses": {"send": {"action": "accept", "content": {"send": true}}},
                }),
            )
            .await;
        schemas().tasks("UpdateTaskResult", &r);
    }

    /// Waits for the task to complete; returns its text.
    async fn finished(&mut self, id: &str) -> String {
        let done = self.until(id, "completed").await;
        schemas().core("CallToolResult", &done["result"]);
        assert_eq!(done["result"]["isError"], false, "{done}");
        done["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("a text result: {done}"))
            .to_owned()
    }
}

/// The journal of task `id`, as (position, kind, name), read from the file.
fn journal(store: &Path, id: &str) -> Vec<(u32, String, String)> {
    let c =
        rusqlite::Connection::open_with_flags(store, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut s = c
        .prepare("SELECT position, kind, name FROM journal WHERE task_id = ?1 ORDER BY position")
        .unwrap();
    s.query_map([id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// The tool version recorded with task `id`.
fn tool_version(store: &Path, id: &str) -> u32 {
    let c =
        rusqlite::Connection::open_with_flags(store, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    c.query_row(
        "SELECT tool_version FROM tasks WHERE id = ?1",
        [id],
        |row| row.get(0),
    )
    .unwrap()
}

fn step(position: u32, kind: &str, name: &str) -> (u32, String, String) {
    (position, kind.to_owned(), name.to_owned())
}

/// Version 1 parks a task on its question and is stopped (SIGTERM, a
/// drain); version 2 starts on the same file. The answer resumes the old
/// task on the OLD path, while a task created on version 2 takes the new
/// one.
#[tokio::test]
async fn a_task_parked_by_version_1_finishes_on_the_old_path_after_deploying_version_2() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tasks.db");

    let v1 = deploy(&store, "1");
    let mut raw = Raw::new(&v1.url);
    let old = raw.report("ops").await;
    let parked = raw.until(&old, "input_required").await;
    assert!(parked["inputRequests"].get("send").is_some(), "{parked}");
    assert!(
        v1.terminate(PATIENCE).success(),
        "version 1 drains and exits 0"
    );

    let v2 = deploy(&store, "2");
    let mut raw = Raw::new(&v2.url);
    let parked = raw.get(&old).await;
    assert_eq!(parked["status"], "input_required", "kept across the deploy");
    let new = raw.report("dev").await;
    raw.until(&new, "input_required").await;

    raw.send_it(&old).await;
    raw.send_it(&new).await;
    assert_eq!(raw.finished(&old).await, "sent the text report for ops");
    assert_eq!(raw.finished(&new).await, "sent the HTML report for dev");

    assert_eq!(
        (tool_version(&store, &old), tool_version(&store, &new)),
        (1, 2)
    );
    assert_eq!(
        journal(&store, &old),
        [
            step(0, "ask", "Approval"),
            step(1, "checkpoint", "send-text")
        ],
        "the old task replayed its question where version 1 recorded it, with no marker"
    );
    assert_eq!(
        journal(&store, &new),
        [
            step(0, "patch", "html"),
            step(1, "ask", "Approval"),
            step(2, "checkpoint", "send-html"),
        ]
    );
}

/// Version 3 replays from version 2: started on a file with a task that
/// version 1 parked, it fails that task at startup with a reason naming the
/// versions (seen through `tasks/get`), without replaying it; a task that
/// version 2 parked carries on.
#[tokio::test]
async fn a_server_that_replays_from_a_later_version_fails_older_tasks_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tasks.db");

    let v1 = deploy(&store, "1");
    let mut raw = Raw::new(&v1.url);
    let old = raw.report("ops").await;
    raw.until(&old, "input_required").await;
    v1.kill();

    let v2 = deploy(&store, "2");
    let mut raw = Raw::new(&v2.url);
    let kept = raw.report("dev").await;
    raw.until(&kept, "input_required").await;
    v2.kill();

    let v3 = deploy(&store, "3");
    let mut raw = Raw::new(&v3.url);
    // Failed before the server listened: the first read sees it.
    let failed = raw.get(&old).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let message = failed["statusMessage"].as_str().unwrap();
    assert!(
        message.starts_with(
            "task recorded by version 1 of `report`; this server replays versions 2–3"
        ),
        "{message}"
    );
    assert_eq!(
        journal(&store, &old),
        [],
        "never replayed: nothing was journaled after it parked"
    );

    raw.send_it(&kept).await;
    assert_eq!(raw.finished(&kept).await, "sent the HTML report for dev");
}

/// A rollback on a fleet sharing Postgres (`MCP_TASKS_POSTGRES_URL`,
/// default the local server; skipped, saying so, when none answers): a task
/// that version 2 parked is answered through an instance of version 1. That
/// instance claims it once, gives it up untouched (still `working`, no
/// lease, nothing journaled but the answer), and claims it no more over
/// several of its scans; it is not failed. Version 2, deployed again, runs
/// it on the new path.
#[test]
fn an_instance_of_an_older_version_leaves_newer_tasks_alone_on_postgres() {
    use std::io::Write as _;
    let url = std::env::var("MCP_TASKS_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let db = runtime.block_on(async {
        let mut config: tokio_postgres::Config = url.parse().unwrap();
        config.connect_timeout(Duration::from_secs(5));
        let (client, connection) = config.connect(tokio_postgres::NoTls).await.ok()?;
        tokio::spawn(connection);
        Some(client)
    });
    let Some(db) = db else {
        let _ = writeln!(std::io::stderr(), "SKIPPED: no Postgres at {url}");
        return;
    };
    let schema = mcp_tasks_runtime::store::testing::PostgresSchema::new(&url, "mcp_tasks_versions");
    let store = StoreArgs::Postgres {
        url: schema.url(),
        schema: schema.name().to_owned(),
    };
    let row = format!(
        "SELECT status, fence, lease_owner IS NULL, tool_version, \
         (SELECT count(*) FROM {s}.journal WHERE task_id = $1) FROM {s}.tasks WHERE id = $1",
        s = schema.name()
    );
    runtime.block_on(async {
        // (status, fence, unleased, tool version, journal entries)
        let read = |id: String| {
            let (db, row) = (&db, &row);
            async move {
                let r = db.query_one(row.as_str(), &[&id]).await.unwrap();
                let v: (String, i64, bool, i64, i64) =
                    (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
                v
            }
        };

        let v2 = deploy_on(&store, "2");
        let mut raw = Raw::new(&v2.url);
        let id = raw.report("ops").await;
        raw.until(&id, "input_required").await;
        assert!(v2.terminate(PATIENCE).success());

        let v1 = deploy_on(&store, "1");
        let mut raw = Raw::new(&v1.url);
        raw.send_it(&id).await;
        let deadline = Instant::now() + PATIENCE;
        let left = loop {
            let r = read(id.clone()).await;
            if r.1 == 2 && r.2 {
                break r;
            }
            assert!(
                Instant::now() < deadline,
                "never claimed and given up: {r:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        };
        // Marker and answer only: version 1 replayed nothing.
        assert_eq!(left, ("working".to_owned(), 2, true, 2, 2));
        // Several of its scans (every 200 ms) find the task claimable and
        // leave it be.
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(read(id.clone()).await, left, "claimed again, or run");
        let seen = raw.get(&id).await;
        assert_eq!(seen["status"], "working", "not failed: {seen}");
        v1.kill();

        let v2 = deploy_on(&store, "2");
        let mut raw = Raw::new(&v2.url);
        assert_eq!(raw.finished(&id).await, "sent the HTML report for ops");
        drop(v2);
    });
    drop(db);
    drop(runtime);
    drop(schema);
}
