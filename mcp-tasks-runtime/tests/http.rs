//! The runtime's own Streamable HTTP front door, served by `mcp::serve` on a
//! real socket and spoken to as raw HTTP/1.1: a 2026-07-28 client's calls
//! (a task, and an inline result), and the envelope checks made before rmcp
//! reads a body. Builds and passes without the `mcp-2025-11-25` feature.

use std::{net::SocketAddr, time::Duration};

use mcp_tasks_runtime::{
    Engine,
    mcp::{self, HttpOptions, TaskServer},
    store::MemoryStore,
    task_tool,
    tool::Registry,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Greets `name`.
#[task_tool]
async fn greet(name: String) -> String {
    format!("hello {name}")
}

/// A server of `greet`, its transport set by `options`.
async fn serve_with(options: HttpOptions) -> SocketAddr {
    let engine = Engine::builder(MemoryStore::new())
        .registry(Registry::new().with(greet_tool()).unwrap())
        .start()
        .await
        .unwrap();
    let server = TaskServer::builder(engine).http(options).build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(mcp::serve(listener, server).into_future());
    addr
}

async fn serve() -> SocketAddr {
    serve_with(HttpOptions::default()).await
}

/// POSTs `body` to `/mcp` with `headers` (and JSON's); the status and the
/// body read as JSON.
async fn post(addr: SocketAddr, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nconnection: close\r\n\
         content-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(body.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), tcp.read_to_end(&mut answer))
        .await
        .expect("answered within 20 s")
        .unwrap();
    let answer = String::from_utf8(answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let body = serde_json::from_str(body.trim()).unwrap_or(Value::Null);
    (status, body)
}

/// A 2026-07-28 request of `method` with `params`, declaring the tasks
/// extension when `tasks`; its answer.
async fn request(addr: SocketAddr, method: &str, mut params: Value, tasks: bool) -> Value {
    let mut caps = json!({});
    if tasks {
        caps["extensions"] = json!({"io.modelcontextprotocol/tasks": {}});
    }
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut headers = vec![
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
    ];
    if let Some(name) = params["name"].as_str() {
        headers.push(("mcp-name", name));
    }
    let (status, answer) = post(addr, &headers, &body.to_string()).await;
    assert_eq!(status, 200, "{method}: {answer}");
    answer
}

/// The JSON-RPC error code of the answer to `body` sent with `headers`.
async fn refused(addr: SocketAddr, headers: &[(&str, &str)], body: &str) -> i64 {
    let (status, answer) = post(addr, headers, body).await;
    assert!(status >= 400, "refused: {status} {answer}");
    answer["error"]["code"].as_i64().unwrap()
}

#[tokio::test]
async fn a_2026_07_28_client_gets_a_task_or_an_inline_result() {
    let addr = serve().await;
    let discovered = request(addr, "server/discover", json!({}), false).await;
    let versions = &discovered["result"]["supportedVersions"];
    assert!(
        versions.as_array().unwrap().contains(&json!("2026-07-28")),
        "{discovered}"
    );
    let call = json!({"name": "greet", "arguments": {"name": "ada"}});

    let inline = request(addr, "tools/call", call.clone(), false).await;
    assert_eq!(inline["result"]["resultType"], "complete", "{inline}");
    assert_eq!(inline["result"]["content"][0]["text"], "hello ada");

    let created = request(addr, "tools/call", call, true).await;
    let id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let got = request(addr, "tasks/get", json!({"taskId": id}), true).await;
        if got["result"]["status"] == "completed" {
            assert_eq!(got["result"]["result"]["content"][0]["text"], "hello ada");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "still {got}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let unknown = request(addr, "tools/call", json!({"name": "nope"}), true).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
}

#[tokio::test]
async fn bodies_that_are_no_message_are_refused() {
    let addr = serve().await;
    assert_eq!(refused(addr, &[], "{").await, -32700);
    assert_eq!(refused(addr, &[], "[]").await, -32600);
    assert_eq!(refused(addr, &[], "7").await, -32600);
    let null_id = r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#;
    assert_eq!(refused(addr, &[], null_id).await, -32600);
    let float_id = r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#;
    assert_eq!(refused(addr, &[], float_id).await, -32600);
}

#[tokio::test]
async fn a_request_without_a_served_version_is_refused() {
    let addr = serve().await;
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    assert_eq!(refused(addr, &[], ping).await, -32602);
    let unknown = [("mcp-protocol-version", "2099-01-01")];
    assert_eq!(refused(addr, &unknown, ping).await, -32022);
}

#[tokio::test]
async fn params_that_are_no_object_are_refused() {
    let addr = serve().await;
    for params in ["[1]", "\"x\"", "5", "true"] {
        let request =
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{params}}}"#);
        assert_eq!(refused(addr, &[], &request).await, -32602, "{params}");
        let note =
            format!(r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{params}}}"#);
        assert_eq!(refused(addr, &[], &note).await, -32602, "{params}");
    }
}

#[tokio::test]
async fn a_2026_07_28_initialize_is_not_found() {
    let addr = serve().await;
    let handshake = r#"{"protocolVersion":"2026-07-28","capabilities":{},"clientInfo":{"name":"c","version":"1"}"#;
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#;
    let with_meta = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{handshake},{meta}}}}}"#
    );
    let (status, answer) = post(addr, &[], &with_meta).await;
    assert_eq!(
        (status, answer["error"]["code"].as_i64()),
        (404, Some(-32601))
    );
    let plain =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{handshake}}}}}"#);
    let header = [("mcp-protocol-version", "2026-07-28")];
    assert_eq!(refused(addr, &header, &plain).await, -32601);
}

#[tokio::test]
async fn an_unknown_log_level_is_invalid_params() {
    let addr = serve().await;
    let with = |level: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}},"io.modelcontextprotocol/logLevel":{level}}}}}}}"#
        )
    };
    for bad in [r#""loud""#, "5", "null", r#""INFO""#] {
        let (status, answer) = post(addr, &[], &with(bad)).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert_eq!(answer["error"]["code"], -32602, "{bad}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("logLevel") && message.contains("emergency"),
            "{message}"
        );
    }
    let version = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/list"),
    ];
    let (status, answer) = post(addr, &version, &with(r#""warning""#)).await;
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test]
async fn messages_over_the_json_limits_are_refused_before_parsing() {
    let limits = HttpOptions::default().max_json_values(20).max_json_depth(4);
    let addr = serve_with(limits).await;
    let wide = format!(
        r#"{{"jsonrpc":"2.0","id":"w","method":"ping","params":{{"x":[{}]}}}}"#,
        vec!["0"; 30].join(",")
    );
    let (_, answer) = post(addr, &[], &wide).await;
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_json_values")
    );
    assert_eq!(answer["id"], "w");
    let deep = r#"{"jsonrpc":"2.0","id":7,"method":"ping","params":{"x":[[[[0]]]]}}"#;
    let (_, answer) = post(addr, &[], deep).await;
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_json_depth")
    );
    assert_eq!(answer["id"], 7);
    // At the limits: 4 levels, 20 values; then served (a 2026-07-28
    // `ping` is a removed method).
    let fits = r#"{"jsonrpc":"2.0","id":7,"method":"ping","params":{"x":[[0]],"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let version = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "ping"),
    ];
    let (_, answer) = post(addr, &version, fits).await;
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
}
