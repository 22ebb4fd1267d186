//! End to end over stdio: rmcp's client drives the conformance server as a
//! child process, newline-delimited JSON-RPC on its stdin and stdout.

mod common;

use common::*;
use rmcp::{
    ClientLifecycleMode, ClientServiceExt,
    model::{CallToolResponse, ClientConfig, Implementation, ProtocolVersion, TaskStatus},
    transport::TokioChildProcess,
};
use serde_json::json;

#[tokio::test]
async fn full_task_flow_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(common::bin("conformance"));
    cmd.arg("--stdio")
        .arg("--store")
        .arg(dir.path().join("tasks.db"))
        .env("RUST_LOG", "error");
    let transport = TokioChildProcess::new(cmd).expect("the server starts");
    let client = ClientConfig::new(
        capabilities(true),
        Implementation::new("e2e-stdio", "1.0.0"),
    )
    .serve_with_lifecycle(
        transport,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .expect("the client connects");

    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "confirm_delete"));

    let CallToolResponse::Task(created) = client
        .call_tool_once(call("confirm_delete", json!({"filename": "c.txt"})))
        .await
        .unwrap()
    else {
        panic!("expected a task")
    };
    let id = created.task.task_id;
    poll_until(&client, &id, |t| t.status() == TaskStatus::InputRequired).await;
    update(
        &client,
        &id,
        json!({"confirm": {"action": "accept", "content": {"confirm": true}}}),
    )
    .await;
    let t = poll_until(&client, &id, is_terminal).await;
    assert_eq!(result_text(&t).0, "confirm_delete(c.txt): confirmed = true");
    client.cancel().await.unwrap();
}
