//! What a 2025-11-25 client may cost and what its requests must say, end to
//! end against the demo as a process on 127.0.0.1 (HTTP) or on pipes
//! (stdio): a plain call parked on a question holds no more once its
//! session is closed than the same task created the 2026-07-28 way, and an
//! unknown `logLevel` in a request's `_meta` is refused (`-32602`).

mod common;

use std::{
    io::{BufRead as _, BufReader, Write as _},
    process::Stdio,
    time::Duration,
};

use common::{
    process::{ServerProcess, StoreArgs},
    session::{Session, rss_bytes},
};
use serde_json::{Value, json};

/// How many calls each way.
const CALLS: usize = 30;
/// The size of each call's `service` argument.
const ARGUMENT: usize = 900 * 1000;
/// What the plain calls may hold beyond the tasks, in all (about 1 MiB a
/// call: the allocator's own slack, which varies from run to run).
const MARGIN: u64 = 30 << 20;

/// The demo on a fresh store, its `deploy` building in 0.2 s and then
/// parking on its approval question.
fn demo(dir: &tempfile::TempDir) -> ServerProcess {
    ServerProcess::start_with_env(
        common::bin("demo"),
        &StoreArgs::Sqlite(dir.path().join("tasks.db")),
        &[],
        &[("MCP_TASKS_DEMO_PACE", "0.02".as_ref())],
        Duration::from_secs(60),
    )
}

/// `deploy`'s arguments for call `i`: a service name of [`ARGUMENT`] bytes.
fn deploy_args(i: usize) -> Value {
    let mut service = format!("{i:06}");
    service.push_str(&"s".repeat(ARGUMENT - service.len()));
    json!({"service": service, "git_ref": "main"})
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// The 2026-07-28 `_meta` of a client that answers elicitations and knows
/// tasks.
fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "limits", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {
            "elicitation": {},
            "extensions": {"io.modelcontextprotocol/tasks": {}},
        },
    })
}

/// A 2026-07-28 request of `method` with `params` (its `_meta` added).
fn modern(
    http: &reqwest::Client,
    url: &str,
    id: u64,
    method: &str,
    mut params: Value,
) -> reqwest::RequestBuilder {
    let mut meta = modern_meta();
    if let Some(extra) = params.get("_meta").and_then(Value::as_object) {
        for (k, v) in extra {
            meta[k] = v.clone();
        }
    }
    params["_meta"] = meta;
    let mut req = http
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method)
        .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    if let Some(name) = params.get("name").and_then(Value::as_str) {
        req = req.header("Mcp-Name", name);
    }
    req
}

/// How much the demo's resident memory grew while `calls` ran, once they
/// have settled.
async fn growth(demo: &ServerProcess, calls: impl std::future::Future<Output = ()>) -> u64 {
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_bytes(demo.pid());
    calls.await;
    // Long enough for what a closed session leaves to be let go of.
    tokio::time::sleep(Duration::from_secs(3)).await;
    rss_bytes(demo.pid()).saturating_sub(before)
}

/// 30 plain `deploy` calls with 900 KB arguments, each parked on its
/// approval question and its session then closed (`DELETE`), hold no more
/// memory than the same 30 tasks created the 2026-07-28 way, give or take
/// [`MARGIN`]. (Before, each such call held its request, its arguments and
/// its question until its task ended: 5 MB a call against 1 MB.)
#[tokio::test]
async fn parked_plain_calls_of_closed_sessions_hold_no_more_than_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = demo(&dir);
    let http = http();
    let as_tasks = growth(&tasks, async {
        for i in 0..CALLS {
            let params = json!({"name": "deploy", "arguments": deploy_args(i)});
            let reply: Value = modern(&http, &tasks.url, 1, "tools/call", params)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(reply["result"]["resultType"], "task", "{reply}");
        }
        // Every task reaches its question.
        tokio::time::sleep(Duration::from_secs(2)).await;
    })
    .await;

    let dir = tempfile::tempdir().unwrap();
    let plain = demo(&dir);
    let as_plain_calls = growth(&plain, async {
        for i in 0..CALLS {
            let session = Session::open(&plain.url, None).await;
            let params = json!({"name": "deploy", "arguments": deploy_args(i)});
            let mut call = session.stream(1, "tools/call", params).await;
            let question = call
                .next_request("elicitation/create", "waiting for the approval question")
                .await;
            assert!(
                question["params"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(&format!("{i:06}"))),
                "{question}"
            );
            assert_eq!(session.delete().await, 200);
            drop(call);
        }
    })
    .await;
    let list = modern(&http, &plain.url, 9, "tools/list", json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), 200, "still serving");

    eprintln!(
        "{CALLS} calls of {ARGUMENT} bytes: as tasks +{} MiB, as plain calls with closed sessions +{} MiB",
        as_tasks >> 20,
        as_plain_calls >> 20
    );
    assert!(
        as_plain_calls <= as_tasks + MARGIN,
        "{CALLS} parked plain calls of closed sessions hold {} MiB, the same tasks {} MiB (margin {} MiB)",
        as_plain_calls >> 20,
        as_tasks >> 20,
        MARGIN >> 20
    );
}

