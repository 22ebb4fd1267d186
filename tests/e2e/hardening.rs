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
    request,
};
use serde_json::{Value, json};

const KEY1: &str = "1f1e1d1c1b1a191817161514131211100f0e0d0c0b0a09080706050403020100";
const KEY2: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// A JSON-RPC request over HTTP, 2026-07-28 `_meta` included; `tasks`
/// declares the tasks extension. Answers `(HTTP status, body)`.
async fn rpc(url: &str, method: &str, params: Value, tasks: bool) -> (u16, Value) {
    rpc_from(None, url, method, params, tasks).await
}

/// [`rpc`] from the local address `from` (any of 127.0.0.0/8 reaches a
/// server on 127.0.0.1: Linux routes them all to the loopback device).
async fn rpc_from(
    from: Option<std::net::IpAddr>,
    url: &str,
    method: &str,
    mut params: Value,
    tasks: bool,
) -> (u16, Value) {
    params["_meta"] = request::meta(tasks);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .local_address(from)
        .build()
        .unwrap();
    let name = request::name_of(&params);
    request::json_reply(request::post(&http, url, json!(1), method, &params, name)).await
}

fn fixture(store: &Path, effects: &Path, args: &[&str]) -> ServerProcess {
    ServerProcess::start(
        common::bin("fleet-fixture"),
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
    let mut child = Command::new(common::bin("fleet-fixture"))
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

// ---------------------------------------------------------------------------
// Limits.

/// Polls `tasks/get` until the task is terminal (at most 30 s).
async fn until_terminal(url: &str, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = rpc(url, "tasks/get", json!({"taskId": id}), true).await;
        let status = body["result"]["status"].as_str().unwrap_or_default();
        if ["completed", "failed", "cancelled"].contains(&status) {
            return body["result"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "task {id} still {status}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `tasks/get` until the task is parked on its question (at most 30 s).
async fn until_parked(url: &str, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = rpc(url, "tasks/get", json!({"taskId": id}), true).await;
        if body["result"]["status"] == "input_required" {
            return;
        }
        assert!(Instant::now() < deadline, "task {id} never parked: {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Calls `name` declaring the tasks extension; the created task's id.
async fn create(url: &str, name: &str, arguments: Value) -> Result<String, Value> {
    create_from(None, url, name, arguments).await
}

/// [`create`] from the local address `from`.
async fn create_from(
    from: Option<std::net::IpAddr>,
    url: &str,
    name: &str,
    arguments: Value,
) -> Result<String, Value> {
    let (_, body) = rpc_from(
        from,
        url,
        "tools/call",
        json!({"name": name, "arguments": arguments}),
        true,
    )
    .await;
    match body["result"]["taskId"].as_str() {
        Some(id) => Ok(id.to_owned()),
        None => Err(body["error"].clone()),
    }
}

fn parked_question() -> Value {
    json!({"deadline_ms": 600_000, "follow_up": false, "rounds": 0})
}

fn assert_limit(error: &Value, code: i64, limit: &str) {
    assert_eq!(error["code"], code, "{error}");
    assert_eq!(error["data"]["limit"], limit, "{error}");
    assert!(
        error["message"].as_str().unwrap().contains(limit),
        "the message names the limit: {error}"
    );
}

#[tokio::test]
async fn unknown_arguments_and_oversized_calls_answers_and_results_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (store, effects) = (dir.path().join("tasks.db"), dir.path().join("effects.log"));
    let server = fixture(
        &store,
        &effects,
        &[
            "--instance",
            "a",
            "--limit",
            "max_argument_bytes=4000",
            "--limit",
            "max_answer_bytes=500",
            "--limit",
            "max_result_bytes=1500",
        ],
    );
    let url = &server.url;
    // A task that is already stored, to check nothing is lost.
    let parked = create(url, "ask_with_deadline", parked_question())
        .await
        .unwrap();

    // An unknown key: a tool error naming it (C-TOOLS); no task, no effect.
    let junk = json!({"tag": "junk", "steps": 1, "step_ms": 1, "junk": "x".repeat(100)});
    let (_, body) = rpc(
        url,
        "tools/call",
        json!({"name": "steps", "arguments": junk}),
        true,
    )
    .await;
    assert_eq!(body["result"]["isError"], true, "{body}");
    assert!(body["result"].get("taskId").is_none(), "{body}");
    let message = body["result"]["content"][0]["text"].as_str().unwrap();
    assert!(message.contains("unknown argument `junk`"), "{message}");
    // Too large: -32602 naming the limit.
    let big = json!({"tag": "x".repeat(5000), "steps": 1, "step_ms": 1});
    let error = create(url, "steps", big).await.unwrap_err();
    assert_limit(&error, -32602, "max_argument_bytes");
    assert_eq!(effects_of(&effects, "junk"), 0);

    // An answer over the limit: refused, and the task keeps waiting.
    until_parked(url, &parked).await;
    let (_, body) = rpc(
        url,
        "tasks/update",
        json!({"taskId": parked, "inputResponses": {"approval": {
            "action": "accept", "content": {"approve": true, "padding": "p".repeat(600)}}}}),
        true,
    )
    .await;
    assert_limit(&body["error"], -32602, "max_answer_bytes");
    let (_, got) = rpc(url, "tasks/get", json!({"taskId": parked}), true).await;
    assert_eq!(got["result"]["status"], "input_required", "{got}");
    // A valid answer still lands.
    let (_, body) = rpc(
        url,
        "tasks/update",
        json!({"taskId": parked, "inputResponses": {"approval": {
            "action": "accept", "content": {"approve": true}}}}),
        true,
    )
    .await;
    assert!(body.get("result").is_some(), "{body}");
    let done = until_terminal(url, &parked).await;
    assert_eq!(done["status"], "completed", "{done}");

    // A result over the limit fails the task, naming the limit.
    let id = create(
        url,
        "steps",
        json!({"tag": "r".repeat(1600), "steps": 1, "step_ms": 1}),
    )
    .await
    .unwrap();
    let failed = until_terminal(url, &id).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_limit(&failed["error"], -32603, "max_result_bytes");
}

#[tokio::test]
async fn a_journal_entry_over_the_limit_fails_its_task() {
    let dir = tempfile::tempdir().unwrap();
    let (store, effects) = (dir.path().join("tasks.db"), dir.path().join("effects.log"));
    // The checkpoint's value is a nonce starting with the instance's name.
    let name = "n".repeat(100);
    let server = fixture(
        &store,
        &effects,
        &["--instance", &name, "--limit", "max_journal_entry_bytes=64"],
    );
    let id = create(
        &server.url,
        "steps",
        json!({"tag": "j", "steps": 2, "step_ms": 1}),
    )
    .await
    .unwrap();
    let failed = until_terminal(&server.url, &id).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_limit(&failed["error"], -32603, "max_journal_entry_bytes");
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("step-0"),
        "{failed}"
    );
    assert_eq!(
        effects_of(&effects, "j"),
        1,
        "the run stopped at the first step"
    );
}

/// A journal is capped in entries: a task that fits the cap completes, and
/// the step that would pass it fails its task before its work starts, naming
/// the step and the limit.
#[tokio::test]
async fn a_journal_over_the_entry_cap_fails_its_task_before_the_next_step_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (store, effects) = (dir.path().join("tasks.db"), dir.path().join("effects.log"));
    let server = fixture(
        &store,
        &effects,
        &["--instance", "a", "--limit", "max_journal_entries=3"],
    );
    let fits = create(
        &server.url,
        "steps",
        json!({"tag": "fits", "steps": 3, "step_ms": 1}),
    )
    .await
    .unwrap();
    let done = until_terminal(&server.url, &fits).await;
    assert_eq!(
        done["status"], "completed",
        "a journal of exactly the cap: {done}"
    );

    let id = create(
        &server.url,
        "steps",
        json!({"tag": "long", "steps": 5, "step_ms": 1}),
    )
    .await
    .unwrap();
    let failed = until_terminal(&server.url, &id).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_limit(&failed["error"], -32603, "max_journal_entries");
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(message.contains("`step-3`"), "names the step: {failed}");
    assert_eq!(failed["error"]["data"]["max"], 3, "{failed}");
    assert_eq!(
        effects_of(&effects, "long"),
        3,
        "the fourth step's work never started"
    );
}

/// Another client: the second loopback address.
fn client_b() -> Option<std::net::IpAddr> {
    Some(std::net::Ipv4Addr::new(127, 0, 0, 2).into())
}

/// Without a principal, unfinished tasks are capped per client address: a
/// client at its cap is refused naming the limit, its tasks intact, while
/// a client at another address is served; a task that ends gives its place
/// back.
#[tokio::test]
async fn unfinished_tasks_without_a_principal_are_capped_per_client_address() {
    let dir = tempfile::tempdir().unwrap();
    let (store, effects) = (dir.path().join("tasks.db"), dir.path().join("effects.log"));
    let capped = fixture(
        &store,
        &effects,
        &[
            "--limit",
            "max_unfinished_per_address=2",
            // Not what counts calls from an address.
            "--limit",
            "max_unfinished_per_principal=2",
            // 127.0.0.1 and 127.0.0.2 as two clients.
            "--loopback-addresses-apart",
        ],
    );
    let url = &capped.url;
    let first = create(url, "ask_with_deadline", parked_question())
        .await
        .unwrap();
    let second = create(url, "ask_with_deadline", parked_question())
        .await
        .unwrap();
    let error = create(url, "ask_with_deadline", parked_question())
        .await
        .unwrap_err();
    assert_limit(&error, -32603, "max_unfinished_per_address");
    // Another client is not locked out.
    create_from(client_b(), url, "ask_with_deadline", parked_question())
        .await
        .expect("a client at another address is served");
    // Both tasks are intact; once one ends, a new one is accepted.
    for id in [&first, &second] {
        until_parked(url, id).await;
        let (_, got) = rpc(url, "tasks/get", json!({"taskId": id}), true).await;
        assert_eq!(got["result"]["status"], "input_required", "{got}");
    }
    let (_, cancelled) = rpc(url, "tasks/cancel", json!({"taskId": first}), true).await;
    assert!(cancelled.get("result").is_some(), "{cancelled}");
    until_terminal(url, &first).await;
    create(url, "ask_with_deadline", parked_question())
        .await
        .unwrap();
}

/// Without a principal, the create rate is per client address: a client
/// over it is refused naming the limit, with when to retry, while a client
/// at another address is served.
#[tokio::test]
async fn creates_without_a_principal_are_rated_per_client_address() {
    let dir = tempfile::tempdir().unwrap();
    let (store, effects) = (dir.path().join("tasks.db"), dir.path().join("effects.log"));
    let rated = fixture(
        &store,
        &effects,
        &[
            "--limit",
            "creates_per_second=0.5",
            "--limit",
            "create_burst=3",
            // 127.0.0.1 and 127.0.0.2 as two clients.
            "--loopback-addresses-apart",
        ],
    );
    let args = json!({"tag": "rate", "steps": 1, "step_ms": 1});
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(create(&rated.url, "steps", args.clone()).await.unwrap());
    }
    let error = create(&rated.url, "steps", args.clone()).await.unwrap_err();
    assert_limit(&error, -32603, "creates_per_second");
    let wait = error["data"]["retryAfterMs"].as_u64().unwrap();
    assert!(wait > 0 && wait <= 2000, "{error}");
    ids.push(
        create_from(client_b(), &rated.url, "steps", args.clone())
            .await
            .expect("a client at another address has a bucket of its own"),
    );
    for id in &ids {
        assert_eq!(until_terminal(&rated.url, id).await["status"], "completed");
    }
    tokio::time::sleep(Duration::from_millis(wait + 50)).await;
    create(&rated.url, "steps", args).await.unwrap();
}

// ---------------------------------------------------------------------------
// HTTP: timeouts and the connection cap.

/// The `host:port` of a server URL.
fn authority(url: &str) -> String {
    url.trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned()
}

/// Reads until the server closes the connection (at most `within`);
/// returns what it sent and how long that took.
async fn until_closed(stream: &mut tokio::net::TcpStream, within: Duration) -> (String, Duration) {
    let start = Instant::now();
    let got = request::until_closed(stream, within).await;
    (got, start.elapsed())
}

/// A normal request: `server/discover`, answered in time.
async fn discover_within(url: &str, within: Duration) {
    let started = Instant::now();
    let (status, body) = tokio::time::timeout(within, rpc(url, "server/discover", json!({}), true))
        .await
        .unwrap_or_else(|_| panic!("a normal request waited more than {within:?}"));
    assert_eq!(status, 200, "{body}");
    assert!(body["result"]["supportedVersions"].is_array(), "{body}");
    assert!(started.elapsed() < within);
}

#[tokio::test]
async fn slow_headers_and_bodies_are_cut_off_while_normal_requests_are_served() {
    use tokio::io::AsyncWriteExt as _;
    let dir = tempfile::tempdir().unwrap();
    let (store, effects) = (dir.path().join("tasks.db"), dir.path().join("effects.log"));
    let server = fixture(
        &store,
        &effects,
        &["--header-read-timeout", "1s", "--body-read-timeout", "1s"],
    );
    let addr = authority(&server.url);

    // Half-sent headers: the connection is closed at the timeout.
    let mut slow_head = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow_head
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl")
        .await
        .unwrap();
    // A half-sent body: 408 at the timeout.
    let mut slow_body = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow_body
        .write_all(
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
              Accept: application/json, text/event-stream\r\nContent-Length: 500\r\n\r\n{\"jsonrpc\":",
        )
        .await
        .unwrap();
    // Meanwhile, normal requests are served at once.
    discover_within(&server.url, Duration::from_millis(900)).await;

    let (head_reply, head_after) = until_closed(&mut slow_head, Duration::from_secs(10)).await;
    assert!(
        head_after >= Duration::from_millis(500) && head_after < Duration::from_secs(5),
        "headers cut after {head_after:?}"
    );
    assert!(!head_reply.contains("200 OK"), "{head_reply}");
    let (body_reply, body_after) = until_closed(&mut slow_body, Duration::from_secs(10)).await;
    assert!(
        body_reply.starts_with("HTTP/1.1 408"),
        "a stalled body gets 408: {body_reply}"
    );
    assert!(body_reply.contains("body_read_timeout"), "{body_reply}");
    assert!(
        body_after < Duration::from_secs(5),
        "body cut after {body_after:?}"
    );

    // An idle kept-alive connection is closed too (hyper's header timer).
    let mut idle = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (_, idle_after) = until_closed(&mut idle, Duration::from_secs(10)).await;
    assert!(
        idle_after < Duration::from_secs(5),
        "idle closed after {idle_after:?}"
    );
    discover_within(&server.url, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn connections_beyond_the_cap_wait_without_starving_others() {
    use tokio::io::AsyncWriteExt as _;
    let dir = tempfile::tempdir().unwrap();
    let (store, effects) = (dir.path().join("tasks.db"), dir.path().join("effects.log"));
    let server = fixture(
        &store,
        &effects,
        &["--header-read-timeout", "1s", "--max-connections", "4"],
    );
    let addr = authority(&server.url);
    // Twelve stalled clients: three times the cap.
    let mut stalled = Vec::new();
    for _ in 0..12 {
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        s.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .await
            .unwrap();
        stalled.push(s);
    }
    // A normal request queues behind them, and is served once the stalled
    // ones have been cut off four at a time (about 3 s), not starved.
    discover_within(&server.url, Duration::from_secs(8)).await;
    for mut s in stalled {
        let (reply, _) = until_closed(&mut s, Duration::from_secs(10)).await;
        assert!(!reply.contains("200 OK"), "{reply}");
    }
    discover_within(&server.url, Duration::from_secs(2)).await;
}

/// The most calls of `tag` begun and not yet ended at any one point of the
/// effects file.
fn most_at_once(effects: &Path, tag: &str) -> usize {
    let (mut open, mut most) = (0usize, 0usize);
    for line in std::fs::read_to_string(effects).unwrap_or_default().lines() {
        if line.starts_with(&format!("begin {tag} ")) {
            open += 1;
            most = most.max(open);
        } else if line.starts_with(&format!("end {tag} ")) {
            open = open.saturating_sub(1);
        }
    }
    most
}

#[tokio::test]
async fn inline_calls_beyond_the_limit_wait_for_a_place() {
    let dir = tempfile::tempdir().unwrap();
    let effects = dir.path().join("effects.log");
    let server = fixture(
        &dir.path().join("tasks.db"),
        &effects,
        &["--max-inline", "2"],
    );
    // Six inline calls (no tasks extension) at once, each holding its place
    // until the release file exists.
    let calls: Vec<_> = (0..6)
        .map(|_| {
            let url = server.url.clone();
            tokio::spawn(async move {
                rpc(
                    &url,
                    "tools/call",
                    json!({"name": "hold", "arguments": {"tag": "held"}}),
                    false,
                )
                .await
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while effects_of(&effects, "held") < 2 {
        assert!(Instant::now() < deadline, "two calls never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Two run; the other four wait, neither started nor refused.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(effects_of(&effects, "held"), 2);
    assert!(
        calls.iter().all(|c| !c.is_finished()),
        "no call is answered yet"
    );

    std::fs::write(effects.with_extension("release"), "").unwrap();
    for call in calls {
        let (status, body) = call.await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["result"]["isError"], json!(false), "{body}");
    }
    // All six ran, never more than two at once.
    assert_eq!(effects_of(&effects, "held"), 6);
    assert_eq!(most_at_once(&effects, "held"), 2);
}
