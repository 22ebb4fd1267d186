//! The testing kit's edges: a `task = forbidden` tool, state the test keeps
//! (`state_arc`), the settle timeout and what its panic says, and a new
//! version of a tool run over a task an old version parked.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use mcp_tasks_runtime::{
    State, ToolError, checkpoint, confirm, durable, store::TaskStatus, task_tool, testing::ToolTest,
};
use serde_json::json;

/// Asks inline, never as a task.
#[task_tool(task = forbidden)]
async fn quick_check(what: String) -> Result<String, ToolError> {
    let yes = confirm(format!("Check {what}?")).await?;
    Ok(format!("{what}: {yes}"))
}

/// Answers inline, asking nothing.
#[task_tool(task = forbidden)]
async fn echo(text: String) -> String {
    text
}

#[tokio::test]
async fn a_forbidden_tool_is_called_inline_and_answered_round_by_round() {
    let test = ToolTest::new(quick_check_tool())
        .tool(echo_tool())
        .start()
        .await;
    let call = test.call_inline(json!({"what": "disk"})).await;
    let question = call.question().await;
    assert_eq!(question.message(), Some("Check disk?"));
    call.answer(question.key(), json!({"confirm": true})).await;
    assert_eq!(call.text().await, "disk: true");

    let declined = test.call_inline(json!({"what": "net"})).await;
    let key = declined.question().await.key().to_owned();
    declined.decline(&key).await;
    assert!(
        declined.output::<String>().await.is_err(),
        "a declined confirm is the tool's error"
    );

    let echoed = test.call_tool_inline("echo", json!({"text": "hi"})).await;
    assert_eq!(echoed.text().await, "hi");
}

#[tokio::test]
async fn call_on_a_forbidden_tool_names_call_inline() {
    let test = ToolTest::new(echo_tool()).start().await;
    let panic = tokio::spawn(async move { test.call(json!({"text": "hi"})).await })
        .await
        .expect_err("`call` makes no task of a forbidden tool");
    let message = panic_text(panic);
    assert!(
        message.contains("task = forbidden") && message.contains("call_inline"),
        "{message}"
    );
}

/// A fake that cannot be cloned: it records what it was asked to send.
#[derive(Default)]
struct Outbox {
    sent: Mutex<Vec<String>>,
}

/// Sends a mail through the outbox.
#[task_tool]
async fn send(to: String, outbox: State<Outbox>) -> Result<String, ToolError> {
    checkpoint("send", || async {
        outbox.sent.lock().unwrap().push(to.clone());
        Ok(())
    })
    .await?;
    Ok(format!("sent to {to}"))
}

#[tokio::test]
async fn state_arc_lets_the_test_read_a_fake_after_the_run() {
    let outbox = Arc::new(Outbox::default());
    let test = ToolTest::new(send_tool())
        .state_arc(outbox.clone())
        .start()
        .await;
    let task = test.call(json!({"to": "ada@example.com"})).await;
    assert_eq!(task.text().await, "sent to ada@example.com");
    assert_eq!(*outbox.sent.lock().unwrap(), ["ada@example.com"]);
}

/// Waits on a tokio timer: `advance` cannot move it.
#[task_tool]
async fn nap_on_tokio() -> String {
    #[allow_nondeterminism]
    tokio::time::sleep(Duration::from_secs(3600)).await;
    "woke".to_owned()
}

/// Waits on the durable timer.
#[task_tool]
async fn nap() -> String {
    durable::sleep(Duration::from_secs(3600)).await;
    "woke".to_owned()
}

/// Waits on the durable timer, briefly: short enough to wait in its run on
/// an engine with the default settings.
#[task_tool]
async fn short_nap() -> String {
    durable::sleep(Duration::from_millis(900)).await;
    "woke".to_owned()
}

#[tokio::test]
async fn a_short_durable_sleep_parks_in_the_kit_so_advance_moves_it() {
    // Settling within 100 ms: a sleep of 900 ms that waited in its run
    // would not settle, and `advance` would panic saying so.
    let test = ToolTest::new(short_nap_tool())
        .settle_timeout(Duration::from_millis(100))
        .start()
        .await;
    let task = test.call(json!({})).await;
    task.advance(Duration::from_millis(900)).await;
    assert_eq!(task.text().await, "woke");
}

#[tokio::test]
async fn a_tokio_timer_gives_a_short_message_naming_the_durable_sleep() {
    let test = ToolTest::new(nap_on_tokio_tool())
        .settle_timeout(Duration::from_millis(300))
        .start()
        .await;
    let task = test.call(json!({})).await;
    let panic = tokio::spawn(async move { task.advance(Duration::from_secs(3600)).await })
        .await
        .expect_err("the task never settles");
    let message = panic_text(panic);
    assert!(message.contains("waited 300ms"), "{message}");
    assert!(
        message.contains("tokio::time::sleep")
            && message.contains("mcp_tasks_runtime::durable::sleep"),
        "{message}"
    );
    assert!(
        message.len() < 400,
        "short: {} chars: {message}",
        message.len()
    );
    assert!(!message.contains("TaskRecord"), "no record dump: {message}");

    // The durable sleep settles, and `advance` moves it on.
    let test = ToolTest::new(nap_tool())
        .settle_timeout(Duration::from_millis(300))
        .start()
        .await;
    let task = test.call(json!({})).await;
    task.advance(Duration::from_secs(3600)).await;
    assert_eq!(task.text().await, "woke");
}

/// Version 1: builds, then asks before shipping.
#[task_tool(name = "ship")]
async fn ship_v1() -> Result<String, ToolError> {
    let build = checkpoint("build", || async { Ok(41) }).await?;
    let yes = confirm(format!("Ship build {build}?")).await?;
    Ok(format!("v1 shipped {build}: {yes}"))
}

/// Version 2: the same steps, a new ending.
#[task_tool(name = "ship", version = 2)]
async fn ship_v2() -> Result<String, ToolError> {
    let build = checkpoint("build", || async { Ok(42) }).await?;
    let yes = confirm(format!("Ship build {build}?")).await?;
    Ok(format!("v2 shipped {build}: {yes}"))
}

/// Version 3 no longer replays version 1's journals.
#[task_tool(name = "ship", version = 3, replays_from = 2)]
async fn ship_v3() -> Result<String, ToolError> {
    Ok("v3".to_owned())
}

#[tokio::test]
async fn a_new_version_runs_on_over_a_task_the_old_one_parked() {
    let v1 = ToolTest::new(ship_v1_tool()).start().await;
    let old = v1.call(json!({})).await;
    let key = old.question().await.key().to_owned();
    let id = old.id().to_owned();

    let v2 = v1.restart(ToolTest::new(ship_v2_tool())).await;
    let task = v2.task(&id);
    assert_eq!(
        task.question().await.key(),
        key,
        "still parked on v1's question"
    );
    task.answer(&key, json!({"confirm": true})).await;
    // The build v1 journaled, and v2's ending.
    assert_eq!(task.text().await, "v2 shipped 41: true");

    // A version that no longer replays v1's journals fails its tasks.
    let v1 = ToolTest::new(ship_v1_tool()).start().await;
    let old = v1.call(json!({})).await;
    old.question().await;
    let v3 = v1.restart(ToolTest::new(ship_v3_tool())).await;
    let record = v3.task(old.id()).finish().await;
    assert_eq!(record.status, TaskStatus::Failed);
}

fn panic_text(error: tokio::task::JoinError) -> String {
    let payload = error.into_panic();
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}
