//! The inline window, in-process over HTTP on 127.0.0.1: a task-capable call
//! that finishes within the window answers with its plain result; one that
//! does not answers with the task of the same execution, and nothing runs twice.

mod common;

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use common::*;
use mcp_tasks_runtime::{
    Engine, ToolError, checkpoint,
    mcp::{self, TaskServer},
    store::MemoryStore,
    task_tool,
    tool::Registry,
};
use rmcp::model::{CallToolResponse, TaskStatus};
use serde_json::json;

static SLOW_RUNS: AtomicUsize = AtomicUsize::new(0);

/// Answers at once.
#[task_tool]
async fn quick(x: u32) -> String {
    format!("quick {x}")
}

/// A step that takes longer than the window, then a second one.
#[task_tool]
async fn slow() -> Result<String, ToolError> {
    let first = checkpoint("long-step", || async {
        SLOW_RUNS.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(400)).await;
        Ok::<_, ToolError>(7)
    })
    .await?;
    // Not durable: the run holds its worker past the window.
    #[allow_nondeterminism]
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(format!("slow {first}"))
}

async fn serve(window: Duration) -> String {
    let registry = Registry::new()
        .with(quick_tool())
        .unwrap()
        .with(slow_tool())
        .unwrap();
    let engine = Engine::builder(MemoryStore::new())
        .registry(registry)
        .start()
        .await
        .unwrap();
    let server = TaskServer::builder(engine).inline_window(window).build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(mcp::serve(listener, server).into_future());
    url
}

#[tokio::test]
async fn quick_calls_get_their_result_and_slow_ones_become_the_same_task() {
    let url = serve(Duration::from_millis(150)).await;
    let client = http_client(&url, true).await;

    match client
        .call_tool_once(call("quick", json!({"x": 3})))
        .await
        .unwrap()
    {
        CallToolResponse::Complete(r) => {
            assert_eq!(r.content[0].as_text().unwrap().text, "quick 3")
        }
        other => panic!("expected the plain result within the window, got {other:?}"),
    }

    let id = match client
        .call_tool_once(call("slow", json!({})))
        .await
        .unwrap()
    {
        CallToolResponse::Task(t) => t.task.task_id,
        other => panic!("expected a task once the window ran out, got {other:?}"),
    };
    let t = poll_until(&client, &id, is_terminal).await;
    assert_eq!(t.status(), TaskStatus::Completed);
    assert_eq!(result_text(&t).0, "slow 7");
    assert_eq!(
        SLOW_RUNS.load(Ordering::SeqCst),
        1,
        "the step in flight when the window ran out ran once"
    );
}
