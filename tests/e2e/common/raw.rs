//! A raw 2026-07-28 client over HTTP: JSON-RPC requests written out as the
//! spec has them (headers and `_meta` included), and the replies as the
//! server sent them, for tests that check the wire itself.

use std::time::Duration;

use serde_json::{Value, json};

/// The client: one HTTP connection pool and the next request id.
pub struct Raw {
    http: reqwest::Client,
    url: String,
    next: u64,
}

/// A reply: its HTTP status and its JSON body.
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

impl Raw {
    /// A client of the endpoint `url`; every request gives up after 20 s.
    pub fn new(url: &str) -> Self {
        Self {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(20))
                .build()
                .expect("an HTTP client"),
            url: url.to_owned(),
            next: 1,
        }
    }

    /// Sends `method` with `params`, declaring the tasks extension when `tasks`.
    pub async fn send(
        &mut self,
        method: &str,
        mut params: Value,
        tasks: bool,
        name_header: Option<&str>,
    ) -> Reply {
        let id = self.next;
        self.next += 1;
        params["_meta"] = meta(tasks);
        let req = request(
            &self.http,
            &self.url,
            json!(id),
            method,
            &params,
            name_header,
        );
        let (status, body) = json_reply(req).await;
        assert_eq!(body["id"], json!(id), "the response echoes the id: {body}");
        Reply { status, body }
    }
}

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
pub fn request(
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
