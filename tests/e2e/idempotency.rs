//! Idempotent starts on the wire: a `tools/call` carrying
//! `_meta["mcp-tasks/idempotencyKey"]` gets the task an earlier call with
//! that key, tool and caller made, in both protocol eras (a 2026-07-28
//! request over HTTP, a 2025-11-25 task call in a new session) and over
//! stdio; the tool's work runs once; the key with other arguments, or a key
//! that is no string, gets `-32602` naming the problem; and the crate's
//! `TaskClient::start_with_key` sends the key it is given. Every message is
//! checked against the official schemas.

mod common;

use std::{
    collections::HashMap,
    sync::{LazyLock, Mutex},
    time::Duration,
};

use common::{request, schemas, session::Session};
use mcp_tasks_client::TaskClient;
use mcp_tasks_runtime::{
    Engine, ToolError, checkpoint, durable, mcp, store::MemoryStore, task_tool, tool::Registry,
};
use serde_json::{Value, json};

/// How many times `work` ran, by tag.
static RUNS: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Mutex::default);

fn runs(tag: &str) -> usize {
    RUNS.lock().unwrap().get(tag).copied().unwrap_or(0)
}

/// Counts its work once (journaled), then sleeps durably for `ms`.
#[task_tool]
async fn work(
    /// Told apart in the count.
    tag: String,
    /// How long to sleep after the work, in milliseconds.
    ms: u64,
) -> Result<String, ToolError> {
    checkpoint("work", || async {
        *RUNS.lock().unwrap().entry(tag.clone()).or_default() += 1;
        Ok::<_, ToolError>(())
    })
    .await?;
    durable::sleep(Duration::from_millis(ms)).await;
    Ok(format!("{tag} done"))
}

async fn serve() -> String {
    let engine = Engine::builder(MemoryStore::new())
        .registry(Registry::new().with(work_tool()).unwrap())
        .start()
        .await
        .unwrap();
    let server = mcp::TaskServer::builder(engine).build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(mcp::serve(listener, server).into_future());
    url
}

const KEY: &str = "mcp-tasks/idempotencyKey";

