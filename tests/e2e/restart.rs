//! The task flow survives a server restart, as a client sees it: the server
//! process is killed with SIGKILL and started again on the same SQLite file.

mod common;

use common::*;
use rmcp::model::{GetTaskParams, TaskPayload, TaskStatus};
use serde_json::json;

#[tokio::test]
async fn a_running_task_completes_after_sigkill_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tasks.db");
    let server = Server::start(&store);
    let client = http_client(&server.url, true).await;
    let id = task_id(
        client
            .call_tool_once(call(
                "slow_compute",
                json!({"seconds": 2, "label": "survivor"}),
            ))
            .await
            .unwrap(),
    );
    let t = client
        .peer()
        .get_task(GetTaskParams::new(id.clone()))
        .await
        .unwrap()
        .task;
    assert_eq!(t.status(), TaskStatus::Working);
    drop(client);
    server.kill();

    let server = Server::start(&store);
    let client = http_client(&server.url, true).await;
    let t = poll_until(&client, &id, is_terminal).await;
    assert_eq!(t.task.task_id, id);
    assert_eq!(result_text(&t).0, "slow_compute(survivor) done after 2s");
}

#[tokio::test]
async fn a_parked_task_keeps_its_question_across_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tasks.db");
    let server = Server::start(&store);
    let client = http_client(&server.url, true).await;
    let id = task_id(
        client
            .call_tool_once(call("confirm_delete", json!({"filename": "b.txt"})))
            .await
            .unwrap(),
    );
    poll_until(&client, &id, |t| t.status() == TaskStatus::InputRequired).await;
    drop(client);
    server.kill();

    let server = Server::start(&store);
    let client = http_client(&server.url, true).await;
    let t = client
        .peer()
        .get_task(GetTaskParams::new(id.clone()))
        .await
        .unwrap()
        .task;
    let TaskPayload::InputRequired { input_requests } = &t.payload else {
        panic!("{t:?}")
    };
    assert_eq!(input_requests.keys().collect::<Vec<_>>(), ["confirm"]);
    update(
        &client,
        &id,
        json!({"confirm": {"action": "accept", "content": {"confirm": false}}}),
    )
    .await;
    let t = poll_until(&client, &id, is_terminal).await;
    assert_eq!(
        result_text(&t).0,
        "confirm_delete(b.txt): confirmed = false"
    );
}

/// A process killed and started again under the same `--instance` name,
/// within its lease: the new process gives up the leases held under its
/// name at start, so the task runs on at once. (Were the old lease kept,
/// the new process's renewals would keep it live with no run behind it,
/// and the task would wait forever.)
#[tokio::test]
async fn a_restart_under_the_same_instance_name_runs_the_task_on() {
    use common::process::{ServerProcess, StoreArgs};
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let store = StoreArgs::Sqlite(dir.path().join("tasks.db"));
    let effects = dir.path().join("effects.log");
    let start = || {
        ServerProcess::start(
            common::bin("fleet-fixture"),
            &store,
            &["--instance", "solo", "--lease", "10m"],
            Some(&effects),
            Duration::from_secs(20),
        )
    };
    let server = start();
    let client = http_client(&server.url, true).await;
    let id = task_id(
        client
            .call_tool_once(call(
                "steps",
                json!({"tag": "same-name", "steps": 2, "step_ms": 300}),
            ))
            .await
            .unwrap(),
    );
    // Killed inside its first step.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&effects).is_ok_and(|e| e.contains("begin same-name 0")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the first step never began"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(client);
    server.kill();

    let server = start();
    let client = http_client(&server.url, true).await;
    let t = poll_until(&client, &id, is_terminal).await;
    assert_eq!(t.status(), TaskStatus::Completed, "{t:?}");
    let TaskPayload::Completed { result } = &t.payload else {
        unreachable!()
    };
    assert_eq!(result["structuredContent"]["finished_by"], "solo", "{t:?}");
    assert_eq!(
        result["structuredContent"]["nonces"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
}

/// A short durable sleep waits in its run, its deadline journaled first
/// and the task never parked; killed in the middle of it, the server started
/// again on the file (under the same instance name, as a restarted service
/// is, so the task is taken over at once) waits out the same deadline: the
/// entry the first process wrote is the one the task ends with.
#[tokio::test]
async fn a_short_sleep_keeps_its_deadline_across_sigkill() {
    use common::process::{ServerProcess, StoreArgs};
    use mcp_tasks_runtime::store::{SqliteStore, StepKind, Store};
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    let store = StoreArgs::Sqlite(path.clone());
    let start = || {
        ServerProcess::start(
            common::bin("fleet-fixture"),
            &store,
            &["--instance", "solo"],
            None,
            Duration::from_secs(20),
        )
    };
    let server = start();
    let client = http_client(&server.url, true).await;
    // One second: the longest sleep that waits in its run by default.
    let id = task_id(
        client
            .call_tool_once(call("nap", json!({"seconds": 1})))
            .await
            .unwrap(),
    );
    // Read through a connection of this process's own while the server
    // runs: the sleep's deadline is on disk, and the task is not parked.
    let reader = SqliteStore::open(&path).await.unwrap();
    let journal = journaled(&reader, &id).await;
    let record = reader.get(&id).await.unwrap().expect("the task is stored");
    assert_eq!(journal.len(), 1, "{journal:?}");
    assert_eq!(journal[0].kind, StepKind::Sleep);
    assert_eq!(
        record.wake_at_ms, None,
        "a short sleep does not park: {record:?}"
    );
    assert!(record.lease.is_some(), "its run holds it: {record:?}");
    drop(reader);
    drop(client);
    server.kill();

    let server = start();
    let client = http_client(&server.url, true).await;
    let t = poll_until(&client, &id, is_terminal).await;
    assert_eq!(t.status(), TaskStatus::Completed, "{t:?}");
    drop(client);
    drop(server);
    let reader = SqliteStore::open(&path).await.unwrap();
    assert_kept_its_deadline(&reader, &id, &journal).await;
}
