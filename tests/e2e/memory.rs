//! Memory per request, end to end: the demo as a process on 127.0.0.1, sent
//! the worst bodies for memory (a 4 MiB body of small values), its peak
//! resident memory (`VmHWM`) read from `/proc` before and after. The bound
//! is the one the guide's Security chapter documents for one request at the
//! defaults.

mod common;

use std::time::Duration;

use common::{
    process::{ServerProcess, StoreArgs},
    session::Session,
};
use serde_json::{Value, json};

/// The default `max_body_bytes`.
const BODY: usize = 4 * 1024 * 1024;

/// What one request may add to the server's peak memory at the defaults:
/// 10 times its body (Security chapter, "Memory per request").
const BOUND: u64 = 10 * BODY as u64;

/// A process's peak resident memory in bytes (`VmHWM`).
fn peak(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmHWM in /proc/PID/status");
    kb * 1024
}

/// A `tools/call` of `deploy` as a JSON text of at most [`BODY`] bytes,
/// whose `notes` argument is an array of as many zeros as fit: about two
/// million values.
fn zeros(id: u64, meta: &Value) -> String {
    let head = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"_meta":{meta},"name":"deploy","arguments":{{"service":"billing","git_ref":"main","notes":["#
    );
    let tail = "]}}}";
    let n = (BODY - head.len() - tail.len()).div_ceil(2);
    let mut body = head;
    body.push_str(&vec!["0"; n].join(","));
    body.push_str(tail);
    assert!(
        body.len() <= BODY && body.len() > BODY - 4,
        "{}",
        body.len()
    );
    body
}

/// The 2026-07-28 `_meta` of a request.
fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "memory", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

/// Checks that `reply` refuses request `id` with `-32600` naming
/// `max_json_values`.
fn assert_refused_for_values(reply: &Value, id: u64) {
    assert_eq!(reply["id"], id, "{reply}");
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("max_json_values") && message.contains("100000"),
        "{message}"
    );
    assert_eq!(reply["error"]["data"]["limit"], "max_json_values");
}

/// A 4 MiB body of two million zeros, as a 2026-07-28 request and in a
/// 2025-11-25 session, is refused before it is parsed: the server's peak
/// memory grows by less than the documented bound for one request (before
/// the JSON limits, by about 460 MB).
#[tokio::test]
async fn a_4_mib_body_of_small_values_stays_within_the_memory_bound() {
    let dir = tempfile::tempdir().unwrap();
    let demo = ServerProcess::start(
        common::bin("demo"),
        &StoreArgs::Sqlite(dir.path().join("tasks.db")),
        &[],
        None,
        Duration::from_secs(60),
    );
    let http = http();
    // Warmed up with a session and a small call, so that what is measured
    // is the large body alone.
    let session = Session::open(&demo.url, None).await;
    let list = session.request(1, "tools/list", json!({})).await;
    assert!(list["result"]["tools"].is_array(), "{list}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = peak(demo.pid());

    let modern = http
        .post(&demo.url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", "deploy")
        .body(zeros(2, &modern_meta()))
        .send()
        .await
        .unwrap();
    let modern = (modern.status(), modern.text().await.unwrap());
    let legacy = session
        .with_headers(http.post(&demo.url))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(zeros(3, &json!({"progressToken": 1})))
        .send()
        .await
        .unwrap();
    let legacy = (legacy.status(), legacy.text().await.unwrap());

    tokio::time::sleep(Duration::from_millis(300)).await;
    let grown = peak(demo.pid()).saturating_sub(before);
    assert!(
        grown < BOUND,
        "two 4 MiB bodies of small values raised the peak by {} MiB, over the bound of {} MiB",
        grown >> 20,
        BOUND >> 20
    );
    for ((status, text), id) in [(modern, 2), (legacy, 3)] {
        assert_eq!(status, 400, "{text}");
        assert_refused_for_values(&serde_json::from_str(&text).unwrap(), id);
    }
    // Still serving.
    let list = session.request(4, "tools/list", json!({})).await;
    assert!(list["result"]["tools"].is_array(), "{list}");
}
