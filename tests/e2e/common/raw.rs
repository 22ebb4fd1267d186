//! A raw 2026-07-28 client over HTTP: JSON-RPC requests written out as the
//! spec has them (headers and `_meta` included), and the replies as the
//! server sent them, for tests that check the wire itself.

use std::time::Duration;

use serde_json::{Value, json};

use super::request::{json_reply, meta, post};

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
        let req = post(
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
