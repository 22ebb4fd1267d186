//! The task flow survives a server restart, as a client sees it: the server
//! process is killed with SIGKILL and started again on the same SQLite file.

mod common;

use common::*;
use rmcp::model::{GetTaskParams, TaskPayload, TaskStatus};
use serde_json::json;

#[tokio::test]
async fn a_running_task_completes_after_sigkill_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tasks.db");
    let server = Server::start(&store);
    let client = http_client(&server.url, true).await;
    let id = task_id(
        client
            .call_tool_once(call(
                "slow_compute",
                json!({"seconds": 2, "label": "survivor"}),
            ))
            .await
            .unwrap(),
    );
    let t = client
        .peer()
        .get_task(GetTaskParams::new(id.clone()))
        .await
        .unwrap()
        .task;
    assert_eq!(t.status(), TaskStatus::Working);
    drop(client);
    server.kill();

    let server = Server::start(&store);
    let client = http_client(&server.url, true).await;
    let t = poll_until(&client, &id, is_terminal).await;
    assert_eq!(t.task.task_id, id);
    assert_eq!(result_text(&t).0, "slow_compute(survivor) done after 2s");
}

#[tokio::test]
async fn a_parked_task_keeps_its_question_across_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tasks.db");
    let server = Server::start(&store);
    let client = http_client(&server.url, true).await;
    let id = task_id(
        client
            .call_tool_once(call("confirm_delete", json!({"filename": "b.txt"})))
            .await
            .unwrap(),
    );
    poll_until(&client, &id, |t| t.status() == TaskStatus::InputRequired).await;
    drop(client);
    server.kill();

    let server = Server::start(&store);
    let client = http_client(&server.url, true).await;
    let t = client
        .peer()
        .get_task(GetTaskParams::new(id.clone()))
        .await
        .unwrap()
        .task;
    let TaskPayload::InputRequired { input_requests } = &t.payload else {
        panic!("{t:?}")
    };
    assert_eq!(input_requests.keys().collect::<Vec<_>>(), ["confirm"]);
    update(
        &client,
        &id,
        json!({"confirm": {"action": "accept", "content": {"confirm": false}}}),
    )
    .await;
    let t = poll_until(&client, &id, is_terminal).await;
    assert_eq!(
        result_text(&t).0,
        "confirm_delete(b.txt): confirmed = false"
    );
}