/// Checks that `reply` answers request `id` with `-32602` naming the
/// `logLevel` field and the accepted levels.
fn assert_log_level_refused(reply: &Value, id: u64) {
    assert_eq!(reply["id"], id, "{reply}");
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("io.modelcontextprotocol/logLevel")
            && message.contains("debug")
            && message.contains("emergency"),
        "{message}"
    );
}

/// An unknown `logLevel` in `_meta` (`"loud"`, `5`) is refused with
/// `-32602` naming the field and the accepted levels: as a 2026-07-28
/// request, in a 2025-11-25 session, and over stdio; a known one is served.
/// (And a stdio line of 200,000 values is refused naming `max_json_values`.)
#[tokio::test]
async fn an_unknown_log_level_is_invalid_params_on_http_and_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let demo = demo(&dir);
    let http = http();
    for (id, level) in [(1, json!("loud")), (2, json!(5))] {
        let params = json!({"_meta": {"io.modelcontextprotocol/logLevel": level}});
        let resp = modern(&http, &demo.url, id, "tools/list", params)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400);
        assert_log_level_refused(&resp.json().await.unwrap(), id);
    }
    let params = json!({"_meta": {"io.modelcontextprotocol/logLevel": "warning"}});
    let served: Value = modern(&http, &demo.url, 3, "tools/list", params)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(served["result"]["tools"].is_array(), "{served}");

    let session = Session::open(&demo.url, None).await;
    let params = json!({"_meta": {"io.modelcontextprotocol/logLevel": "loud"}});
    assert_log_level_refused(&session.request(4, "tools/list", params).await, 4);
    let served = session.request(5, "tools/list", json!({})).await;
    assert!(served["result"]["tools"].is_array(), "{served}");

    let mut child = common::process::stdio_server(
        common::bin("demo"),
        &dir.path().join("stdio.db"),
        Stdio::inherit(),
    );
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut ask = |message: &dyn std::fmt::Display| {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str::<Value>(&line).unwrap()
    };
    let mut meta = modern_meta();
    meta["io.modelcontextprotocol/logLevel"] = json!("loud");
    let reply = ask(&json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list",
        "params": {"_meta": meta}}));
    assert_log_level_refused(&reply, 6);
    meta["io.modelcontextprotocol/logLevel"] = json!(5);
    let reply = ask(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list",
        "params": {"_meta": meta}}));
    assert_log_level_refused(&reply, 7);
    meta["io.modelcontextprotocol/logLevel"] = json!("info");
    let reply = ask(&json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list",
        "params": {"_meta": meta}}));
    assert!(reply["result"]["tools"].is_array(), "{reply}");
    // The JSON limits hold on stdio too.
    let zeros = vec!["0"; 200_000].join(",");
    let line =
        format!(r#"{{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{{"x":[{zeros}]}}}}"#);
    let reply = ask(&line);
    assert_eq!(reply["id"], 9, "{reply}");
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    assert_eq!(
        reply["error"]["data"]["limit"], "max_json_values",
        "{reply}"
    );
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
}

/// In a 2025-11-25 session with no GET stream open, a tool's own log
/// messages go on its POST response stream, before its answer (the
/// transport: a request's notifications go on its own stream). They went
/// to the session's GET stream, and were lost with none open.
#[tokio::test]
async fn a_requests_own_log_messages_go_on_its_post_stream() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(
        common::bin("conformance"),
        &StoreArgs::Sqlite(dir.path().join("tasks.db")),
        &[],
        None,
        Duration::from_secs(60),
    );
    let session = Session::open(&server.url, None).await;
    let set = session
        .request(1, "logging/setLevel", json!({"level": "info"}))
        .await;
    assert!(set.get("result").is_some(), "{set}");
    let mut stream = session
        .stream(
            2,
            "tools/call",
            json!({"name": "test_tool_with_logging", "arguments": {}}),
        )
        .await;
    let mut logs = Vec::new();
    loop {
        let message = stream.next("on the call's own stream").await;
        if message.get("id") == Some(&json!(2)) {
            assert!(message.get("result").is_some(), "{message}");
            break;
        }
        if message["method"] == "notifications/message" {
            logs.push(message["params"]["data"].clone());
        }
    }
    assert_eq!(
        logs,
        [
            json!("Tool execution started"),
            json!("Tool processing data"),
            json!("Tool execution completed")
        ],
        "the tool's log messages, on its own stream before its answer"
    );
}
