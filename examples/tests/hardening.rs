//! Hardening, over HTTP against real server processes on 127.0.0.1: the
//! `requestState` of an MRTR round is opaque and single-use (also across
//! instances sharing a store), weak keys stop the server, and each limit
//! trips with an error that names it, leaving the store intact.

mod common;

use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use base64::Engine as _;
use common::{
    Server,
    process::{ServerProcess, StoreArgs},
};
use serde_json::{Value, json};

const KEY1: &str = "1f1e1d1c1b1a191817161514131211100f0e0d0c0b0a09080706050403020100";
const KEY2: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// A JSON-RPC request over HTTP, 2026-07-28 `_meta` included; `tasks`
/// declares the tasks extension. Answers `(HTTP status, body)`.
async fn rpc(url: &str, method: &str, mut params: Value, tasks: bool) -> (u16, Value) {
    let mut caps = json!({"elicitation": {}});
    if tasks {
        caps["extensions"] = json!({"io.modelcontextprotocol/tasks": {}});
    }
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    });
    let mut req = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method);
    if let Some(name) = params
        .get("taskId")
        .or_else(|| params.get("name"))
        .and_then(Value::as_str)
    {
        req = req.header("Mcp-Name", name);
    }
    let resp = req
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .expect("the server answers");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, body)
}

fn fixture(store: &Path, effects: &Path, args: &[&str]) -> ServerProcess {
    ServerProcess::start(
        env!("CARGO_BIN_EXE_fleet-fixture"),
        &StoreArgs::Sqlite(store.to_owned()),
        args,
        Some(effects),
        Duration::from_secs(30),
    )
}

/// The `begin` lines of `tag` in the effects file: one per step run.
fn effects_of(effects: &Path, tag: &str) -> usize {
    std::fs::read_to_string(effects)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with(&format!("begin {tag} ")))
        .count()
}

fn approved_retry(tag: &str, steps: u32, state: &str) -> Value {
    json!({
        "name": "approve_then_steps",
        "arguments": {"tag": tag, "steps": steps, "step_ms": 50},
        "inputResponses": {"approval": {"action": "accept", "content": {"approve": true}}},
        "requestState": state,
    })
}

/// The first round of an inline `approve_then_steps`: its `requestState`.
async fn first_round(url: &str, tag: &str, steps: u32) -> String {
    let (_, body) = rpc(
        url,
        "tools/call",
        json!({"name": "approve_then_steps", "arguments": {"tag": tag, "steps": steps, "step_ms": 50}}),
        false,
    )
    .await;
    assert_eq!(body["result"]["resultType"], "input_required", "{body}");
    body["result"]["requestState"]
        .as_str()
        .expect("a requestState")
        .to_owned()
}

#[tokio::test]
async fn request_state_shows_no_journal_value() {
    let (_dir, server) = Server::fresh();
    let secret = "S3CRET-ANSWER-4711";
    let name = "test_input_required_result_multi_round";
    let (_, first) = rpc(&server.url, "tools/call", json!({"name": name}), false).await;
    let state1 = first["result"]["requestState"].as_str().unwrap().to_owned();
    let (_, second) = rpc(
        &server.url,
        "tools/call",
        json!({
            "name": name,
            "inputResponses": {"step1": {"action": "accept", "content": {"name": secret}}},
            "requestState": state1,
        }),
        false,
    )
    .await;
    assert_eq!(second["result"]["resultType"], "input_required", "{second}");
    let state2 = second["result"]["requestState"].as_str().unwrap();
    // The journal holds the answer: it must not be readable in the state,
    // however the client decodes it.
    assert!(!state2.contains(secret));
    let body = state2.strip_prefix("v1.").expect("a versioned state");
    let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(body)
        .expect("base64url");
    for needle in [secret.as_bytes(), b"journal", b"step1"] {
        assert!(
            !decoded.windows(needle.len()).any(|w| w == needle),
            "{} readable in the decoded requestState",
            String::from_utf8_lossy(needle)
        );
    }
    // And it still works: the third round finishes with the secret in it.
    let (_, done) = rpc(
        &server.url,
        "tools/call",
        json!({
            "name": name,
            "inputResponses": {"step2": {"action": "accept", "content": {"color": "green"}}},
            "requestState": state2,
        }),
        false,
    )
    .await;
    assert_eq!(
        done["result"]["content"][0]["text"],
        format!("{secret} likes green"),
        "{done}"
    );
}

