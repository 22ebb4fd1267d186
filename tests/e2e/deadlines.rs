//! Questions with deadlines (`Question::timeout`), end to end: the
//! test-only `fleet-fixture` server as a real process on 127.0.0.1 with a
//! real SQLite file (and once on Postgres), driven over HTTP with raw JSON-RPC, every response
//! validated against the official JSON Schemas. Its `ask_with_deadline`
//! tool asks `approval` with a deadline and returns the branch it took.

mod common;

use std::{
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

fn start(store: &Path) -> ServerProcess {
    start_on(&StoreArgs::Sqlite(store.to_owned()))
}

fn start_on(store: &StoreArgs) -> ServerProcess {
    ServerProcess::start(
        common::bin("fleet-fixture"),
        store,
        &["--scan-interval", "200ms"],
        None,
        PATIENCE,
    )
}

/// Raw JSON-RPC over HTTP (see `common::raw`), with what these tests do
/// through it.
impl Raw {
    /// Sends `method` (its `Mcp-Name` taken from the params' `taskId` or
    /// `name`) and returns its result, checked to be one.
    async fn result_of(&mut self, method: &str, params: Value, tasks: bool) -> Value {
        let name = params
            .get("taskId")
            .or_else(|| params.get("name"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let Reply { status, body } = self.send(method, params, tasks, name.as_deref()).await;
        assert_eq!(status, 200, "{body}");
        body.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("expected a result: {body}"))
    }

    /// Calls `ask_with_deadline` as a task; returns the task id.
    async fn start_task(&mut self, arguments: Value) -> String {
        let created = self
            .result_of(
                "tools/call",
                json!({"name": "ask_with_deadline", "arguments": arguments}),
                true,
            )
            .await;
        schemas().tasks("CreateTaskResult", &created);
        created["taskId"].as_str().unwrap().to_owned()
    }

    async fn get(&mut self, id: &str) -> Value {
        let task = self
            .result_of("tasks/get", json!({"taskId": id}), true)
            .await;
        schemas().tasks("GetTaskResult", &task);
        task
    }

    /// Polls `tasks/get` until `done` says so.
    async fn poll(&mut self, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PATIENCE;
        let mut seen = Vec::new();
        loop {
            let task = self.get(id).await;
            if seen.last() != Some(&task["status"]) {
                seen.push(task["status"].clone());
                eprintln!("{id}: {} at {:?}", task["status"], Instant::now());
            }
            if done(&task) {
                return task;
            }
            assert!(Instant::now() < deadline, "task {id} is stuck at {task}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Answers with `tasks/update`.
    async fn update(&mut self, id: &str, responses: Value) {
        let r = self
            .result_of(
                "tasks/update",
                json!({"taskId": id, "inputResponses": responses}),
                true,
            )
            .await;
        schemas().tasks("UpdateTaskResult", &r);
        assert_eq!(r["resultType"], "complete", "{r}");
        for absent in ["taskId", "status", "result", "error", "inputRequests"] {
            assert!(r.get(absent).is_none(), "an ack has no `{absent}`: {r}");
        }
    }

    /// Waits for the task to complete; returns its structured result.
    async fn finish(&mut self, id: &str) -> Value {
        let done = self
            .poll(id, |t| {
                t["status"] != "working" && t["status"] != "input_required"
            })
            .await;
        assert_eq!(done["status"], "completed", "{done}");
        schemas().core("CallToolResult", &done["result"]);
        assert_eq!(done["result"]["isError"], false, "{done}");
        done["result"]["structuredContent"].clone()
    }
}

/// The keys in a task's `inputRequests` (none when it is not parked).
fn keys(task: &Value) -> Vec<String> {
    task["inputRequests"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

fn accept(approve: bool) -> Value {
    json!({"action": "accept", "content": {"approve": approve}})
}

/// The journal value at `position` of task `id`, read from the SQLite file.
fn journaled(store: &Path, id: &str, position: u32) -> Value {
    let c =
        rusqlite::Connection::open_with_flags(store, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let text: String = c
        .query_row(
            "SELECT value FROM journal WHERE task_id = ?1 AND position = ?2",
            rusqlite::params![id, position],
            |row| row.get(0),
        )
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn a_questions_deadline_fires_and_the_task_takes_the_timeout_branch() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("tasks.db"));
    let mut raw = Raw::new(&server.url);
    let called = Instant::now();
    let id = raw
        .start_task(json!({"deadline_ms": 700, "follow_up": true, "rounds": 0}))
        .await;

    let parked = raw.poll(&id, |t| t["status"] == "input_required").await;
    assert_eq!(keys(&parked), ["approval"]);
    assert_eq!(
        parked["inputRequests"]["approval"]["method"],
        "elicitation/create"
    );

    // The deadline passes: `approval` leaves `inputRequests`, and the task
    // runs on to its follow-up question (a poll may catch it working in
    // between, with no question at all).
    let moved_on = raw
        .poll(&id, |t| keys(t) != ["approval"] && t["status"] != "working")
        .await;
    assert!(
        called.elapsed() >= Duration::from_millis(700),
        "timed out early, after {:?}",
        called.elapsed()
    );
    assert_eq!(moved_on["status"], "input_required", "{moved_on}");
    assert_eq!(keys(&moved_on), ["next"]);

    raw.update(&id, json!({"next": accept(true)})).await;
    let result = raw.finish(&id).await;
    assert_eq!(result["branch"], "timed_out");
    assert_eq!(result["approve"], Value::Null);
}

#[tokio::test]
async fn a_deadline_survives_sigkill_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tasks.db");
    let late = survives_sigkill(StoreArgs::Sqlite(store.clone()), false).await;
    assert_eq!(journaled(&store, &late, 0), json!("timed_out"));
}

/// A question raced against a durable `sleep` with `select`, the server
/// killed while both wait: the timer still wins after the restart, once.
#[tokio::test]
async fn a_select_timer_survives_sigkill_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tasks.db");
    let late = survives_sigkill(StoreArgs::Sqlite(store.clone()), true).await;
    assert_eq!(journaled(&store, &late, 0), json!("timed_out"));
    assert_eq!(
        journaled(&store, &late, 1),
        json!(1),
        "the timer's branch won"
    );
}

/// The same on Postgres (`MCP_TASKS_POSTGRES_URL`, default the local
/// server), in a schema of its own; skipped, saying so, when no server
/// answers.
#[test]
fn a_deadline_survives_sigkill_and_restart_on_postgres() {
    use std::io::Write as _;
    let url = std::env::var("MCP_TASKS_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let reachable = runtime.block_on(async {
        let mut config: tokio_postgres::Config = url.parse().unwrap();
        config.connect_timeout(Duration::from_secs(5));
        config.connect(tokio_postgres::NoTls).await.is_ok()
    });
    if !reachable {
        let _ = writeln!(std::io::stderr(), "SKIPPED: no Postgres at {url}");
        return;
    }
    let schema =
        mcp_tasks_runtime::store::testing::PostgresSchema::new(&url, "mcp_tasks_deadlines");
    runtime.block_on(survives_sigkill(
        StoreArgs::Postgres {
            url: schema.url(),
            schema: schema.name().to_owned(),
        },
        false,
    ));
    drop(runtime);
    drop(schema);
}

/// Two tasks parked on timed questions, the server killed with SIGKILL and
/// started again on the same store: one deadline passes while it is down,
/// the other after it is back. Returns the second task's id.
async fn survives_sigkill(store: StoreArgs, race: bool) -> String {
    let server = start_on(&store);
    let mut raw = Raw::new(&server.url);
    // One deadline passes while the server is down, the other after it
    // is back.
    let called = Instant::now();
    let early = raw
        .start_task(json!({"deadline_ms": 1_200, "follow_up": false, "rounds": 0, "race": race}))
        .await;
    eprintln!("{:?}: created the early task", called.elapsed());
    let late = raw
        .start_task(json!({"deadline_ms": 3_500, "follow_up": false, "rounds": 0, "race": race}))
        .await;
    eprintln!("{:?}: created the late task", called.elapsed());
    for id in [&early, &late] {
        let parked = raw.poll(id, |t| t["status"] == "input_required").await;
        eprintln!("{:?}: {id} parked", called.elapsed());
        assert_eq!(keys(&parked), ["approval"]);
    }
    server.kill();

    tokio::time::sleep(Duration::from_millis(1_400).saturating_sub(called.elapsed())).await;
    let server = start_on(&store);
    let mut raw = Raw::new(&server.url);
    let result = raw.finish(&early).await;
    assert_eq!(result["branch"], "timed_out");

    let parked = raw.get(&late).await;
    if called.elapsed() < Duration::from_millis(3_400) {
        assert_eq!(parked["status"], "input_required", "{parked}");
        assert_eq!(keys(&parked), ["approval"]);
    }
    let result = raw.finish(&late).await;
    assert!(called.elapsed() >= Duration::from_millis(3_500));
    assert_eq!(result["branch"], "timed_out");
    late
}

#[tokio::test]
async fn a_late_answer_after_the_timeout_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tasks.db");
    let server = start(&store);
    let mut raw = Raw::new(&server.url);
    let id = raw
        .start_task(json!({"deadline_ms": 300, "follow_up": true, "rounds": 0}))
        .await;
    let waiting = raw.poll(&id, |t| keys(t) == ["next"]).await;
    assert_eq!(waiting["status"], "input_required");

    // The late answer is acknowledged like any answer to an unknown key,
    // and changes nothing.
    raw.update(&id, json!({"approval": accept(true)})).await;
    let still = raw.get(&id).await;
    assert_eq!(keys(&still), ["next"]);
    assert_eq!(journaled(&store, &id, 0), json!("timed_out"));

    // Nor can a client forge a time-out: the marker is not an answer.
    let id2 = raw
        .start_task(json!({"deadline_ms": 60_000, "follow_up": false, "rounds": 0}))
        .await;
    raw.poll(&id2, |t| t["status"] == "input_required").await;
    raw.update(&id2, json!({"approval": "timed_out"})).await;
    let parked = raw.get(&id2).await;
    assert_eq!(keys(&parked), ["approval"]);
    raw.update(&id2, json!({"approval": accept(false)})).await;
    let result = raw.finish(&id2).await;
    assert_eq!(
        (&result["branch"], &result["approve"]),
        (&json!("answered"), &json!(false))
    );

    raw.update(&id, json!({"next": accept(true)})).await;
    let result = raw.finish(&id).await;
    assert_eq!(result["branch"], "timed_out");
    assert_eq!(result["approve"], Value::Null);
}

#[tokio::test]
async fn an_answer_raced_against_the_deadline_replays_the_same_branch_50_times() {
    replays_the_same_branch_50_times(false).await;
}

/// The same race written with `select` between the question and a durable
/// `sleep`: the winner's index is journaled at position 1.
#[tokio::test]
async fn a_select_of_an_answer_and_a_timer_replays_the_same_branch_50_times() {
    replays_the_same_branch_50_times(true).await;
}

async fn replays_the_same_branch_50_times(race: bool) {
    const DEADLINE_MS: u64 = 600;
    const ROUNDS: usize = 50;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tasks.db");
    let server = start(&store);
    // Answers sent just before, at, and just after the deadline (as the
    // client can tell it: from the call), at once.
    let races = [-30_i64, -10, 0, 10, 30].map(|offset| {
        let url = server.url.clone();
        tokio::spawn(async move {
            let mut raw = Raw::new(&url);
            let called = Instant::now();
            let id = raw
                .start_task(json!({
                    "deadline_ms": DEADLINE_MS, "follow_up": false,
                    "rounds": ROUNDS, "race": race,
                }))
                .await;
            raw.poll(&id, |t| t["status"] != "working").await;
            let at = Duration::from_millis(DEADLINE_MS.saturating_add_signed(offset));
            tokio::time::sleep(at.saturating_sub(called.elapsed())).await;
            raw.update(&id, json!({"approval": accept(true)})).await;
            // Each round's question, answered in turn: every answer starts
            // a run that replays the journal from the start.
            for round in 0..ROUNDS {
                let key = format!("r{round}");
                raw.poll(&id, |t| keys(t) == [key.as_str()]).await;
                raw.update(&id, json!({key: accept(true)})).await;
            }
            let result = raw.finish(&id).await;
            (id, result)
        })
    });
    let mut branches = Vec::new();
    for run in races {
        let (id, result) = run.await.unwrap();
        let branch = result["branch"].as_str().unwrap().to_owned();
        // What the task took is what its journal holds.
        let value = journaled(&store, &id, 0);
        match branch.as_str() {
            "answered" => {
                assert_eq!(value, accept(true));
                assert_eq!(result["approve"], true);
            }
            "timed_out" => {
                assert_eq!(value, json!("timed_out"));
                assert_eq!(result["approve"], Value::Null);
            }
            other => panic!("unexpected branch {other}"),
        }
        if race {
            // The race's own entry: branch 0 (the question) or 1 (the timer).
            let winner = if branch == "answered" { 0 } else { 1 };
            assert_eq!(journaled(&store, &id, 1), json!(winner), "{result}");
        }
        // Every round was journaled by a run of its own, each of which
        // replayed the question from the journal and took the same branch.
        let replays = result["replays"].as_array().unwrap();
        assert_eq!(replays.len(), ROUNDS);
        let runs: Vec<u64> = replays.iter().map(|r| r["run"].as_u64().unwrap()).collect();
        assert!(
            runs.windows(2).all(|w| w[0] < w[1]),
            "each round in a run of its own: {runs:?}"
        );
        for replay in replays {
            assert_eq!(replay["branch"], branch.as_str(), "{result}");
        }
        branches.push(branch);
    }
    eprintln!("branches taken: {branches:?}");
}

#[tokio::test]
async fn an_inline_round_that_comes_back_after_the_deadline_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("tasks.db"));
    let mut raw = Raw::new(&server.url);
    let s = schemas();
    let args =
        |deadline_ms: u64| json!({"deadline_ms": deadline_ms, "follow_up": false, "rounds": 0});
    let call = json!({"name": "ask_with_deadline", "arguments": args(300)});

    // Without the tasks extension: an MRTR round.
    let first = raw.result_of("tools/call", call.clone(), false).await;
    s.core("InputRequiredResult", &first);
    assert_eq!(keys(&first), ["approval"]);
    let state = first["requestState"].clone();
    assert!(state.is_string(), "{first}");

    // Back after the deadline, answer and all: the question timed out.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut again = call.clone();
    again["inputResponses"] = json!({"approval": accept(true)});
    again["requestState"] = state.clone();
    let done = raw.result_of("tools/call", again.clone(), false).await;
    s.core("CallToolResult", &done);
    assert_eq!(done["structuredContent"]["branch"], "timed_out", "{done}");

    // Back in time: the answer counts.
    let call = json!({"name": "ask_with_deadline", "arguments": args(60_000)});
    let first = raw.result_of("tools/call", call.clone(), false).await;
    s.core("InputRequiredResult", &first);
    let mut again = call;
    again["inputResponses"] = json!({"approval": accept(true)});
    again["requestState"] = first["requestState"].clone();
    let done = raw.result_of("tools/call", again, false).await;
    s.core("CallToolResult", &done);
    assert_eq!(done["structuredContent"]["branch"], "answered", "{done}");
    assert_eq!(done["structuredContent"]["approve"], true);
}
