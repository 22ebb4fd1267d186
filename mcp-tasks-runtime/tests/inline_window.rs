//! A call run inline within its window that becomes its task mid-run: the
//! task is stored with the steps recorded so far, the step in flight goes
//! on and is journaled in the store, and the run is the task's from then
//! on: a drain stops it at its next step, and another instance sharing the
//! store finishes the task from its journal, no finished step run twice.
//!
//! Each scenario runs on a SQLite file and on Postgres (`MCP_TASKS_POSTGRES_URL`,
//! or `postgres://postgres@127.0.0.1:5432/postgres`; skipped with a note on
//! stderr when no server answers, unless `CI` is set).

mod stores;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use mcp_tasks_runtime::{
    Engine, ToolError, checkpoint,
    engine::{Call, CallOutcome, Limits},
    question::InputCapabilities,
    store::TaskStatus,
    task_tool,
    tool::Registry,
};
use serde_json::{Map, json};
use stores::{Backend, on_schema, postgres_schema, sqlite, text, until};
use tokio::sync::Semaphore;

/// How many times each step's closure ran, by task tag and step.
fn ran() -> &'static Mutex<HashMap<String, usize>> {
    static RAN: OnceLock<Mutex<HashMap<String, usize>>> = OnceLock::new();
    RAN.get_or_init(Default::default)
}

fn count(tag: &str, step: &str) {
    *ran()
        .lock()
        .unwrap()
        .entry(format!("{tag}/{step}"))
        .or_default() += 1;
}

fn runs_of(tag: &str, step: &str) -> usize {
    ran()
        .lock()
        .unwrap()
        .get(&format!("{tag}/{step}"))
        .copied()
        .unwrap_or(0)
}

/// The gate step `b` of task `tag` waits at, until the test opens it.
fn gate(tag: &str) -> Arc<Semaphore> {
    static GATES: OnceLock<Mutex<HashMap<String, Arc<Semaphore>>>> = OnceLock::new();
    GATES
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry(tag.to_owned())
        .or_insert_with(|| Arc::new(Semaphore::new(0)))
        .clone()
}

/// Three steps; the second waits for the test, long past the window.
#[task_tool]
async fn staged(tag: String) -> Result<String, ToolError> {
    let a = checkpoint("a", || async {
        count(&tag, "a");
        Ok::<_, ToolError>(1)
    })
    .await?;
    let b = checkpoint("b", || async {
        count(&tag, "b");
        gate(&tag).acquire().await.expect("never closed").forget();
        Ok::<_, ToolError>(2)
    })
    .await?;
    let c = checkpoint("c", || async {
        count(&tag, "c");
        Ok::<_, ToolError>(3)
    })
    .await?;
    Ok(format!("{a}{b}{c}"))
}

/// A first step whose value is over a 1 KiB journal limit, then one that
/// waits past the window.
#[task_tool]
async fn oversized(tag: String) -> Result<String, ToolError> {
    let big = checkpoint("big", || async { Ok::<_, ToolError>("x".repeat(4096)) }).await?;
    checkpoint("b", || async {
        count(&tag, "b");
        gate(&tag).acquire().await.expect("never closed").forget();
        Ok::<_, ToolError>(())
    })
    .await?;
    Ok(big)
}

async fn engine(backend: &Backend, instance: &str) -> Engine {
    engine_with(backend, instance, Limits::default()).await
}

async fn engine_with(backend: &Backend, instance: &str, limits: Limits) -> Engine {
    let registry = Registry::new()
        .with(staged_tool())
        .and_then(|r| r.with(oversized_tool()))
        .expect("a registry");
    Engine::builder_arc(backend.store.clone())
        .registry(registry)
        .limits(limits)
        .instance(instance)
        .scan_interval(Duration::from_millis(50))
        .start()
        .await
        .expect("start the engine")
}

/// Calls `staged` with a 50 ms window: the task it became, and the steps
/// its store held when the call was answered.
async fn call_past_the_window(engine: &Engine, tag: &str) -> (String, Vec<String>) {
    let mut args = Map::new();
    args.insert("tag".into(), json!(tag));
    let call = Call::new("staged", args)
        .capabilities(InputCapabilities::ALL)
        .inline_window(Duration::from_millis(50));
    let answered = tokio::time::timeout(stores::LIMIT, engine.call(call))
        .await
        .expect("the call answers when its window ends, its step still running")
        .expect("the call");
    let CallOutcome::Task(task) = answered else {
        panic!("expected the task the call became, got {answered:?}");
    };
    assert_eq!(task.status, TaskStatus::Working);
    (task.id.clone(), names(engine, &task.id).await)
}

