//! The copyable examples of the runtime (`mcp-tasks-runtime/examples`), each
//! started as its own process on 127.0.0.1 and called over Streamable HTTP
//! by an MCP client that declares the tasks extension, as a user would run
//! them.
//!
//! The fleet example needs PostgreSQL: `MCP_TASKS_POSTGRES_URL`, or
//! `postgres://postgres@127.0.0.1:5432/postgres`, in a schema of its own
//! dropped at the end. When the server cannot be reached, that test fails
//! if `CI` is set, and otherwise prints `SKIPPED: …` and passes.

mod common;

use std::{path::Path, process::Command, time::Duration};

use common::{
    call, http_client, is_terminal, poll_until, postgres_or_skip, process::ServerProcess, task_id,
    update,
};
use rmcp::model::{DetailedTask, TaskPayload, TaskStatus};
use serde_json::{Value, json};

/// Starts the example `bin` on a free port of 127.0.0.1 with `args` after
/// the address, in `dir` (where its SQLite file goes), and waits for the
/// line that says where it serves.
fn start_example(bin: &str, dir: &Path, args: &[&str], env: &[(&str, String)]) -> ServerProcess {
    let mut command = Command::new(bin);
    command
        .arg("127.0.0.1:0")
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(dir);
    ServerProcess::spawn(command, Duration::from_secs(60))
}

/// The `structuredContent` of a completed task's result.
fn structured(t: &DetailedTask) -> Value {
    match &t.payload {
        TaskPayload::Completed { result } => {
            assert_ne!(result.get("isError"), Some(&json!(true)), "{result:?}");
            result["structuredContent"].clone()
        }
        other => panic!("expected a completed task, got {other:?}"),
    }
}

#[tokio::test]
async fn first_tool_counts_words_in_a_task() {
    let dir = tempfile::tempdir().unwrap();
    let example = start_example(common::bin("first_tool"), dir.path(), &[], &[]);
    let client = http_client(&example.url, true).await;
    let created = client
        .call_tool_once(call("count_words", json!({"text": "one two\nthree"})))
        .await
        .expect("tools/call");
    let id = task_id(created);
    let done = poll_until(&client, &id, is_terminal).await;
    assert_eq!(structured(&done), json!({"lines": 2, "words": 3}));
    assert!(
        dir.path().join("first_tool.db").exists(),
        "the task was kept in the example's SQLite file"
    );
}

#[tokio::test]
async fn approval_asks_and_refunds_once_approved() {
    let dir = tempfile::tempdir().unwrap();
    let example = start_example(common::bin("approval"), dir.path(), &[], &[]);
    let client = http_client(&example.url, true).await;
    let created = client
        .call_tool_once(call("refund", json!({"order": "A-17", "cents": 1250})))
        .await
        .expect("tools/call");
    let id = task_id(created);
    let asked = poll_until(&client, &id, |t| {
        t.status() == TaskStatus::InputRequired || is_terminal(t)
    })
    .await;
    let asked = serde_json::to_value(&asked).unwrap();
    let question = &asked["inputRequests"]["decision"];
    assert_eq!(question["method"], "elicitation/create", "{asked}");
    assert!(
        question["params"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("A-17")),
        "{asked}"
    );
    update(
        &client,
        &id,
        json!({"decision": {"action": "accept", "content": {"approve": true}}}),
    )
    .await;
    let done = poll_until(&client, &id, is_terminal).await;
    assert_eq!(
        structured(&done),
        json!({"order": "A-17", "cents": 1250, "total_cents": 1250})
    );
}

#[tokio::test]
async fn fleet_postgres_serves_one_task_from_two_instances() {
    let Some(url) = postgres_or_skip("fleet_postgres_serves_one_task_from_two_instances").await
    else {
        return;
    };
    // Declared first, so that it is dropped after the processes.
    let schema = mcp_tasks_runtime::store::testing::PostgresSchema::new(&url, "copyable_fleet");
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("DATABASE_URL", schema.url()),
        ("MCP_TASKS_SCHEMA", schema.name().to_owned()),
    ];
    let bin = common::bin("fleet_postgres");
    let a = start_example(bin, dir.path(), &["a"], &env);
    let b = start_example(bin, dir.path(), &["b"], &env);
    let on_a = http_client(&a.url, true).await;
    let on_b = http_client(&b.url, true).await;
    let created = on_a
        .call_tool_once(call("nightly_export", json!({"batches": 3})))
        .await
        .expect("tools/call");
    let id = task_id(created);
    // Created on A, followed to its end on B.
    let done = poll_until(&on_b, &id, is_terminal).await;
    let exported = structured(&done);
    assert_eq!(exported["batches"], 3, "{exported}");
    let ran_on = exported["ran_on"].as_array().expect("a list of instances");
    assert!(
        !ran_on.is_empty() && ran_on.iter().all(|i| i == "a" || i == "b"),
        "{exported}"
    );
    drop((on_a, on_b));
    // Ctrl-C: the instance hands its tasks over and exits cleanly.
    a.signal("INT");
    assert!(a.wait(Duration::from_secs(30)).success());
    drop(b);
}
