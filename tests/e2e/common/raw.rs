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
        let mut caps = json!({"elicitation": {}});
        if tasks {
            caps["extensions"] = json!({"io.modelcontextprotocol/tasks": {}});
        }
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": caps,
        });
        let id = self.next;
        self.next += 1;
        let mut req = self
            .http
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", method);
        if let Some(n) = name_header {
            req = req.header("Mcp-Name", n);
        }
        let resp = req
            .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .send()
            .await
            .expect("the server answers");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let body: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
        assert_eq!(body["id"], json!(id), "the response echoes the id: {body}");
        Reply { status, body }
    }
}
