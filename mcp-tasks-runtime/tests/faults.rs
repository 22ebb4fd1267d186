//! Faults the engine survives: a row the store cannot read is set aside
//! (its task fails with the reason) while the other tasks keep being served.
//! (Store writes that fail and recover: see `postgres_contract.rs`, where the
//! server really drops the connections.)

use std::time::{Duration, Instant};

use mcp_tasks_runtime::{
    Engine,
    store::{SqliteStore, Store, TaskRecord, TaskStatus},
    task_tool,
    tool::Registry,
};

/// Says hello.
#[task_tool]
async fn hello(name: String) -> String {
    format!("Hello, {name}!")
}

/// A working task of `hello`, as a process that died would have left it.
fn working(id: &str) -> TaskRecord {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let mut t = TaskRecord::new(id, "hello", i64::try_from(now).unwrap());
    t.arguments.insert("name".into(), serde_json::json!(id));
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_row_is_set_aside_and_the_rest_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    // Two working tasks left by an earlier process; one row gets damaged.
    let store = SqliteStore::open(&path).await.unwrap();
    store.create(working("good")).await.unwrap();
    store.create(working("bad")).await.unwrap();
    drop(store);
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute(
        "UPDATE tasks SET arguments = '{not json' WHERE id = 'bad'",
        [],
    )
    .unwrap();
    drop(c);

    let engine = Engine::builder(SqliteStore::open(&path).await.unwrap())
        .registry(Registry::new().with(hello_tool()).unwrap())
        .scan_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let good = engine
        .wait("good", None, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(good.status, TaskStatus::Completed, "{good:#?}");
    assert_eq!(good.result.unwrap()["content"][0]["text"], "Hello, good!");

    let begun = Instant::now();
    let bad = loop {
        match engine.get("bad", None).await {
            Ok(t) if t.status == TaskStatus::Failed => break t,
            _ => {}
        }
        assert!(begun.elapsed() < Duration::from_secs(10), "not set aside");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let message = bad.status_message.unwrap();
    assert!(
        message.contains("cannot be read") && message.contains("arguments"),
        "{message}"
    );
    assert_eq!(bad.error.unwrap().message, message);
    assert!(bad.arguments.is_empty());
}
