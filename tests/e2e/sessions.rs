//! 2025-11-25 sessions against the demo and conformance servers as
//! processes on 127.0.0.1, in the default mode (no principal: every other
//! client is a stranger) and under bearer tokens: a repeated plain call
//! joins a task only within its session, sessions are capped, rate-limited
//! and bounded in size, a session belongs to the principal that opened it,
//! and `DELETE` ends one with `200 OK`.

mod common;

use std::{path::Path, time::Duration};

use common::{
    jwt::{AUDIENCE, Claims, ISSUER, KEY_A_X, jwk},
    legacy::{FAST, demo, store_bytes},
    process::{ServerProcess, StoreArgs},
    session::{Session, Sse, http, initialize, initialize_params, rss_bytes},
};
use serde_json::{Value, json};

/// The deploy a stranger repeats in the demo.
fn deploy() -> Value {
    json!({"name": "deploy", "arguments": {"service": "billing", "git_ref": "v2.3.0"}})
}

/// Waits (at most 30 s) for `deploy`'s approval question on `stream`.
async fn approval(stream: &mut Sse, who: &str) -> Value {
    stream
        .next_request("elicitation/create", &format!("{who}'s approval"))
        .await
}

/// The status of task `id`, as `session` sees it.
async fn status(session: &Session, id: &str) -> String {
    let got = session
        .request(91, "tasks/get", json!({"taskId": id}))
        .await;
    got["result"]["status"]
        .as_str()
        .unwrap_or_else(|| panic!("tasks/get: {got:#}"))
        .to_owned()
}

/// The demo's store, read as it is on disk.
fn store(dir: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(
        dir.join("demo.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap()
}

/// The ids of the tasks in the demo's store, oldest first (without a
/// principal, `tasks/list` is not served).
fn tasks(dir: &Path) -> Vec<String> {
    let db = store(dir);
    let mut rows = db
        .prepare("SELECT id FROM tasks ORDER BY created_at_ms")
        .unwrap();
    rows.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test]
async fn a_stranger_repeating_a_call_gets_a_task_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let server = demo(dir.path(), &[]);
    let owner = Session::open(&server.url, None).await;
    let mut first = owner.stream(1, "tools/call", deploy()).await;
    approval(&mut first, "the owner").await;
    let tasks = tasks(dir.path());
    assert_eq!(tasks.len(), 1, "{tasks:#?}");
    let owners_task = tasks[0].clone();

    // Another client, without any principal, repeats the call word for word.
    let stranger = Session::open(&server.url, None).await;
    let mut second = stranger.stream(7, "tools/call", deploy()).await;
    let question = approval(&mut second, "the stranger").await;
    let tasks = self::tasks(dir.path());
    assert_eq!(
        tasks.len(),
        2,
        "the stranger's call started a task of its own: {tasks:#?}"
    );
    // Its answer and its cancel reach its own task only.
    let answered = stranger
        .respond(
            &question["id"],
            json!({"action": "accept", "content": {"approve": true}}),
        )
        .await;
    assert_eq!(answered, 202);
    let cancelled = stranger
        .notify(
            "notifications/cancelled",
            json!({"requestId": 7, "reason": "not mine"}),
        )
        .await;
    assert_eq!(cancelled, 202);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        status(&owner, &owners_task).await,
        "input_required",
        "the owner's deploy still waits for the owner's approval"
    );
    drop(first);
}

#[tokio::test]
async fn a_call_repeated_in_its_session_after_a_dropped_connection_joins_its_task() {
    let dir = tempfile::tempdir().unwrap();
    let server = demo(dir.path(), &[]);
    let client = Session::open(&server.url, None).await;
    let mut first = client.stream(1, "tools/call", deploy()).await;
    approval(&mut first, "the first call").await;
    // The connection drops mid-call; the session stays.
    drop(first);

    let mut again = client.stream(2, "tools/call", deploy()).await;
    let question = approval(&mut again, "the repeated call").await;
    let tasks = tasks(dir.path());
    assert_eq!(tasks.len(), 1, "the repeat joined the task: {tasks:#?}");
    client
        .respond(
            &question["id"],
            json!({"action": "accept", "content": {"approve": true}}),
        )
        .await;
    let result = loop {
        let m = again.next("the deploy's result").await;
        if m["id"] == 2 && m.get("method").is_none() {
            break m;
        }
    };
    assert_eq!(
        result["result"]["structuredContent"]["service"], "billing",
        "{result:#}"
    );
    assert_eq!(self::tasks(dir.path()).len(), 1);
}

