//! Server settings, in-process over HTTP on 127.0.0.1: strict routing headers,
//! and tasks bound to the principal that created them.

use mcp_tasks_runtime::{
    Engine, durable,
    mcp::{self, HttpOptions, TaskServer},
    store::MemoryStore,
    task_tool,
    tool::Registry,
};
use serde_json::{Value, json};

/// Waits a little, durably.
#[task_tool]
async fn nap() -> String {
    durable::sleep(std::time::Duration::from_millis(50)).await;
    "rested".into()
}

async fn serve(options: HttpOptions, with_principal: bool) -> String {
    let engine = Engine::builder(MemoryStore::new())
        .registry(Registry::new().with(nap_tool()).unwrap())
        .start()
        .await
        .unwrap();
    let mut builder = TaskServer::builder(engine);
    if with_principal {
        builder = builder.principal(|parts: &axum::http::request::Parts| {
            parts
                .headers
                .get("x-user")?
                .to_str()
                .ok()
                .map(str::to_owned)
        });
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(mcp::serve(listener, builder.http(options).build()).into_future());
    url
}

async fn post(
    url: &str,
    method: &str,
    params: Value,
    name: Option<&str>,
    user: Option<&str>,
) -> (u16, Value) {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    let mut req = reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
    if let Some(n) = name {
        req = req.header("Mcp-Name", n);
    }
    if let Some(u) = user {
        req = req.header("x-user", u);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

#[tokio::test]
async fn strict_headers_refuse_a_missing_mcp_name_on_tasks() {
    let url = serve(HttpOptions::default().strict_headers(true), false).await;
    let (_, created) = post(
        &url,
        "tools/call",
        json!({"name": "nap", "arguments": {}}),
        Some("nap"),
        None,
    )
    .await;
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    let (status, body) = post(&url, "tasks/get", json!({"taskId": id}), None, None).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], -32020);
    let (status, body) = post(&url, "tasks/get", json!({"taskId": id}), Some(&id), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["taskId"], json!(id));
}

#[tokio::test]
async fn a_task_is_invisible_to_other_principals() {
    let url = serve(HttpOptions::default(), true).await;
    let (_, created) = post(
        &url,
        "tools/call",
        json!({"name": "nap", "arguments": {}}),
        Some("nap"),
        Some("alice"),
    )
    .await;
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();

    let (_, mine) = post(
        &url,
        "tasks/get",
        json!({"taskId": id}),
        Some(&id),
        Some("alice"),
    )
    .await;
    assert_eq!(mine["result"]["taskId"], json!(id));
    for (method, params) in [
        ("tasks/get", json!({"taskId": id})),
        ("tasks/cancel", json!({"taskId": id})),
        ("tasks/update", json!({"taskId": id, "inputResponses": {}})),
    ] {
        let (_, theirs) = post(&url, method, params, Some(&id), Some("bob")).await;
        assert_eq!(theirs["error"]["code"], -32602, "{method}: {theirs}");
        let (_, anonymous) = post(
            &url,
            method,
            json!({"taskId": id, "inputResponses": {}}),
            Some(&id),
            None,
        )
        .await;
        assert_eq!(anonymous["error"]["code"], -32602, "{method}: {anonymous}");
    }
    // Bob's cancel did not touch it.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let (_, mine) = post(
        &url,
        "tasks/get",
        json!({"taskId": id}),
        Some(&id),
        Some("alice"),
    )
    .await;
    assert_eq!(mine["result"]["status"], "completed");

    // A task created without a principal is no principal's either.
    let (_, created) = post(
        &url,
        "tools/call",
        json!({"name": "nap", "arguments": {}}),
        Some("nap"),
        None,
    )
    .await;
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    let (_, theirs) = post(
        &url,
        "tasks/get",
        json!({"taskId": id}),
        Some(&id),
        Some("alice"),
    )
    .await;
    assert_eq!(theirs["error"]["code"], -32602, "{theirs}");
    let (_, own) = post(&url, "tasks/get", json!({"taskId": id}), Some(&id), None).await;
    assert_eq!(own["result"]["taskId"], json!(id), "{own}");
}

/// An error inside the server reaches the client as a generic message with
/// a reference; the store's own text (the file, the database's words)
/// stays in the log.
#[tokio::test]
async fn internal_errors_name_no_file_and_no_database_text() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    let store = mcp_tasks_runtime::store::SqliteStore::open(&path)
        .await
        .unwrap();
    let engine = Engine::builder(store)
        .registry(Registry::new().with(nap_tool()).unwrap())
        .start()
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(mcp::serve(listener, TaskServer::new(engine)).into_future());
    let (_, created) = post(
        &url,
        "tools/call",
        json!({"name": "nap", "arguments": {}}),
        Some("nap"),
        None,
    )
    .await;
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    // The row is damaged behind the server's back.
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute("UPDATE tasks SET pending = 'not json' WHERE id = ?1", [&id])
        .unwrap();
    drop(c);

    let (_, got) = post(&url, "tasks/get", json!({"taskId": id}), Some(&id), None).await;
    let error = &got["error"];
    assert_eq!(error["code"], -32603, "{got:#}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with("internal error (reference "),
        "{message}"
    );
    for leak in [
        "SQLite",
        "tasks.db",
        "pending",
        "expected",
        &path.display().to_string(),
    ] {
        assert!(!message.contains(leak), "{leak:?} in {message:?}");
    }
}
