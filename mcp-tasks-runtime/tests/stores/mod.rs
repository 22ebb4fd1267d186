//! The stores an engine-level scenario runs on, and helpers to watch its
//! tasks, for the test files that run one scenario on each store (each file
//! is its own crate and includes this module with `mod stores;`, using
//! what it needs of it).
#![allow(dead_code)]

use std::{io::Write as _, sync::Arc, time::Duration};

use mcp_tasks_runtime::{
    Engine,
    question::InputCapabilities,
    store::{
        MemoryStore, PostgresStore, SqliteStore, Store, TaskRecord, TaskStatus,
        testing::PostgresSchema,
    },
};

/// How long a scenario waits for a task to get where it must.
pub(crate) const LIMIT: Duration = Duration::from_secs(20);

/// A store for one scenario, and what must live as long as it.
pub(crate) struct Backend {
    pub(crate) store: Arc<dyn Store>,
    _keep: Option<Box<dyn std::any::Any + Send>>,
}

pub(crate) async fn memory() -> Option<Backend> {
    Some(Backend {
        store: Arc::new(MemoryStore::new()),
        _keep: None,
    })
}

/// A SQLite file in a temporary directory of its own.
pub(crate) async fn sqlite() -> Option<Backend> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = SqliteStore::open(dir.path().join("tasks.db"))
        .await
        .expect("open the SQLite store");
    Some(Backend {
        store: Arc::new(store),
        _keep: Some(Box::new(dir)),
    })
}

/// A Postgres schema named after `name` (`MCP_TASKS_POSTGRES_URL`, or
/// `postgres://postgres@127.0.0.1:5432/postgres`), dropped when the last
/// store on it is.
pub(crate) fn postgres_schema(name: &str) -> Arc<PostgresSchema> {
    let url = std::env::var("MCP_TASKS_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    Arc::new(PostgresSchema::new(&url, name))
}

/// A store (an instance's) on `schema`; `None`, with a note on stderr, when
/// no server answers, unless `CI` is set, where that fails the test.
pub(crate) async fn on_schema(schema: &Arc<PostgresSchema>) -> Option<Backend> {
    match PostgresStore::builder(schema.url())
        .schema(schema.name())
        .connect()
        .await
    {
        Ok(store) => Some(Backend {
            store: Arc::new(store),
            _keep: Some(Box::new(schema.clone())),
        }),
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "Postgres not reachable at {}: {e}",
                schema.url()
            );
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: Postgres not reachable at {}: {e}",
                schema.url()
            );
            None
        }
    }
}

/// A client that answers forms.
pub(crate) fn forms() -> InputCapabilities {
    let mut caps = InputCapabilities::NONE;
    caps.elicitation = true;
    caps
}

/// Task `id` once `pred` holds of it; fails after [`LIMIT`].
pub(crate) async fn until(
    engine: &Engine,
    id: &str,
    pred: impl Fn(&TaskRecord) -> bool,
) -> TaskRecord {
    let start = tokio::time::Instant::now();
    loop {
        let r = engine.get(id, None).await.expect("the task exists");
        if pred(&r) {
            return r;
        }
        assert!(start.elapsed() < LIMIT, "timed out on {id}: {r:#?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The first text of a completed task's result.
pub(crate) fn text(r: &TaskRecord) -> String {
    assert_eq!(r.status, TaskStatus::Completed, "{r:#?}");
    let result = r.result.as_ref().expect("a result");
    result["content"][0]["text"]
        .as_str()
        .expect("text")
        .to_owned()
}
