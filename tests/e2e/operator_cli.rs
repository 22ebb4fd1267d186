//! The operator's CLI (`tasks`), run as a real process on the SQLite file a
//! running conformance server uses, after a scripted workload: a task
//! parked on a question, one asleep on a durable timer, one finished.

mod common;

use std::{path::Path, process::Command};

use common::*;
use rmcp::model::{GetTaskParams, TaskStatus};
use serde_json::{Value, json};

/// Runs `tasks --store STORE ARGS…`; returns (success, stdout, stderr).
fn tasks(store: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(common::bin("tasks"))
        .arg("--store")
        .arg(store)
        .args(args)
        .output()
        .expect("the CLI runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_of(store: &Path, args: &[&str]) -> Value {
    let (ok, out, err) = tasks(store, args);
    assert!(ok, "{args:?} failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_lists_shows_cancels_fails_and_purges() {
    let (dir, server) = Server::fresh();
    let store = dir.path().join("tasks.db");
    let client = http_client(&server.url, true).await;
    let parked = task_id(
        client
            .call_tool_once(call("confirm_delete", json!({"filename": "a.txt"})))
            .await
            .unwrap(),
    );
    let asleep = task_id(
        client
            .call_tool_once(call("slow_compute", json!({"seconds": 3600, "label": "x"})))
            .await
            .unwrap(),
    );
    let done = task_id(
        client
            .call_tool_once(call("slow_compute", json!({"seconds": 0, "label": "y"})))
            .await
            .unwrap(),
    );
    poll_until(&client, &parked, |t| {
        t.status() == TaskStatus::InputRequired
    })
    .await;
    poll_until(&client, &done, is_terminal).await;

    // The table: the unfinished tasks, with counts.
    let (ok, table, err) = tasks(&store, &["list"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("ID") && lines[0].contains("TOOL") && lines[0].contains("STATUS"));
    assert!(
        table.contains(&parked) && table.contains(&asleep),
        "{table}"
    );
    assert!(
        !table.contains(&done),
        "finished tasks are not listed by default: {table}"
    );
    assert!(
        table.contains("2 task(s): 1 working, 1 input_required"),
        "{table}"
    );

    // Filters and JSON.
    let only = json_of(&store, &["list", "--status", "input_required", "--json"]);
    assert_eq!(only.as_array().unwrap().len(), 1);
    assert_eq!(only[0]["id"], json!(parked));
    assert_eq!(only[0]["tool"], "confirm_delete");
    let none = json_of(&store, &["list", "--older-than", "1h", "--json"]);
    assert_eq!(none, json!([]));
    let all = json_of(&store, &["list", "--anonymous", "--json"]);
    assert_eq!(all.as_array().unwrap().len(), 3, "{all}");
    let every = json_of(&store, &["list", "--all", "--json"]);
    assert_eq!(every, all, "every caller's tasks: here, all anonymous");
    assert!(
        every
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == json!(done)),
        "finished ones included: {every}"
    );

    // One task, with its question and its journal.
    let (ok, shown, err) = tasks(&store, &["show", &parked]);
    assert!(ok, "{err}");
    assert!(shown.contains("status    input_required"), "{shown}");
    assert!(shown.contains("confirm @0: Delete a.txt?"), "{shown}");
    assert!(shown.contains("POS  KIND"), "{shown}");
    let shown = json_of(&store, &["show", &done, "--json"]);
    assert_eq!(shown["status"], "completed");
    assert_eq!(shown["journal"][0]["kind"], "sleep");

    // Cancel the sleeping one, fail the parked one: the server's clients see it.
    let (ok, said, err) = tasks(&store, &["cancel", &asleep]);
    assert!(
        ok && said.contains("cancel requested; now cancelled"),
        "{said}{err}"
    );
    let (ok, said, err) = tasks(&store, &["fail", &parked, "--reason", "the file is gone"]);
    assert!(ok && said.contains("failed; now failed"), "{said}{err}");
    let get = |id: String| {
        let client = &client;
        async move {
            client
                .peer()
                .get_task(GetTaskParams::new(id))
                .await
                .unwrap()
                .task
        }
    };
    assert_eq!(get(asleep.clone()).await.status(), TaskStatus::Cancelled);
    let failed = get(parked.clone()).await;
    assert_eq!(failed.status(), TaskStatus::Failed);
    assert_eq!(
        failed.task.status_message.as_deref(),
        Some("failed by an operator: the file is gone")
    );
    let (ok, said, _) = tasks(&store, &["cancel", &parked]);
    assert!(ok && said.contains("unchanged (failed)"), "{said}");

    // Purge, and an unknown id.
    let purged = json_of(&store, &["purge", "--json"]);
    assert_eq!(purged, json!({"purged": 0}));
    let (ok, _, err) = tasks(&store, &["show", "0123456789abcdef0123456789abcdef"]);
    assert!(
        !ok && err.contains("no task 0123456789abcdef0123456789abcdef"),
        "{err}"
    );
    drop(server);
}
