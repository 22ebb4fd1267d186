//! `spawn`: steps on tokio tasks of their own, in parallel with the fn,
//! journaled at the position taken when they were spawned, and never run
//! again by a replay.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use mcp_tasks_runtime::{
    Elicit, State, ToolError, ask_user, durable,
    store::{StepKind, TaskStatus},
    task_tool,
    testing::ToolTest,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Barrier;

#[derive(Debug, Deserialize, JsonSchema, Elicit)]
struct Go {
    /// Go ahead?
    go: bool,
}

/// What the spawned work shares with the test: how often it ran, and a
/// barrier both builds must reach before either can finish.
struct Builds {
    runs: AtomicUsize,
    both_started: Barrier,
}

/// Two builds at once, a question, then a result from both.
#[task_tool]
async fn parallel_builds(builds: State<Builds>) -> Result<String, ToolError> {
    let spawn_build = |os: &'static str| {
        let builds = builds.clone();
        durable::spawn(format!("build-{os}"), move || async move {
            builds.runs.fetch_add(1, Ordering::SeqCst);
            // Finishes only once the other build has started too.
            tokio::time::timeout(Duration::from_secs(10), builds.both_started.wait())
                .await
                .map_err(|_| ToolError::new("the builds did not run at the same time"))?;
            Ok(format!("{os}.tar.gz"))
        })
    };
    let linux = spawn_build("linux");
    let mac = spawn_build("mac");
    let (linux, mac) = (linux.await?, mac.await?);
    let publish = ask_user::<Go>("Publish?").await?;
    Ok(format!("{linux} {mac} publish={}", publish.go))
}

fn builds() -> Builds {
    Builds {
        runs: AtomicUsize::new(0),
        both_started: Barrier::new(2),
    }
}

#[tokio::test]
async fn spawned_steps_run_in_parallel_and_a_replay_never_runs_them_again() {
    let test = ToolTest::new(parallel_builds_tool())
        .state(builds())
        .start()
        .await;
    let task = test.call(json!({})).await;
    let q = task.question().await;
    task.answer(q.key(), json!({"go": true})).await;
    assert_eq!(task.text().await, "linux.tar.gz mac.tar.gz publish=true");

    let journal = test.engine().store().journal(task.id()).await.unwrap();
    let steps: Vec<_> = journal
        .iter()
        .map(|e| (e.position, e.kind, e.name.as_str(), e.value.clone()))
        .collect();
    assert_eq!(
        steps[..2],
        [
            (
                0,
                StepKind::Checkpoint,
                "build-linux",
                json!("linux.tar.gz")
            ),
            (1, StepKind::Checkpoint, "build-mac", json!("mac.tar.gz")),
        ],
        "each at the position taken when it was spawned"
    );
}

/// Spawns work and drops its handle, then asks a question.
#[task_tool]
async fn fire_and_forget(runs: State<Runs>) -> Result<String, ToolError> {
    let runs: &Runs = &runs;
    let runs = runs.0.clone();
    drop(durable::spawn("notify", move || async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        runs.fetch_add(1, Ordering::SeqCst);
        Ok("sent".to_owned())
    }));
    let go = ask_user::<Go>("Go?").await?;
    Ok(format!("go={}", go.go))
}

struct Runs(Arc<AtomicUsize>);

#[tokio::test]
async fn a_dropped_handle_still_journals_its_work_before_the_task_parks() {
    let runs = Arc::new(AtomicUsize::new(0));
    let test = ToolTest::new(fire_and_forget_tool())
        .state(Runs(runs.clone()))
        .start()
        .await;
    let task = test.call(json!({})).await;
    let q = task.question().await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the task parked only once the spawned work was done"
    );
    let journal = test.engine().store().journal(task.id()).await.unwrap();
    assert_eq!(
        (journal[0].name.as_str(), &journal[0].value),
        ("notify", &json!("sent"))
    );
    task.answer(q.key(), json!({"go": true})).await;
    assert_eq!(task.text().await, "go=true");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the replay did not run it");
}

/// Spawned work that panics.
#[task_tool]
async fn panicking() -> Result<String, ToolError> {
    let out: Result<String, ToolError> = durable::spawn("boom", || async {
        if true {
            panic!("disk on fire");
        }
        Ok("never".to_owned())
    })
    .await;
    Ok(format!("{:?}", out.map_err(|e| e.to_string())))
}

#[tokio::test]
async fn a_panic_in_spawned_work_comes_back_as_a_tool_error() {
    let test = ToolTest::new(panicking_tool()).start().await;
    let task = test.call(json!({})).await;
    let text = task.text().await;
    assert!(
        text.contains("the spawned step panicked: disk on fire"),
        "{text}"
    );
    assert_eq!(task.record().await.status, TaskStatus::Completed);
    let journal = test.engine().store().journal(task.id()).await.unwrap();
    assert!(journal.is_empty(), "nothing journaled: {journal:?}");
}

#[tokio::test]
async fn outside_a_task_spawn_is_a_plain_spawn() {
    let out = durable::spawn("plain", || async { Ok(21 * 2) }).await;
    assert_eq!(out.ok(), Some(42));
}
