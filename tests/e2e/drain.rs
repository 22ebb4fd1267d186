//! Graceful shutdown, on real processes (the `fleet-fixture`, served by the
//! runtime's `mcp::serve(..).with_graceful_shutdown(..)`, whose
//! checkpoint effects are counted in a file): SIGTERM in the middle of a
//! step lets the step finish, refuses new tasks while `tasks/get`,
//! `tasks/update` and `tasks/cancel` are still served, and exits 0; after a
//! restart the tasks resume, and no step ran twice.

mod common;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use common::{
    assert_kept_its_deadline, call, http_client, journaled, poll_until,
    process::{ServerProcess, StoreArgs},
    task_id, update,
};
use rmcp::{
    model::{CancelTaskParams, GetTaskParams, TaskStatus},
    service::ServiceError,
};
use serde_json::json;

fn start(store: &StoreArgs, effects: &Path) -> ServerProcess {
    ServerProcess::start(
        common::bin("fleet-fixture"),
        store,
        &[
            "--lease",
            "2s",
            "--scan-interval",
            "100ms",
            "--drain-timeout",
            "60s",
        ],
        Some(effects),
        Duration::from_secs(60),
    )
}

fn effects(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits (at most 60 s) until the effects file satisfies `done`.
async fn wait_for(path: &Path, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let lines = effects(path);
        if done(&lines) {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "effects never got there: {lines:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn begins(lines: &[String], step: u32) -> usize {
    let prefix = format!("begin t {step} ");
    lines.iter().filter(|l| l.starts_with(&prefix)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_step_serves_reads_answers_and_cancels_refuses_creates_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreArgs::Sqlite(dir.path().join("tasks.db"));
    let log = dir.path().join("effects.log");
    let first = start(&store, &log);
    let client = http_client(&first.url, true).await;

    // A task waiting for an answer, and one asleep for an hour: the drain
    // takes the first's answer and the second's cancel.
    let asking = task_id(
        client
            .call_tool_once(call(
                "approve_then_steps",
                json!({"tag": "a", "steps": 1, "step_ms": 10}),
            ))
            .await
            .expect("tools/call"),
    );
    poll_until(&client, &asking, |t| {
        t.status() == TaskStatus::InputRequired
    })
    .await;
    let napping = task_id(
        client
            .call_tool_once(call("nap", json!({"seconds": 3600})))
            .await
            .expect("tools/call"),
    );

    // Three steps of 6 s each; SIGTERM once the first has begun.
    let id = task_id(
        client
            .call_tool_once(call(
                "steps",
                json!({"tag": "t", "steps": 3, "step_ms": 6000}),
            ))
            .await
            .expect("tools/call"),
    );
    wait_for(&log, |l| begins(l, 0) == 1).await;
    first.signal("TERM");

    // Draining: a create is refused with the error that says so (a create
    // that comes before the process has handled the signal is served, so
    // the probe is a task with no counted effect: an hour's nap).
    let deadline = Instant::now() + Duration::from_secs(30);
    let refused = loop {
        match client
            .call_tool_once(call("nap", json!({"seconds": 3600})))
            .await
        {
            Err(ServiceError::McpError(e)) => break e,
            Ok(_) => {
                assert!(Instant::now() < deadline, "creates are still served");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(other) => panic!("expected a JSON-RPC error, got {other:?}"),
        }
    };
    assert_eq!(refused.code.0, -32603, "{refused:?}");
    assert!(
        refused.message.contains("shutting down"),
        "{}",
        refused.message
    );
    assert_eq!(
        refused.data.as_ref().map(|d| d["reason"].clone()),
        Some(json!("shutting_down"))
    );
    // ...while tasks/get still answers.
    let during = client
        .peer()
        .get_task(GetTaskParams::new(id.clone()))
        .await
        .expect("tasks/get during the drain")
        .task;
    assert_eq!(during.status(), TaskStatus::Working);
    // ...tasks/update takes an answer (the task runs on after the restart)...
    update(
        &client,
        &asking,
        json!({"approval": {"action": "accept", "content": {"approve": true}}}),
    )
    .await;
    let answered = client
        .peer()
        .get_task(GetTaskParams::new(asking.clone()))
        .await
        .expect("tasks/get of the answered task during the drain")
        .task;
    assert_eq!(answered.status(), TaskStatus::Working, "{answered:?}");
    // ...and tasks/cancel ends a task.
    client
        .peer()
        .cancel_task(CancelTaskParams::new(napping.clone()))
        .await
        .expect("tasks/cancel during the drain");
    let cancelled = poll_until(&client, &napping, |t| t.status().is_terminal()).await;
    assert_eq!(cancelled.status(), TaskStatus::Cancelled, "{cancelled:?}");
    drop(client);

    // The step in flight finishes, and the process exits 0 without starting
    // the next.
    let status = first.wait(Duration::from_secs(60));
    assert!(status.success(), "exit status {status:?}");
    let after = effects(&log);
    assert_eq!(begins(&after, 0), 1, "{after:?}");
    assert!(
        after.iter().any(|l| l.starts_with("end t 0 ")),
        "the step in flight finished: {after:?}"
    );
    assert_eq!(
        begins(&after, 1),
        0,
        "no step began during the drain: {after:?}"
    );

    // A restart picks the tasks up from their journals and completes them.
    let second = start(&store, &log);
    let client = http_client(&second.url, true).await;
    let approved = poll_until(&client, &asking, |t| t.status().is_terminal()).await;
    assert_eq!(approved.status(), TaskStatus::Completed, "{approved:?}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let t = client
            .peer()
            .get_task(GetTaskParams::new(id.clone()))
            .await
            .expect("tasks/get after the restart")
            .task;
        if t.status().is_terminal() {
            break t;
        }
        assert!(Instant::now() < deadline, "never finished: {t:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(done.status(), TaskStatus::Completed, "{done:?}");
    let lines = effects(&log);
    for step in 0..3 {
        assert_eq!(begins(&lines, step), 1, "step {step} ran once: {lines:?}");
    }
    let ends = lines.iter().filter(|l| l.starts_with("end t ")).count();
    assert_eq!(ends, 3, "{lines:?}");
    let approved_steps = lines.iter().filter(|l| l.starts_with("begin a 0 ")).count();
    assert_eq!(
        approved_steps, 1,
        "the answered task ran its step once: {lines:?}"
    );
    second.terminate(Duration::from_secs(60));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreArgs::Sqlite(dir.path().join("tasks.db"));
    let log = dir.path().join("effects.log");
    let server = start(&store, &log);
    let client = http_client(&server.url, true).await;
    // A step far longer than the test waits: only a second signal ends the
    // drain before it.
    task_id(
        client
            .call_tool_once(call(
                "steps",
                json!({"tag": "t", "steps": 1, "step_ms": 600_000}),
            ))
            .await
            .expect("tools/call"),
    );
    wait_for(&log, |l| begins(l, 0) == 1).await;
    server.signal("TERM");
    // Draining once creates are refused.
    let deadline = Instant::now() + Duration::from_secs(30);
    while client
        .call_tool_once(call("nap", json!({"seconds": 3600})))
        .await
        .is_ok()
    {
        assert!(Instant::now() < deadline, "creates are still served");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(client);
    server.signal("TERM");
    let status = server.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(1), "{status:?}");
}

/// A run waiting out a short durable sleep in the process (a second, the
/// longest that waits in its run by default) is stopped by a drain at once:
/// the process exits 0 with the task still `working` and held by no one,
/// its deadline journaled, and the instance started after it finishes the
/// task on that same deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_a_short_sleep_at_once_and_the_next_instance_keeps_its_deadline() {
    use mcp_tasks_runtime::store::{SqliteStore, Store};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    let store = StoreArgs::Sqlite(path.clone());
    let log = dir.path().join("effects.log");
    let first = start(&store, &log);
    let client = http_client(&first.url, true).await;
    let id = task_id(
        client
            .call_tool_once(call("nap", json!({"seconds": 1})))
            .await
            .expect("tools/call"),
    );
    let reader = SqliteStore::open(&path).await.unwrap();
    let journal = journaled(&reader, &id).await;
    first.signal("TERM");
    drop(client);
    let status = first.wait(Duration::from_secs(30));
    assert!(status.success(), "exit status {status:?}");
    let left = reader.get(&id).await.unwrap().expect("the task is stored");
    assert_eq!(
        left.status,
        mcp_tasks_runtime::store::TaskStatus::Working,
        "{left:?}"
    );
    assert_eq!(left.lease, None, "given up by the drain: {left:?}");
    assert_eq!(left.wake_at_ms, None, "never parked: {left:?}");

    let second = start(&store, &log);
    let client = http_client(&second.url, true).await;
    let t = poll_until(&client, &id, |t| t.status() == TaskStatus::Completed).await;
    assert_eq!(t.status(), TaskStatus::Completed, "{t:?}");
    assert_kept_its_deadline(&reader, &id, &journal).await;
}