#[tokio::test]
async fn a_replayed_request_state_runs_no_step_twice_across_instances() {
    let dir = tempfile::tempdir().unwrap();
    let (store, effects) = (dir.path().join("tasks.db"), dir.path().join("effects.log"));
    let a = fixture(
        &store,
        &effects,
        &["--instance", "a", "--request-state-key", KEY1],
    );
    // B has rotated: a new key, and A's as an old one.
    let b = fixture(
        &store,
        &effects,
        &[
            "--instance",
            "b",
            "--request-state-key",
            KEY2,
            "--old-request-state-key",
            KEY1,
        ],
    );
    let state = first_round(&a.url, "replay", 3).await;
    // The same approved state, twice at once to A and twice to B.
    let sends = [&a.url, &a.url, &b.url, &b.url].map(|url| {
        let (url, retry) = (url.clone(), approved_retry("replay", 3, &state));
        tokio::spawn(async move { rpc(&url, "tools/call", retry, false).await })
    });
    let mut finished = 0;
    for send in sends {
        let (status, body) = send.await.unwrap();
        if body["result"]["resultType"] == "complete" {
            finished += 1;
            assert_eq!(
                body["result"]["structuredContent"]["nonces"]
                    .as_array()
                    .map(Vec::len),
                Some(3),
                "{body}"
            );
        } else {
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["error"]["code"], -32602, "{body}");
            let message = body["error"]["message"].as_str().unwrap();
            assert!(message.contains("requestState already used"), "{message}");
        }
    }
    assert_eq!(finished, 1, "exactly one of four copies ran");
    assert_eq!(effects_of(&effects, "replay"), 3, "each step ran once");
    // Later copies are refused too, by either instance.
    let (_, late) = rpc(
        &a.url,
        "tools/call",
        approved_retry("replay", 3, &state),
        false,
    )
    .await;
    assert_eq!(late["error"]["code"], -32602, "{late}");
    assert_eq!(effects_of(&effects, "replay"), 3);
    // Rotation: a state A sealed with its key opens on B, which holds it as
    // an old key; one B sealed does not open on A, which has not rotated.
    let from_a = first_round(&a.url, "rotated", 1).await;
    let (_, done) = rpc(
        &b.url,
        "tools/call",
        approved_retry("rotated", 1, &from_a),
        false,
    )
    .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    let from_b = first_round(&b.url, "unrotated", 1).await;
    let (_, refused) = rpc(
        &a.url,
        "tools/call",
        approved_retry("unrotated", 1, &from_b),
        false,
    )
    .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("invalid requestState"),
        "{refused}"
    );
    assert_eq!(effects_of(&effects, "unrotated"), 0);
}

/// Runs the fixture with `args`; it must exit, failing, within 30 s.
/// Returns what it wrote to stderr.
fn refused_start(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_fleet-fixture"))
        .args(["--addr", "127.0.0.1:0", "--store"])
        .arg(dir.path().join("tasks.db"))
        .args(args)
        .env("RUST_LOG", "error")
        .env_remove("MCP_TASKS_STATE_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?}: the server started instead of refusing the key");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success(), "{args:?}");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    stderr
}

#[test]
fn a_request_state_key_that_is_not_32_random_bytes_stops_the_server() {
    for args in [
        &["--request-state-key", "correct horse battery staple"][..],
        &["--request-state-key", "00112233445566778899aabbccddeeff"],
        &[
            "--request-state-key",
            KEY1,
            "--old-request-state-key",
            "hunter2",
        ],
    ] {
        let stderr = refused_start(args);
        assert!(stderr.contains("32 random bytes"), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("hunter2") && !stderr.contains("horse"),
            "{stderr}"
        );
    }
}
