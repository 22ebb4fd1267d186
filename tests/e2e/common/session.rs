//! A raw MCP 2025-11-25 client over HTTP for tests against server
//! processes: `initialize` opens a session, requests carry its
//! `Mcp-Session-Id`, and the answers (JSON or an SSE stream) are read as the
//! server sent them.

use std::time::Duration;

use serde_json::{Value, json};

/// `initialize` params of a client that answers elicitations.
pub fn initialize_params() -> Value {
    json!({
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "raw", "version": "1"},
    })
}

/// One HTTP client for a test, every request bounded by 30 s.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("an HTTP client")
}

/// Sends `initialize` with `params` (and `Authorization: Bearer token`):
/// the raw response, to check a refusal.
pub async fn initialize(
    http: &reqwest::Client,
    url: &str,
    params: &Value,
    token: Option<&str>,
) -> reqwest::Response {
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params});
    let mut req = http
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .json(&body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.expect("the server answers")
}

/// An open 2025-11-25 session.
pub struct Session {
    pub http: reqwest::Client,
    pub url: String,
    pub id: String,
    /// Sent as `Authorization: Bearer` with every request.
    pub token: Option<String>,
}

impl Session {
    /// Opens a session (`initialize`, then `notifications/initialized`).
    pub async fn open(url: &str, token: Option<&str>) -> Self {
        let http = http();
        let resp = initialize(&http, url, &initialize_params(), token).await;
        assert_eq!(resp.status(), 200, "initialize");
        let id = resp.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let session = Self {
            http,
            url: url.to_owned(),
            id,
            token: token.map(str::to_owned),
        };
        let sent = session
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .send()
            .await
            .unwrap();
        assert_eq!(sent.status(), 202, "notifications/initialized");
        session
    }

    /// A POST of `body` in the session.
    pub fn post(&self, body: &Value) -> reqwest::RequestBuilder {
        self.with_headers(self.http.post(&self.url))
            .header("Accept", "application/json, text/event-stream")
            .json(body)
    }

    /// The session's headers on `req`.
    pub fn with_headers(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let req = req
            .header("Mcp-Session-Id", &self.id)
            .header("MCP-Protocol-Version", "2025-11-25");
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    /// Sends request `id` and returns its JSON-RPC answer.
    pub async fn request(&self, id: u64, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let text = self.post(&body).send().await.unwrap().text().await.unwrap();
        answer(&text, id)
    }

    /// Sends request `id` and returns its answer stream, to read message by
    /// message (see [`Sse`]).
    pub async fn stream(&self, id: u64, method: &str, params: Value) -> Sse {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let resp = self.post(&body).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{method}");
        Sse(resp, String::new())
    }

    /// Sends a notification; returns the HTTP status.
    pub async fn notify(&self, method: &str, params: Value) -> u16 {
        let body = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.post(&body).send().await.unwrap().status().as_u16()
    }

    /// Sends the client's `result` for the server's request `id`.
    pub async fn respond(&self, id: &Value, result: Value) -> u16 {
        let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
        self.post(&body).send().await.unwrap().status().as_u16()
    }

    /// Ends the session (`DELETE`); returns the HTTP status.
    pub async fn delete(&self) -> u16 {
        self.with_headers(self.http.delete(&self.url))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }
}

/// A response's SSE stream, read one JSON-RPC message at a time.
pub struct Sse(reqwest::Response, String);

impl Sse {
    /// The stream of `resp`.
    pub fn new(resp: reqwest::Response) -> Self {
        Self(resp, String::new())
    }

    /// The next message; panics (saying `context`) when none comes within
    /// 30 s or the stream ends.
    pub async fn next(&mut self, context: &str) -> Value {
        loop {
            while let Some(end) = self.1.find('\n') {
                let line: String = self.1.drain(..=end).collect();
                if let Some(data) = line.strip_prefix("data:")
                    && let Ok(message) = serde_json::from_str::<Value>(data.trim())
                {
                    return message;
                }
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.0.chunk())
                .await
                .unwrap_or_else(|_| panic!("stuck {context}: {}", self.1))
                .unwrap()
                .unwrap_or_else(|| panic!("the stream ended {context}: {}", self.1));
            self.1.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// The next request from the server with `method`, skipping the rest
    /// (progress and the like).
    pub async fn next_request(&mut self, method: &str, context: &str) -> Value {
        loop {
            let m = self.next(context).await;
            if m["method"] == method && m.get("id").is_some() {
                return m;
            }
        }
    }
}

/// The JSON-RPC answer to request `id` in a response body (SSE or JSON).
pub fn answer(body: &str, id: u64) -> Value {
    let messages: Vec<Value> = if body.trim_start().starts_with('{') {
        vec![serde_json::from_str(body).unwrap()]
    } else {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect()
    };
    messages
        .into_iter()
        .find(|m| m.get("id") == Some(&json!(id)) && m.get("method").is_none())
        .unwrap_or_else(|| panic!("no answer to request {id} in {body}"))
}

/// A process's resident memory in bytes (`VmRSS` in `/proc/PID/status`).
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kb * 1024
}