/// A 2026-07-28 request (declaring the tasks extension) with `key` in its
/// `_meta`: the JSON-RPC answer.
async fn send(url: &str, method: &str, mut params: Value, key: Option<Value>) -> Value {
    params["_meta"] = request::meta(true);
    if let Some(key) = key {
        params["_meta"][KEY] = key;
    }
    let name = params
        .get("taskId")
        .or_else(|| params.get("name"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let http = reqwest::Client::new();
    let resp = request::post(&http, url, json!(1), method, &params, name.as_deref())
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .expect("the server answers");
    assert_eq!(resp.status(), 200);
    resp.json().await.expect("a JSON answer")
}

fn call(tag: &str, ms: u64) -> Value {
    json!({"name": "work", "arguments": {"tag": tag, "ms": ms}})
}

/// The `taskId` of a `CreateTaskResult` answer.
fn created(reply: &Value) -> String {
    let result = reply
        .get("result")
        .unwrap_or_else(|| panic!("no result: {reply}"));
    schemas().tasks("CreateTaskResult", result);
    result["taskId"].as_str().unwrap().to_owned()
}

/// The `-32602` error of an answer, with its message.
fn invalid_params(reply: &Value) -> String {
    schemas().core("JSONRPCErrorResponse", reply);
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    reply["error"]["message"].as_str().unwrap().to_owned()
}

async fn until_completed(url: &str, id: &str) {
    for _ in 0..400 {
        let reply = send(url, "tasks/get", json!({"taskId": id}), None).await;
        if reply["result"]["status"] == "completed" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("task {id} did not complete");
}

#[tokio::test]
async fn a_2026_07_28_call_repeated_with_its_key_gets_the_same_task() {
    let url = serve().await;
    let key = json!("c0ffee00-1111-4222-8333-944455556666");
    let first = created(&send(&url, "tools/call", call("modern", 100), Some(key.clone())).await);
    let again = created(&send(&url, "tools/call", call("modern", 100), Some(key.clone())).await);
    assert_eq!(first, again);
    until_completed(&url, &first).await;
    let after = created(&send(&url, "tools/call", call("modern", 100), Some(key.clone())).await);
    assert_eq!(after, first, "the key holds while the task is kept");
    assert_eq!(runs("modern"), 1, "the work ran once");

    // Other arguments under the key: refused, naming the task.
    let message = invalid_params(&send(&url, "tools/call", call("modern", 5), Some(key)).await);
    assert!(
        message.contains("idempotency key") && message.contains(&first),
        "{message}"
    );
    // A key that is no string, or too short to be unguessable.
    let message = invalid_params(&send(&url, "tools/call", call("x", 5), Some(json!(7))).await);
    assert!(message.contains("must be a string"), "{message}");
    let message =
        invalid_params(&send(&url, "tools/call", call("x", 5), Some(json!("short"))).await);
    assert!(message.contains("16 to 255"), "{message}");
    // Without a key, each call is a task of its own.
    let a = created(&send(&url, "tools/call", call("plain", 5), None).await);
    let b = created(&send(&url, "tools/call", call("plain", 5), None).await);
    assert_ne!(a, b);
    assert_eq!(runs("x"), 0, "a refused call ran nothing");
}

#[tokio::test]
async fn a_2025_11_25_task_call_repeated_in_a_new_session_gets_the_same_task() {
    let url = serve().await;
    let params = |tag: &str| {
        json!({"name": "work", "arguments": {"tag": tag, "ms": 100}, "task": {},
               "_meta": {KEY: "legacy-0123456789abcdef"}})
    };
    let first = Session::open(&url, None)
        .await
        .request(1, "tools/call", params("older"))
        .await;
    schemas().legacy("CreateTaskResult", &first["result"]);
    // The client reconnected: a new session repeats the call.
    let session = Session::open(&url, None).await;
    let again = session.request(1, "tools/call", params("older")).await;
    let id = first["result"]["task"]["taskId"].as_str().unwrap();
    assert_eq!(again["result"]["task"]["taskId"], id, "{again}");
    let refused = session.request(2, "tools/call", params("other")).await;
    schemas().legacy("JSONRPCErrorResponse", &refused);
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    for _ in 0..400 {
        let got = session.request(3, "tasks/get", json!({"taskId": id})).await;
        if got["result"]["status"] == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(runs("older"), 1, "the work ran once");
}

#[tokio::test]
async fn the_task_client_starts_with_a_key_it_is_given() {
    let url = serve().await;
    let client = TaskClient::http(&url).connect().await.unwrap();
    let args = json!({"tag": "client", "ms": 100});
    let key = "client-key-0123456789abcdef";
    let first = client.start_with_key("work", &args, key).await.unwrap();
    let again = client.start_with_key("work", &args, key).await.unwrap();
    assert!(first.id().is_some());
    assert_eq!(first.id(), again.id());
    let said: String = again.result().await.unwrap();
    assert_eq!(said, "client done");
    assert_eq!(runs("client"), 1);
    // `start` sends no key: two starts are two tasks.
    let args = json!({"tag": "fresh", "ms": 5});
    let (a, b) = (
        client.start("work", &args).await.unwrap(),
        client.start("work", &args).await.unwrap(),
    );
    assert_ne!(a.id(), b.id());
}

#[tokio::test]
async fn over_stdio_a_repeat_with_the_key_gets_the_same_task() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tasks.db").display().to_string();
    let client = TaskClient::stdio(common::bin("conformance"), ["--stdio", "--store", &store])
        .connect()
        .await
        .unwrap();
    let args = json!({"seconds": 0.2, "label": "k"});
    let key = "stdio-key-0123456789abcdef";
    let first = client
        .start_with_key("slow_compute", &args, key)
        .await
        .unwrap();
    let again = client
        .start_with_key("slow_compute", &args, key)
        .await
        .unwrap();
    assert!(first.id().is_some());
    assert_eq!(first.id(), again.id());
    let said: String = again.result().await.unwrap();
    assert_eq!(said, "slow_compute(k) done after 0.2s");
}
