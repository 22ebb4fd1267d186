//! The inline window, in-process over HTTP on 127.0.0.1: a task-capable call
//! that finishes within the window answers with its plain result; one that
//! does not answers, when the window ends and while its step still runs,
//! with the task of the same execution, and nothing runs twice. A question
//! asked in flight ends the window at once: it needs the task to wait in.

mod common;

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use common::*;
use mcp_tasks_runtime::{
    Engine, ToolError, checkpoint, durable,
    mcp::{self, TaskServer},
    question::{FormRequest, InputRequest},
    store::MemoryStore,
    task_tool,
    tool::Registry,
};
use rmcp::model::{CallToolResponse, TaskPayload, TaskStatus};
use serde_json::json;
use tokio::sync::Semaphore;

static SLOW_RUNS: AtomicUsize = AtomicUsize::new(0);
/// Lets `slow`'s step finish: the test adds a permit once it holds the task.
static RELEASE: Semaphore = Semaphore::const_new(0);

/// Answers at once.
#[task_tool]
async fn quick(x: u32) -> String {
    format!("quick {x}")
}

/// A step that runs until the test lets it finish, long past the window.
#[task_tool]
async fn slow() -> Result<String, ToolError> {
    let first = checkpoint("long-step", || async {
        SLOW_RUNS.fetch_add(1, Ordering::SeqCst);
        RELEASE.acquire().await.expect("never closed").forget();
        Ok::<_, ToolError>(7)
    })
    .await?;
    Ok(format!("slow {first}"))
}

/// A question asked in flight, as a gateway relays an upstream's.
#[task_tool]
async fn asks_in_flight() -> Result<String, ToolError> {
    let schema = json!({"type": "object", "properties": {"region": {"type": "string"}}});
    let form = InputRequest::Form(FormRequest {
        message: "Which region?".into(),
        requested_schema: schema.as_object().cloned().unwrap_or_default(),
    });
    let answer = durable::ask_in_flight(form)
        .await
        .map_err(|e| ToolError::new(e.to_string()))?;
    Ok(format!("region {}", answer["content"]["region"]))
}

async fn serve(window: Duration) -> String {
    let registry = Registry::new()
        .with(quick_tool())
        .unwrap()
        .with(slow_tool())
        .unwrap()
        .with(asks_in_flight_tool())
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

    // The step is still running when the window ends: the answer is the
    // task, not a wait for the step (were it, this would time out).
    let answered = tokio::time::timeout(
        Duration::from_secs(30),
        client.call_tool_once(call("slow", json!({}))),
    )
    .await
    .expect("the call answers when its window ends, not when its step does");
    let id = match answered.unwrap() {
        CallToolResponse::Task(t) => t.task.task_id,
        other => panic!("expected a task once the window ran out, got {other:?}"),
    };
    let running = poll_until(&client, &id, |_| true).await;
    assert_eq!(running.status(), TaskStatus::Working);
    RELEASE.add_permits(1);
    let t = poll_until(&client, &id, is_terminal).await;
    assert_eq!(t.status(), TaskStatus::Completed);
    assert_eq!(result_text(&t).0, "slow 7");
    assert_eq!(
        SLOW_RUNS.load(Ordering::SeqCst),
        1,
        "the step in flight when the window ran out ran once"
    );
}

#[tokio::test]
async fn a_question_asked_in_flight_ends_the_window_at_once() {
    // A window far longer than the test waits: only the question ends it.
    let url = serve(Duration::from_secs(600)).await;
    let client = http_client(&url, true).await;
    let answered = tokio::time::timeout(
        Duration::from_secs(30),
        client.call_tool_once(call("asks_in_flight", json!({}))),
    )
    .await
    .expect("the question ends the window");
    let id = match answered.unwrap() {
        CallToolResponse::Task(t) => t.task.task_id,
        other => panic!("expected the task the question waits in, got {other:?}"),
    };
    let asked = poll_until(&client, &id, |t| t.status() == TaskStatus::InputRequired).await;
    let TaskPayload::InputRequired { input_requests } = &asked.payload else {
        panic!("input_required without its requests: {asked:?}");
    };
    let key = input_requests.keys().next().expect("one question").clone();
    update(
        &client,
        &id,
        json!({ key: {"action": "accept", "content": {"region": "eu"}} }),
    )
    .await;
    let t = poll_until(&client, &id, is_terminal).await;
    assert_eq!(t.status(), TaskStatus::Completed, "{t:?}");
    assert_eq!(result_text(&t).0, "region \"eu\"");
}