/// The names of the steps task `id`'s journal holds, in order.
async fn names(engine: &Engine, id: &str) -> Vec<String> {
    engine
        .store()
        .journal(id)
        .await
        .expect("the journal")
        .into_iter()
        .map(|e| e.name)
        .collect()
}

async fn carries_on_as_the_task(backend: Backend) {
    let tag = tag("carries-on");
    let engine = engine(&backend, "a").await;
    let (id, journaled) = call_past_the_window(&engine, &tag).await;
    assert_eq!(journaled, ["a"], "stored with the steps recorded inline");
    gate(&tag).add_permits(1);
    let done = until(&engine, &id, |r| r.status.is_terminal()).await;
    assert_eq!(text(&done), "123");
    assert_eq!(names(&engine, &id).await, ["a", "b", "c"]);
    for step in ["a", "b", "c"] {
        assert_eq!(runs_of(&tag, step), 1, "step {step} ran once");
    }
}

async fn drained_and_finished_elsewhere(a: &Backend, b: &Backend) {
    let tag = tag("drained");
    let first = engine(a, "first").await;
    let (id, _) = call_past_the_window(&first, &tag).await;
    // The drain waits for the step in flight, which the run journals in
    // the store, then stops it at its next step and gives the task up.
    let draining = tokio::spawn({
        let first = first.clone();
        async move { first.drain(stores::LIMIT).await }
    });
    gate(&tag).add_permits(1);
    draining.await.expect("the drain").expect("drained");
    assert_eq!(names(&first, &id).await, ["a", "b"]);
    let second = engine(b, "second").await;
    let done = until(&second, &id, |r| r.status.is_terminal()).await;
    assert_eq!(text(&done), "123");
    for step in ["a", "b", "c"] {
        assert_eq!(runs_of(&tag, step), 1, "step {step} ran once");
    }
}

/// A step recorded inline over the journal's size limit fails the call
/// when its window ends, as it would have at the call's end: no task is
/// stored with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_over_the_limits_fails_the_call_its_window_ends() {
    let backend = sqlite().await.unwrap();
    let mut limits = Limits::default();
    limits.max_journal_entry_bytes = 1024;
    let engine = engine_with(&backend, "a", limits).await;
    let tag = tag("oversized");
    let mut args = Map::new();
    args.insert("tag".into(), json!(tag));
    let call = Call::new("oversized", args)
        .capabilities(InputCapabilities::ALL)
        .inline_window(Duration::from_millis(50));
    let answered = tokio::time::timeout(stores::LIMIT, engine.call(call))
        .await
        .expect("the call answers when its window ends")
        .expect("the call");
    let CallOutcome::Finished(Err(error)) = answered else {
        panic!("expected the call failed, got {answered:?}");
    };
    assert!(
        error.message.contains("max_journal_entry_bytes"),
        "{error:?}"
    );
    let stored = engine.store().list_all(None, 10).await.expect("the tasks");
    assert!(stored.is_empty(), "no task stored: {stored:?}");
    gate(&tag).add_permits(1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_carries_on_as_the_task() {
    carries_on_as_the_task(sqlite().await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_carries_on_as_the_task() {
    let schema = postgres_schema("inline_window_carries_on");
    if let Some(backend) = on_schema(&schema).await {
        carries_on_as_the_task(backend).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_drained_and_finished_elsewhere() {
    // Two instances on one SQLite file.
    let file = sqlite().await.unwrap();
    drained_and_finished_elsewhere(&file, &file).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_drained_and_finished_elsewhere() {
    let schema = postgres_schema("inline_window_drained");
    let (Some(a), Some(b)) = (on_schema(&schema).await, on_schema(&schema).await) else {
        return;
    };
    drained_and_finished_elsewhere(&a, &b).await;
}

fn tag(name: &str) -> String {
    format!(
        "{name}-{}-{:?}",
        std::process::id(),
        std::time::Instant::now()
    )
}
