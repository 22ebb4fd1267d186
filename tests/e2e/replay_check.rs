//! The replay check that gates a deploy, end to end: the `versioned-digest`
//! server as real processes on 127.0.0.1 and one real SQLite file. Version
//! 1 parks tasks (one on a question, one in a durable sleep); the next
//! build, run with `--check-replay`, says whether they would resume on it,
//! and its exit code gates the deploy. Also the journal export, from the
//! operator CLI (`tasks journal ID`) and the admin page
//! (`/tasks/{id}/journal.json`), which give the same JSON.

mod common;

use std::{
    ffi::OsStr,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use common::{
    digest::{Parked, get_json, park_two},
    process::{ServerProcess, StoreArgs},
    raw::{Raw, Reply},
};
use serde_json::{Value, json};

/// Every wait in these tests gives up after this long.
const PATIENCE: Duration = Duration::from_secs(20);

fn digest_bin() -> &'static str {
    common::bin("versioned-digest")
}

/// Runs `versioned-digest` built as `version` with `args` on `store`, to
/// its end: its exit code and what it printed.
fn run(store: &Path, version: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(digest_bin())
        .args(args)
        .arg("--store")
        .arg(store)
        .env("MCP_TASKS_DIGEST_VERSION", version)
        .env("RUST_LOG", "error")
        .output()
        .expect("the server binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.is_empty() || !stderr.contains("panicked"),
        "{stderr}"
    );
    (out.status.code(), stdout)
}

/// `tasks journal ID` on `store`, parsed.
fn cli_journal(store: &Path, id: &str) -> Value {
    let out = Command::new(common::bin("tasks"))
        .arg("--store")
        .arg(store)
        .args(["journal", id])
        .output()
        .expect("the CLI runs");
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("the CLI prints JSON")
}

fn entry(position: u32, kind: &str, name: &str) -> (u64, String, String) {
    (u64::from(position), kind.to_owned(), name.to_owned())
}

/// The (position, kind, name) of each entry of an export.
fn steps(export: &Value) -> Vec<(u64, String, String)> {
    export["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["position"].as_u64().unwrap(),
                e["kind"].as_str().unwrap().to_owned(),
                e["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Version 1 parks a task on its question and puts another to sleep, then
/// drains. Version 2 with its steps reordered and no `patched` fails the
/// check (exit 1), naming both tasks with position 0 and both steps, in
/// text and in JSON; version 2 with `patched` passes it (exit 0). The
/// checks change nothing in the file, and the task parked by version 1
/// then finishes on version 2 as the check said it would.
#[tokio::test]
async fn the_check_gates_a_deploy_that_reorders_steps() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tasks.db");

    let Parked {
        server: v1,
        admin,
        asked,
        asleep,
        slept,
    } = park_two(&StoreArgs::Sqlite(store.clone())).await;
    assert_eq!(
        steps(&slept),
        [
            entry(0, "checkpoint", "fetch-members"),
            entry(1, "checkpoint", "compute-stats"),
            entry(2, "sleep", "sleep"),
        ]
    );
    let (_, parked) = get_json(&format!("{admin}tasks/{asked}/journal.json")).await;
    assert_eq!(parked["status"], "input_required", "{parked}");

    // The task's page links its export.
    let page = reqwest::get(format!("{admin}tasks/{asked}"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains(&format!("href=\"/tasks/{asked}/journal.json\"")),
        "{page}"
    );
    let (status, missing) = get_json(&format!("{admin}tasks/nope/journal.json")).await;
    assert_eq!(status, 404, "{missing}");

    assert!(v1.terminate(PATIENCE).success(), "version 1 drains");

    // The CLI's export is the admin page's.
    let exported = cli_journal(&store, &asked);
    assert_eq!(exported, parked);
    let before = (cli_journal(&store, &asked), cli_journal(&store, &asleep));

    let (code, text) = run(&store, "2-unpatched", &["--check-replay"]);
    assert_eq!(code, Some(1), "a divergence fails the check: {text}");
    for id in [&asked, &asleep] {
        assert!(
            text.contains(&format!(
                "{id} digest v1: diverges at position 0: recorded checkpoint `fetch-members`, \
                 the code now asks for checkpoint `compute-stats`"
            )),
            "{text}"
        );
    }
    assert!(text.trim_end().ends_with("FAILED"), "{text}");

    let (code, out) = run(&store, "2-unpatched", &["--check-replay=json"]);
    assert_eq!(code, Some(1), "{out}");
    let report: Value = serde_json::from_str(&out).expect("the report as JSON");
    assert_eq!(report["passed"], false);
    let divergent: Vec<&str> = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["verdict"] == "diverges" && t["position"] == 0)
        .map(|t| t["taskId"].as_str().unwrap())
        .collect();
    assert_eq!(divergent.len(), 2, "{report}");
    assert!(divergent.contains(&asked.as_str()) && divergent.contains(&asleep.as_str()));

    let (code, text) = run(&store, "2", &["--check-replay"]);
    assert_eq!(code, Some(0), "version 2 with `patched` passes: {text}");
    for id in [&asked, &asleep] {
        assert!(text.contains(&format!("{id} digest v1: replays")), "{text}");
    }

    assert_eq!(
        (cli_journal(&store, &asked), cli_journal(&store, &asleep)),
        before,
        "the checks wrote nothing"
    );

    // Deployed, version 2 finishes the parked task on its recorded path.
    let v2 = ServerProcess::start_with_env(
        digest_bin(),
        &StoreArgs::Sqlite(store.clone()),
        &[],
        &[("MCP_TASKS_DIGEST_VERSION", OsStr::new("2"))],
        PATIENCE,
    );
    let mut raw = Raw::new(&v2.url);
    let key = parked_key(&mut raw, &asked).await;
    let params = json!({
        "taskId": asked,
        "inputResponses": {key: {"action": "accept", "content": {"confirm": true}}},
    });
    let Reply { status, body } = raw
        .send("tasks/update", params, true, Some(asked.as_str()))
        .await;
    assert_eq!(status, 200, "{body}");
    let done = until_completed(&mut raw, &asked).await;
    assert_eq!(
        done["result"]["content"][0]["text"], "sent ops's digest (3 members, ops: 3 releases)",
        "{done}"
    );
    assert_eq!(
        steps(&cli_journal(&store, &asked)),
        [
            entry(0, "checkpoint", "fetch-members"),
            entry(1, "checkpoint", "compute-stats"),
            entry(2, "ask", "bool"),
            entry(3, "checkpoint", "send"),
        ]
    );
}

/// The key of the one question task `id` waits on.
async fn parked_key(raw: &mut Raw, id: &str) -> String {
    let task = task_get(raw, id).await;
    let requests = task["inputRequests"]
        .as_object()
        .unwrap_or_else(|| panic!("parked on a question: {task}"));
    requests.keys().next().unwrap().clone()
}

async fn task_get(raw: &mut Raw, id: &str) -> Value {
    let Reply { status, body } = raw
        .send("tasks/get", json!({"taskId": id}), true, Some(id))
        .await;
    assert_eq!(status, 200, "{body}");
    body["result"].clone()
}

async fn until_completed(raw: &mut Raw, id: &str) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let task = task_get(raw, id).await;
        if task["status"] == "completed" {
            return task;
        }
        assert!(Instant::now() < deadline, "task {id} is stuck at {task}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
