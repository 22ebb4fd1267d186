//! The example servers' default logs, on real processes (the
//! `fleet-fixture`, with no `RUST_LOG` and stderr written to a file): at
//! INFO they show each task's lifecycle (created, parked, asleep, resumed,
//! taken over, ended with its status) by reference, never by id; rmcp's
//! per-request lines are not there, nor a line for each call refused
//! during a drain; and a file gets no colour codes.

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use common::{call, http_client, poll_until, task_id, update};
use rmcp::{
    model::{CancelTaskParams, TaskStatus},
    service::ServiceError,
};
use serde_json::json;

/// The fleet fixture on `store`, logging as it does by default (no
/// `RUST_LOG`) to the file `stderr`; its URL.
fn start(store: &Path, effects: &Path, stderr: &Path) -> (Child, String) {
    let mut child = Command::new(common::bin("fleet-fixture"))
        .args(["--addr", "127.0.0.1:0", "--store"])
        .arg(store)
        .args(["--lease", "2s"])
        .env_remove("RUST_LOG")
        .env("MCP_TASKS_EFFECTS", effects)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr).expect("the log file"))
        .spawn()
        .expect("the fixture starts");
    match common::process::listening(&mut child, Duration::from_secs(60)) {
        Ok((url, _)) => (child, url),
        Err(e) => {
            let _ = child.kill();
            panic!("the fixture did not say where it listens: {e}");
        }
    }
}

/// SIGTERM to `child`: it drains.
fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

/// SIGTERM to `child`; waits (at most 60 s) for it to exit 0.
fn terminate(child: Child) {
    sigterm(&child);
    exits_0(child);
}

/// Waits (at most 60 s) for `child` to exit 0.
fn exits_0(mut child: Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            assert!(status.success(), "exit status {status:?}");
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the fixture did not exit");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (at most 60 s) for the effects file to hold a line starting with
/// `prefix`.
async fn wait_for_effect(path: &Path, prefix: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with(prefix))
    {
        assert!(Instant::now() < deadline, "no effect {prefix:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The INFO lines of a log, and whether a line mentions each of `words`.
fn info_lines(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains(" INFO ")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_logs_show_each_tasks_lifecycle_by_reference_without_rmcp_or_colour() {
    let dir = tempfile::tempdir().unwrap();
    let store: PathBuf = dir.path().join("tasks.db");
    let effects = dir.path().join("effects.log");
    let (first_log, second_log) = (dir.path().join("first.log"), dir.path().join("second.log"));

    let (first, url) = start(&store, &effects, &first_log);
    let client = http_client(&url, true).await;
    // Parked, answered, resumed, completed.
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
    update(
        &client,
        &asking,
        json!({"approval": {"action": "accept", "content": {"approve": true}}}),
    )
    .await;
    poll_until(&client, &asking, |t| t.status() == TaskStatus::Completed).await;
    // Asleep, cancelled.
    let napping = task_id(
        client
            .call_tool_once(call("nap", json!({"seconds": 3600})))
            .await
            .expect("tools/call"),
    );
    client
        .peer()
        .cancel_task(CancelTaskParams::new(napping.clone()))
        .await
        .expect("tasks/cancel");
    poll_until(&client, &napping, |t| t.status() == TaskStatus::Cancelled).await;
    // Let go by a shutdown mid-step, taken over after the restart.
    let moving = task_id(
        client
            .call_tool_once(call(
                "steps",
                json!({"tag": "t", "steps": 2, "step_ms": 1000}),
            ))
            .await
            .expect("tools/call"),
    );
    wait_for_effect(&effects, "begin t 0 ").await;
    sigterm(&first);
    // Draining: each new call is refused (a call served before the signal
    // is handled naps on), and counted in one line rather than logged each.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut refused = 0;
    while refused < 3 {
        match client
            .call_tool_once(call("nap", json!({"seconds": 3600})))
            .await
        {
            Err(ServiceError::McpError(e)) => {
                assert_eq!(e.data.unwrap()["reason"], "shutting_down");
                refused += 1;
            }
            Ok(_) => assert!(Instant::now() < deadline, "calls are still served"),
            Err(other) => panic!("expected a JSON-RPC error, got {other:?}"),
        }
    }
    drop(client);
    exits_0(first);
    let (second, url) = start(&store, &effects, &second_log);
    let client = http_client(&url, true).await;
    poll_until(&client, &moving, |t| t.status() == TaskStatus::Completed).await;
    drop(client);
    terminate(second);

    let first = std::fs::read_to_string(&first_log).unwrap();
    let second = std::fs::read_to_string(&second_log).unwrap();
    let both = format!("{first}{second}");
    assert!(
        !both.contains('\u{1b}'),
        "no escape codes in a file:\n{both}"
    );
    for id in [&asking, &napping, &moving] {
        assert!(!both.contains(id.as_str()), "task id {id} logged:\n{both}");
    }
    assert!(
        !both.lines().any(|l| l.contains("rmcp::")),
        "rmcp's lines are not shown by default:\n{both}"
    );
    assert_eq!(
        first.lines().filter(|l| l.contains("shut")).count(),
        2,
        "one line as the drain begins, one as it ends:\n{first}"
    );
    let has = |log: &str, words: &[&str]| {
        info_lines(log)
            .iter()
            .any(|l| words.iter().all(|w| l.contains(w)))
    };
    // Each task is named by the same short reference in its lines.
    let reference = |id: &str| format!("task={}", &id[..8]);
    let (asked, napped, moved) = (reference(&asking), reference(&napping), reference(&moving));
    for (log, words) in [
        (
            &first,
            vec!["task created", "tool=approve_then_steps", &asked],
        ),
        (&first, vec!["task parked", "questions=1", &asked]),
        (&first, vec!["task resumed", "after=answers", &asked]),
        (&first, vec!["task ended", "status=completed", &asked]),
        (&first, vec!["task created", "tool=nap", &napped]),
        (&first, vec!["task asleep", &napped]),
        (&first, vec!["task ended", "status=cancelled", &napped]),
        (&first, vec!["task created", "tool=steps", &moved]),
        (&first, vec!["shutting down"]),
        (&first, vec!["shut down:", "refused_calls=3"]),
        (&second, vec!["task taken over", &moved]),
        (&second, vec!["task ended", "status=completed", &moved]),
    ] {
        assert!(has(log, &words), "no INFO line with {words:?} in:\n{log}");
    }
}
