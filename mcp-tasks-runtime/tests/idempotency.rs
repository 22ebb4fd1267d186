//! Idempotent starts through the Rust API: calls that carry the same key
//! (`Call::idempotency_key`), tool and principal get one task, on two
//! engines sharing one SQLite file or one Postgres schema, however many
//! race; the tool's step runs once. The same key with other arguments is refused, another principal's
//! key is another task, and a bad key is refused before anything runs.

use std::{
    collections::HashMap,
    sync::{LazyLock, Mutex},
    time::Duration,
};

use mcp_tasks_runtime::{
    Engine, Error, ToolError, checkpoint,
    engine::{Call, CallMode, CallOutcome},
    store::{
        PostgresStore, SqliteStore, Store, TaskStatus,
        testing::{PostgresSchema, postgres_server_or_skip},
    },
    task_tool,
    tool::Registry,
};
use serde_json::{Map, Value, json};

/// How many times the step ran, by service (each test deploys its own).
static RUNS: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Mutex::default);

fn runs(service: &str) -> usize {
    RUNS.lock().unwrap().get(service).copied().unwrap_or(0)
}

/// One step that counts its runs.
#[task_tool]
async fn deploy(service: String) -> Result<String, ToolError> {
    checkpoint("deploy", || async {
        *RUNS.lock().unwrap().entry(service.clone()).or_default() += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok::<_, ToolError>(format!("deployed {service}"))
    })
    .await
}

async fn engine(path: &std::path::Path, name: &str) -> Engine {
    on(SqliteStore::open(path).await.unwrap(), name).await
}

async fn on(store: impl Store, name: &str) -> Engine {
    Engine::builder(store)
        .registry(Registry::new().with(deploy_tool()).unwrap())
        .instance(name)
        .scan_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap()
}

fn args(service: &str) -> Map<String, Value> {
    json!({"service": service}).as_object().cloned().unwrap()
}

const KEY: &str = "6b1f0e0a-3c55-4f1e-9a57-8d2c61f0b7aa";

async fn start(engine: &Engine, call: Call) -> Result<String, Error> {
    match engine.call(call).await? {
        CallOutcome::Task(task) => Ok(task.id),
        other => panic!("a task, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_one_task_across_two_engines_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    let (a, b) = (engine(&path, "a").await, engine(&path, "b").await);
    one_key_one_task(&a, &b, "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_one_task_across_two_engines_on_postgres() {
    let Some(url) = postgres_server_or_skip("idempotency on postgres").await else {
        return;
    };
    let schema = PostgresSchema::new(&url, "mcp_tasks_idempotency");
    let store = || async {
        PostgresStore::builder(schema.url())
            .schema(schema.name())
            .connect()
            .await
            .unwrap()
    };
    let (a, b) = (on(store().await, "a").await, on(store().await, "b").await);
    one_key_one_task(&a, &b, "postgres").await;
}

/// Eight calls with one key race, half on each engine; then repeats,
/// other arguments, another principal, no key, and an inline call.
async fn one_key_one_task(a: &Engine, b: &Engine, service: &str) {
    let calls = (0..8).map(|i| {
        let engine = if i % 2 == 0 { a.clone() } else { b.clone() };
        let call = Call::new("deploy", args(service)).idempotency_key(KEY);
        tokio::spawn(async move { start(&engine, call).await })
    });
    let ids: Vec<String> = futures::future::join_all(calls)
        .await
        .into_iter()
        .map(|r| r.unwrap().unwrap())
        .collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");

    let done = wait_done(a, &ids[0], None).await;
    assert_eq!(done.status, TaskStatus::Completed);
    assert_eq!(runs(service), 1, "the step ran once");

    // A repeat after the end returns the ended task, on either engine.
    let again = Call::new("deploy", args(service)).idempotency_key(KEY);
    assert_eq!(start(b, again).await.unwrap(), ids[0]);
    assert_eq!(runs(service), 1);

    // The same key with other arguments is refused, naming the task.
    let other = Call::new("deploy", args("elsewhere")).idempotency_key(KEY);
    let refused = start(a, other).await.expect_err("other arguments");
    assert!(matches!(refused, Error::IdempotencyKey(_)), "{refused:?}");
    assert!(refused.to_string().contains(&ids[0]), "{refused}");

    // Another principal's key, and a call without a key, are other tasks.
    let alice = Call::new("deploy", args(service))
        .principal(Some("alice".into()))
        .idempotency_key(KEY);
    let alices = start(a, alice).await.unwrap();
    assert_ne!(alices, ids[0]);
    let plain = start(a, Call::new("deploy", args(service))).await.unwrap();
    assert!(plain != ids[0] && plain != alices);
    wait_done(a, &alices, Some("alice")).await;
    wait_done(a, &plain, None).await;
    assert_eq!(runs(service), 3);

    // An inline call (no task) ignores its key.
    let inline = Call::new("deploy", args(service))
        .mode(CallMode::Inline)
        .idempotency_key(KEY);
    assert!(matches!(
        a.call(inline).await.unwrap(),
        CallOutcome::Finished(Ok(_))
    ));
}

#[tokio::test]
async fn a_bad_key_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(&dir.path().join("tasks.db"), "solo").await;
    for (key, says) in [
        ("short", "5 characters long"),
        ("0123456789abcdef 0123", "visible ASCII"),
    ] {
        let call = Call::new("deploy", args("billing")).idempotency_key(key);
        let refused = start(&engine, call).await.expect_err(key);
        assert!(matches!(refused, Error::IdempotencyKey(_)), "{refused:?}");
        assert!(refused.to_string().contains(says), "{refused}");
    }
    let listed = engine.list(None, None, 10).await.unwrap();
    assert!(listed.is_empty(), "no task was stored: {listed:?}");
}

async fn wait_done(
    engine: &Engine,
    id: &str,
    principal: Option<&str>,
) -> mcp_tasks_runtime::store::TaskRecord {
    for _ in 0..400 {
        let task = engine.get(id, principal).await.unwrap();
        if task.status.is_terminal() {
            return task;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("task {id} did not end");
}
