use std::time::Duration;

use mcp_tasks_runtime::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Serialize, JsonSchema)]
struct Report {
    total: u32,
}

#[derive(Deserialize, JsonSchema, Elicit)]
struct Approval {
    approve: bool,
}

/// Adds things.
#[task_tool(ttl = "10m", poll_interval = "2s", read_only)]
async fn add(
    /// The first.
    a: u32,
    b: Option<u32>,
) -> Result<Report, ToolError> {
    let x = checkpoint("double", || async { Ok::<_, ToolError>(a * 2) }).await?;
    status("halfway");
    let ok: Approval = ask_user("go?").await?;
    if !ok.approve {
        return Err(ToolError::new("declined"));
    }
    Ok(Report {
        total: x + b.unwrap_or(0),
    })
}

#[tokio::test]
async fn flow() {
    let engine = Engine::builder(MemoryStore::new()).start().await.unwrap();
    let tool = engine.registry().get("add").unwrap();
    println!(
        "{}",
        serde_json::to_string_pretty(tool.definition()).unwrap()
    );
    let caps = serde_json::json!({"elicitation": {}});
    let t = engine
        .create(NewTask {
            tool: "add".into(),
            arguments: serde_json::from_str(r#"{"a": 2, "b": 1}"#).unwrap(),
            client_capabilities: caps,
            principal: None,
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = engine.get(&t.id, None).await.unwrap();
    println!("{r:?}");
    assert_eq!(r.status, TaskStatus::InputRequired);
    let key = r.pending[0].key.clone();
    engine
        .update(
            &t.id,
            serde_json::from_value(
                serde_json::json!({key: {"action":"accept","content":{"approve":true}}}),
            )
            .unwrap(),
            None,
        )
        .await
        .unwrap();
    let r = engine
        .wait(&t.id, None, Duration::from_secs(5))
        .await
        .unwrap();
    println!("{r:?}");
    assert_eq!(r.status, TaskStatus::Completed);
}
