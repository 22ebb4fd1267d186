//! What tool code can do, seen by a real MCP client over HTTP on 127.0.0.1
//! (the server in-process): state handed over by the engine, the task's own
//! context, ending itself `cancelled`, and a server that will not start
//! when a tool's state is missing.

mod common;

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use common::*;
use mcp_tasks_runtime::{
    Engine, State, ToolError, durable,
    mcp::{self, TaskServer},
    store::SqliteStore,
    task_tool,
    tool::Registry,
};
use rmcp::model::{CancelTaskParams, TaskStatus};
use serde_json::json;

/// A stand-in for a cloud client.
struct Cloud {
    region: &'static str,
}

/// How many times `spawned`'s work ran, in this process.
static SPAWNED_RUNS: AtomicUsize = AtomicUsize::new(0);

/// Spawns its work, sleeps on a durable timer (so that the run after it
/// replays the journal), then reports the work's value.
#[task_tool(task = required)]
async fn spawned() -> Result<String, ToolError> {
    let work = durable::spawn("work", || async {
        let run = SPAWNED_RUNS.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(format!("work done in run {run}"))
    });
    durable::sleep(Duration::from_millis(200)).await;
    work.await
}

/// A type no server below is given.
struct Pager;

/// Names the region of the engine's cloud and the task it runs in.
#[task_tool(task = required)]
async fn region(cloud: State<Cloud>) -> String {
    let task = durable::task_info()
        .and_then(|t| t.task_id)
        .unwrap_or_default();
    format!("{} {task}", cloud.region)
}

/// Works until cancelled, then ends `cancelled`.
#[task_tool(task = required)]
async fn honour_cancel() -> Result<String, ToolError> {
    loop {
        if durable::cancelled() {
            return Err(ToolError::cancelled());
        }
        // Busy without an await point, on purpose.
        #[allow_nondeterminism]
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Pages someone: needs a `Pager` no server here has.
#[task_tool]
async fn page(pager: State<Pager>) -> String {
    let _ = pager;
    "paged".into()
}

async fn serve(dir: &tempfile::TempDir) -> String {
    let registry = Registry::new()
        .with(region_tool())
        .unwrap()
        .with(honour_cancel_tool())
        .unwrap()
        .with(spawned_tool())
        .unwrap();
    let store = SqliteStore::open(dir.path().join("tasks.db"))
        .await
        .unwrap();
    let engine = Engine::builder(store)
        .registry(registry)
        .state(Cloud {
            region: "eu-west-1",
        })
        .start()
        .await
        .unwrap();
    let server = TaskServer::builder(engine).build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(mcp::serve(listener, server).into_future());
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_gets_the_engines_state_and_its_own_task_id() {
    let dir = tempfile::tempdir().unwrap();
    let client = http_client(&serve(&dir).await, true).await;
    let tools = client.peer().list_all_tools().await.unwrap();
    let region = tools.iter().find(|t| t.name == "region").unwrap();
    let schema = serde_json::to_value(&region.input_schema).unwrap();
    assert!(
        schema["properties"].get("cloud").is_none() && schema.get("required").is_none(),
        "state is not an argument: {schema}"
    );
    let id = task_id(
        client
            .call_tool_once(call("region", json!({})))
            .await
            .unwrap(),
    );
    let done = poll_until(&client, &id, is_terminal).await;
    assert_eq!(result_text(&done), (format!("eu-west-1 {id}"), false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_honoured_from_inside_ends_the_task_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let client = http_client(&serve(&dir).await, true).await;
    let id = task_id(
        client
            .call_tool_once(call("honour_cancel", json!({})))
            .await
            .unwrap(),
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    client
        .peer()
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .expect("tasks/cancel");
    let done = poll_until(&client, &id, is_terminal).await;
    assert_eq!(done.status(), TaskStatus::Cancelled, "{done:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawned_step_is_journaled_and_not_run_again_by_the_replay() {
    let dir = tempfile::tempdir().unwrap();
    let client = http_client(&serve(&dir).await, true).await;
    let id = task_id(
        client
            .call_tool_once(call("spawned", json!({})))
            .await
            .unwrap(),
    );
    let done = poll_until(&client, &id, is_terminal).await;
    // The run that woke from the sleep took the value from the journal.
    assert_eq!(result_text(&done), ("work done in run 1".to_owned(), false));
    assert_eq!(SPAWNED_RUNS.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_server_missing_a_tools_state_does_not_start_and_names_it() {
    // Every `#[task_tool]` linked in (`page` among them), on an engine given
    // no state: it must refuse before it listens.
    let dir = tempfile::tempdir().unwrap();
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        serve_with_default_engine(dir.path().join("tasks.db")),
    )
    .await
    .expect("it returns at once")
    .expect_err("it refuses to start");
    let message = err.to_string();
    assert!(
        message.contains("tool `page`") && message.contains("State<tool_code::Pager>"),
        "{message}"
    );
}

/// Every linked tool served over HTTP, on a store of this test's own,
/// an engine with no state.
async fn serve_with_default_engine(
    store: std::path::PathBuf,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let engine = Engine::builder(SqliteStore::open(store).await?)
        .start()
        .await?;
    let server = TaskServer::builder(engine).build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    mcp::serve(listener, server).await
}
