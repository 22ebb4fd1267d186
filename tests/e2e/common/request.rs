//! Requests written by hand as a 2026-07-28 client sends them, and the
//! replies read as the server sent them.

use std::time::Duration;

use serde_json::{Value, json};

/// The `_meta` of a 2026-07-28 request from a client that answers
/// elicitations and, when `tasks`, declares the tasks extension.
pub fn meta(tasks: bool) -> Value {
    let mut caps = json!({"elicitation": {}});
    if tasks {
        caps["extensions"] = json!({"io.modelcontextprotocol/tasks": {}});
    }
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

/// JSON-RPC request `id` of `method` with `params`, as a 2026-07-28 client
/// posts it to `url`: with the headers that name the method and, as
/// `Mcp-Name`, what it is about (`name`).
pub fn post(
    http: &reqwest::Client,
    url: &str,
    id: Value,
    method: &str,
    params: &Value,
    name: Option<&str>,
) -> reqwest::RequestBuilder {
    let req = http
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method)
        .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    match name {
        Some(name) => req.header("Mcp-Name", name),
        None => req,
    }
}

/// What a request is about, as its `Mcp-Name` says: the `taskId` or the
/// `name` in its `params`.
pub fn name_of(params: &Value) -> Option<&str> {
    params
        .get("taskId")
        .or_else(|| params.get("name"))
        .and_then(Value::as_str)
}

/// Sends `req`: the reply's HTTP status and its JSON body.
pub async fn json_reply(req: reqwest::RequestBuilder) -> (u16, Value) {
    let resp = req.send().await.expect("the server answers");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, body)
}

/// Reads `stream` until the server closes it (at most `within`): what it
/// sent.
pub async fn until_closed(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    within: Duration,
) -> String {
    use tokio::io::AsyncReadExt as _;
    let mut got = Vec::new();
    let read = tokio::time::timeout(within, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "the server kept the connection open past {within:?}"
    );
    String::from_utf8_lossy(&got).into_owned()
}

/// What an answer is on the wire: its status, its `Content-Type` and its
/// body, byte for byte.
pub type Wire = (u16, String, Vec<u8>);

/// Sends the request `req` makes twice: as clients send it, and with a
/// second `Accept` (`application/json;q=1, text/event-stream`, as
/// acceptable to the server), a form the front door leaves to rmcp rather
/// than answer a `tasks/get` itself. Both answers, as sent.
pub async fn both_ways(req: impl Fn() -> reqwest::RequestBuilder) -> [Wire; 2] {
    let variant = || req().header("Accept", "application/json;q=1, text/event-stream");
    let mut answers = Vec::new();
    for req in [req(), variant()] {
        let resp = req.send().await.expect("the server answers");
        let status = resp.status().as_u16();
        let kind = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned());
        let body = resp.bytes().await.expect("a body").to_vec();
        answers.push((status, kind.unwrap_or_default(), body));
    }
    answers.try_into().expect("two answers")
}
