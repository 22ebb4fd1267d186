//! `Engine::drain` through the Rust API, on a SQLite file: the step in
//! flight finishes and is journaled, the run stops before the next step,
//! creates are refused while reads go on, and the task is let go for the
//! next instance, which completes it without running the step again.

use std::{
    sync::{
        LazyLock, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use mcp_tasks_runtime::{
    Engine, Error, ToolError, checkpoint,
    engine::{Call, CallOutcome},
    store::{SqliteStore, TaskStatus},
    task_tool,
    tool::Registry,
};
use tokio::sync::watch;

/// How many times each step's closure began.
static FIRST: AtomicUsize = AtomicUsize::new(0);
static SECOND: AtomicUsize = AtomicUsize::new(0);
/// Open (true) lets the first step finish; the step says it began with
/// `STARTED`.
static GATE: LazyLock<Mutex<(watch::Sender<bool>, watch::Sender<bool>)>> =
    LazyLock::new(|| Mutex::new((watch::channel(false).0, watch::channel(false).0)));

/// Two checkpoints; the first waits for the gate.
#[task_tool]
async fn two_steps() -> Result<String, ToolError> {
    let a: u32 = checkpoint("first", || async {
        FIRST.fetch_add(1, Ordering::SeqCst);
        let (mut open, started) = {
            let g = GATE.lock().unwrap();
            (g.0.subscribe(), g.1.clone())
        };
        started.send_replace(true);
        let _ = open.wait_for(|o| *o).await;
        Ok::<_, ToolError>(1)
    })
    .await?;
    let b: u32 = checkpoint("second", || async {
        SECOND.fetch_add(1, Ordering::SeqCst);
        Ok::<_, ToolError>(2)
    })
    .await?;
    Ok(format!("{}", a + b))
}

async fn engine(path: &std::path::Path, name: &str) -> Engine {
    Engine::builder(SqliteStore::open(path).await.unwrap())
        .registry(Registry::new().with(two_steps_tool()).unwrap())
        .instance(name)
        .scan_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_finishes_the_step_in_flight_and_lets_the_task_go() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    let first = engine(&path, "first").await;
    let mut started = GATE.lock().unwrap().1.subscribe();

    let CallOutcome::Task(task) = first
        .call(Call::new("two_steps", serde_json::Map::new()))
        .await
        .unwrap()
    else {
        panic!("a task")
    };
    tokio::time::timeout(Duration::from_secs(20), started.wait_for(|s| *s))
        .await
        .expect("the first step began")
        .unwrap();

    let drain = tokio::spawn({
        let first = first.clone();
        async move { first.drain(Duration::from_secs(60)).await }
    });
    while !first.is_draining() {
        tokio::task::yield_now().await;
    }
    // Draining: no create, but reads are served.
    let refused = first
        .call(Call::new("two_steps", serde_json::Map::new()))
        .await
        .expect_err("a create while draining");
    assert!(matches!(refused, Error::ShuttingDown), "{refused:?}");
    assert!(refused.to_string().contains("shutting down"), "{refused}");
    assert_eq!(first.refused_calls(), 1, "the refusal is counted");
    let during = first.get(&task.id, None).await.unwrap();
    assert_eq!(during.status, TaskStatus::Working);
    assert!(
        !drain.is_finished(),
        "the drain waits for the step in flight"
    );

    // The step finishes; the drain ends without starting the next one.
    GATE.lock().unwrap().0.send_replace(true);
    drain.await.unwrap().unwrap();
    let store = first.store().clone();
    let journal = store.journal(&task.id).await.unwrap();
    assert_eq!(journal.len(), 1, "{journal:#?}");
    assert_eq!(journal[0].name, "first");
    let left = store.get(&task.id).await.unwrap().unwrap();
    assert_eq!(left.status, TaskStatus::Working);
    assert!(left.lease.is_none(), "the lease is released: {left:?}");
    assert_eq!(SECOND.load(Ordering::SeqCst), 0);
    drop(first);

    // The next instance completes it from the journal.
    let second = engine(&path, "second").await;
    let done = second
        .wait(&task.id, None, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(done.status, TaskStatus::Completed, "{done:?}");
    assert_eq!(FIRST.load(Ordering::SeqCst), 1, "the first step ran once");
    assert_eq!(SECOND.load(Ordering::SeqCst), 1);
}