/// The session rows in the demo's store.
fn stored_sessions(dir: &Path) -> i64 {
    store(dir)
        .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn sessions_are_capped_and_rate_limited_per_client_and_delete_answers_200() {
    let dir = tempfile::tempdir().unwrap();
    // This machine's loopback addresses together: 4 times 64.
    let server = ServerProcess::start_with_env(
        common::bin("demo"),
        &StoreArgs::Sqlite(dir.path().join("demo.db")),
        &["--max-sessions-per-client", "64"],
        &[("MCP_TASKS_DEMO_PACE", FAST.as_ref())],
        Duration::from_secs(60),
    );
    let rss_before = rss_bytes(server.pid());
    let http = http();
    let mut open = Vec::new();
    let refusal = loop {
        let resp = initialize(&http, &server.url, &initialize_params(), None).await;
        if resp.status() != 200 {
            break resp;
        }
        open.push(
            resp.headers()["mcp-session-id"]
                .to_str()
                .unwrap()
                .to_owned(),
        );
        assert!(open.len() <= 256, "no cap on open sessions");
    };
    assert_eq!(open.len(), 256, "4 x max_sessions_per_client, for loopback");
    assert_eq!(refusal.status(), 429);
    let body: Value = refusal.json().await.unwrap();
    assert_eq!(body["id"], 0, "{body:#}");
    assert_eq!(
        body["error"]["data"]["limit"], "max_sessions_per_client",
        "{body:#}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_sessions_per_client"),
        "{body:#}"
    );
    let rss_after = rss_bytes(server.pid());
    assert!(
        rss_after < rss_before + 64 * 1024 * 1024,
        "RSS grew from {rss_before} to {rss_after} bytes"
    );
    assert_eq!(stored_sessions(dir.path()), 256);

    // Ending one (the official SDKs expect 200 or 204) frees its place.
    let one = Session {
        http: http.clone(),
        url: server.url.clone(),
        id: open.pop().unwrap(),
        token: None,
    };
    assert_eq!(one.delete().await, 200);
    assert_eq!(stored_sessions(dir.path()), 255);
    let resp = initialize(&http, &server.url, &initialize_params(), None).await;
    assert_eq!(resp.status(), 200, "a place was free again");
    let again = Session {
        id: resp.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned(),
        ..one
    };
    assert_eq!(again.delete().await, 200);

    // Opening and ending sessions in a loop runs into the rate (300 a
    // minute by default, 257 spent already).
    let limited = loop {
        let resp = initialize(&http, &server.url, &initialize_params(), None).await;
        if resp.status() != 200 {
            break resp;
        }
        let s = Session {
            http: http.clone(),
            url: server.url.clone(),
            id: resp.headers()["mcp-session-id"]
                .to_str()
                .unwrap()
                .to_owned(),
            token: None,
        };
        assert_eq!(s.delete().await, 200);
        open.push(String::new());
        assert!(open.len() < 400, "no rate limit on opening sessions");
    };
    assert_eq!(limited.status(), 429);
    assert!(limited.headers().contains_key("retry-after"));
    let body: Value = limited.json().await.unwrap();
    assert_eq!(
        body["error"]["data"]["limit"], "sessions_per_minute",
        "{body:#}"
    );
}

#[tokio::test]
async fn a_large_initialize_is_refused_and_nothing_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let server = demo(dir.path(), &[]);
    let http = http();
    let store_before = store_bytes(dir.path());
    let rss_before = rss_bytes(server.pid());
    let mut params = initialize_params();
    params["clientInfo"]["description"] = json!("x".repeat(3 * 1024 * 1024));
    for _ in 0..15 {
        let resp = initialize(&http, &server.url, &params, None).await;
        assert_eq!(resp.status(), 400);
        assert!(!resp.headers().contains_key("mcp-session-id"));
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], -32602, "{body:#}");
        assert_eq!(
            body["error"]["data"]["limit"], "max_initialize_bytes",
            "{body:#}"
        );
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("max_initialize_bytes"),
            "{body:#}"
        );
    }
    assert_eq!(stored_sessions(dir.path()), 0);
    let store_after = store_bytes(dir.path());
    assert!(
        store_after < store_before + 1024 * 1024,
        "the store grew from {store_before} to {store_after} bytes"
    );
    let rss_after = rss_bytes(server.pid());
    assert!(
        rss_after < rss_before + 48 * 1024 * 1024,
        "RSS grew from {rss_before} to {rss_after} bytes"
    );
    // A small one is still welcome.
    Session::open(&server.url, None).await;
}

#[tokio::test]
async fn a_session_is_refused_to_another_principal() {
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, json!({"keys": [jwk("k1", KEY_A_X)]}).to_string()).unwrap();
    let server = ServerProcess::start(
        common::bin("conformance"),
        &StoreArgs::Sqlite(dir.path().join("tasks.db")),
        &[
            "--jwt-issuer",
            ISSUER,
            "--jwt-audience",
            AUDIENCE,
            "--jwks",
            jwks.to_str().unwrap(),
        ],
        None,
        Duration::from_secs(60),
    );
    let (alice, bob) = (Claims::valid("alice").sign(), Claims::valid("bob").sign());
    let session = Session::open(&server.url, Some(&alice)).await;
    let as_bob = Session {
        http: http(),
        url: server.url.clone(),
        id: session.id.clone(),
        token: Some(bob),
    };
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let resp = as_bob.post(&list).send().await.unwrap();
    assert_eq!(resp.status(), 404, "bob's POST in alice's session");
    let resp = as_bob
        .with_headers(as_bob.http.get(&as_bob.url))
        .header("Accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404, "bob's GET of alice's session");
    assert_eq!(
        as_bob.delete().await,
        404,
        "bob's DELETE of alice's session"
    );
    // Alice's session is untouched.
    let listed = session.request(2, "tools/list", json!({})).await;
    assert!(listed["result"]["tools"].is_array(), "{listed:#}");
    assert_eq!(session.delete().await, 200);
}

/// A session that goes quiet past `session_idle_timeout` is closed and its
/// stored state deleted: its id no longer serves.
#[tokio::test]
async fn an_idle_session_is_closed_and_its_stored_state_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start_with_env(
        common::bin("demo"),
        &StoreArgs::Sqlite(dir.path().join("demo.db")),
        &["--session-idle-timeout", "1s"],
        &[("MCP_TASKS_DEMO_PACE", FAST.as_ref())],
        Duration::from_secs(60),
    );
    let session = Session::open(&server.url, None).await;
    assert_eq!(stored_sessions(dir.path()), 1, "the session is stored");
    // Quiet from here on; wait (at most 30 s) for the server to let it go.
    let mut left = i64::MAX;
    for _ in 0..300 {
        left = stored_sessions(dir.path());
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, 0, "the idle session's stored state is deleted");
    let status = session
        .post(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(
        status.as_u16(),
        404,
        "an idle session's id no longer serves"
    );
}
