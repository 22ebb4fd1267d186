//! Bearer-token authentication, end to end: the conformance server as a
//! process with `--jwt-issuer`, `--jwt-audience` and `--jwks` (a file, or a
//! URL served by a small HTTP server in the test), and tokens signed here
//! with Ed25519 keys whose public halves are in the JWKS.

mod common;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use common::{
    jwt::{AUDIENCE, Claims, ISSUER, KEY_A, KEY_A_X, KEY_B, KEY_B_X, jwk, now},
    process::{ServerProcess, StoreArgs},
    request, schemas,
};
use futures::StreamExt as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

/// The conformance server, trusting the keys at `jwks` (a file or a URL).
fn start(dir: &tempfile::TempDir, jwks: &str) -> ServerProcess {
    start_with(dir, jwks, &[])
}

/// As [`start`], with more flags.
fn start_with(dir: &tempfile::TempDir, jwks: &str, more: &[&str]) -> ServerProcess {
    let mut args = vec![
        "--jwt-issuer",
        ISSUER,
        "--jwt-audience",
        AUDIENCE,
        "--jwks",
        jwks,
    ];
    args.extend_from_slice(more);
    ServerProcess::start(
        common::bin("conformance"),
        &StoreArgs::Sqlite(dir.path().join("tasks.db")),
        &args,
        None,
        Duration::from_secs(60),
    )
}

/// The server, trusting key A from a JWKS file.
fn start_with_file(dir: &tempfile::TempDir) -> ServerProcess {
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, json!({"keys": [jwk("k1", KEY_A_X)]}).to_string()).unwrap();
    start(dir, path.to_str().unwrap())
}

fn http() -> &'static reqwest::Client {
    static HTTP: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    HTTP.get_or_init(|| {
        reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap()
    })
}

/// A 2026-07-28 request with the tasks extension, carrying
/// `Authorization: <authorization>` when given.
fn request(
    url: &str,
    method: &str,
    mut params: Value,
    authorization: Option<&str>,
) -> reqwest::RequestBuilder {
    params["_meta"] = request::meta(true);
    let mut req = request::post(
        http(),
        url,
        json!(7),
        method,
        &params,
        request::name_of(&params),
    );
    if let Some(a) = authorization {
        req = req.header("Authorization", a);
    }
    req
}

/// A JSON reply as `token`'s holder.
async fn post(url: &str, method: &str, params: Value, token: &str) -> Value {
    let resp = request(url, method, params, Some(&format!("Bearer {token}")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{method} with a valid token");
    resp.json().await.unwrap()
}

/// Sends `tools/list` with `authorization` and expects 401 with the
/// challenge; returns the `WWW-Authenticate` value.
async fn refused(url: &str, authorization: Option<&str>) -> String {
    let resp = request(url, "tools/list", json!({}), authorization)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401, "Authorization: {authorization:?}");
    let challenge = resp.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    let base = url.strip_suffix("/mcp").unwrap();
    assert!(
        challenge.starts_with(&format!(
            "Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\""
        )),
        "{challenge}"
    );
    // The body does not say what was wrong with the token (that is in the
    // log, under the reference it gives).
    let body = resp.text().await.unwrap();
    let generic = if challenge.contains("error=") {
        body.starts_with("Unauthorized: the bearer token is not valid here (reference ")
    } else {
        body == "Unauthorized: a bearer token is required\n"
    };
    assert!(generic, "{authorization:?}: {body:?}");
    for detail in [
        "invalid token",
        "Signature",
        "Audience",
        "Issuer",
        "Algorithm",
        "algorithm",
        "key",
        "sub",
        "Base64",
        "Json",
        "InvalidToken",
    ] {
        assert!(!body.contains(detail), "{authorization:?}: {body:?}");
    }
    challenge
}

#[tokio::test]
async fn a_request_without_a_valid_token_gets_401_and_the_way_to_get_one() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_file(&dir);
    let url = &server.url;

    // No credentials: the challenge carries no error code (RFC 6750 §3.1).
    let challenge = refused(url, None).await;
    assert!(!challenge.contains("error="), "{challenge}");
    // Not a bearer token.
    refused(url, Some("Basic dXNlcjpwYXNz")).await;
    refused(url, Some("Bearer ")).await;
    // Each check, failed on its own.
    let bad = [
        ("garbage", "not-a-jwt".to_owned()),
        ("bad signature", {
            let mut c = Claims::valid("alice");
            c.key = KEY_B; // signed by another key, claiming to be k1
            c.sign()
        }),
        ("unknown key", {
            let mut c = Claims::valid("alice");
            (c.key, c.kid) = (KEY_B, "k2");
            c.sign()
        }),
        ("wrong audience", {
            let mut c = Claims::valid("alice");
            c.aud = "https://elsewhere.test.example/mcp".into();
            c.sign()
        }),
        ("wrong issuer", {
            let mut c = Claims::valid("alice");
            c.iss = "https://impostor.test.example/".into();
            c.sign()
        }),
        ("expired", {
            let mut c = Claims::valid("alice");
            c.exp = now() - 3600;
            c.sign()
        }),
        ("not yet valid", {
            let mut header = Header::new(Algorithm::EdDSA);
            header.kid = Some("k1".to_owned());
            let claims = json!({
                "sub": "alice", "iss": ISSUER, "aud": AUDIENCE,
                "exp": now() + 7200, "nbf": now() + 3600,
            });
            jsonwebtoken::encode(
                &header,
                &claims,
                &EncodingKey::from_ed_pem(KEY_A.as_bytes()).unwrap(),
            )
            .unwrap()
        }),
        ("HMAC keyed with the public key", {
            let mut header = Header::new(Algorithm::HS256);
            header.kid = Some("k1".to_owned());
            let claims =
                json!({"sub": "alice", "iss": ISSUER, "aud": AUDIENCE, "exp": now() + 3600});
            jsonwebtoken::encode(
                &header,
                &claims,
                &EncodingKey::from_secret(KEY_A_X.as_bytes()).unwrap(),
            )
            .unwrap()
        }),
        ("no subject", {
            let mut c = Claims::valid("");
            c.sub = String::new();
            c.sign()
        }),
    ];
    for (why, token) in &bad {
        let challenge = refused(url, Some(&format!("Bearer {token}"))).await;
        assert!(
            challenge.contains("error=\"invalid_token\""),
            "{why}: {challenge}"
        );
    }

    // A valid token is let in.
    let listed = post(url, "tools/list", json!({}), &Claims::valid("alice").sign()).await;
    schemas().core("JSONRPCResultResponse", &listed);
    assert!(listed["result"]["tools"].as_array().unwrap().len() > 1);

    // The Protected Resource Metadata, served without a token, names the
    // issuer as the authorization server.
    let base = url.strip_suffix("/mcp").unwrap();
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let resp = http().get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let doc: Value = resp.json().await.unwrap();
        assert_eq!(doc["resource"], json!(url), "{doc}");
        assert_eq!(doc["authorization_servers"], json!([ISSUER]), "{doc}");
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]), "{doc}");
    }
}

/// The messages of a listen stream, until `count` of them arrived.
async fn listen(url: &str, ids: &[&str], token: &str, count: usize) -> Vec<Value> {
    let resp = request(
        url,
        "subscriptions/listen",
        json!({"notifications": {"taskIds": ids}}),
        Some(&format!("Bearer {token}")),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let mut buffer = Vec::new();
    let mut messages = Vec::new();
    while messages.len() < count {
        while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buffer.drain(..end + 2).collect();
            let text = String::from_utf8(event).unwrap();
            let data: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .filter(|d| !d.is_empty())
                .collect();
            if !data.is_empty() {
                messages.push(serde_json::from_str(&data.join("\n")).unwrap());
            }
        }
        if messages.len() >= count {
            break;
        }
        let chunk = tokio::time::timeout(Duration::from_secs(30), body.next())
            .await
            .expect("the stream says something within 30 s")
            .expect("the stream is open")
            .unwrap();
        buffer.extend_from_slice(&chunk);
    }
    messages
}

/// The error of a reply, with `id` replaced by `<id>` in its message, to
/// compare the answers about different ids.
fn error_of(reply: &Value, id: &str) -> Value {
    schemas().core("JSONRPCErrorResponse", reply);
    let mut error = reply["error"].clone();
    let message = error["message"].as_str().unwrap().replace(id, "<id>");
    error["message"] = json!(message);
    if let Some(data) = error.get_mut("data") {
        *data = json!(data.to_string().replace(id, "<id>"));
    }
    error
}

#[tokio::test]
async fn another_principals_task_reads_as_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_file(&dir);
    let url = &server.url;
    let (alice, bob) = (Claims::valid("alice").sign(), Claims::valid("bob").sign());

    let created = post(
        url,
        "tools/call",
        json!({"name": "confirm_delete", "arguments": {"filename": "a.txt"}}),
        &alice,
    )
    .await;
    let id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned();
    let unknown = "0123456789abcdef0123456789abcdef";

    // Bob gets, for Alice's task, exactly what he gets for an unknown id.
    let answers = json!({"confirm": {"action": "accept", "content": {"confirm": true}}});
    let calls = [
        ("tasks/get", json!({})),
        ("tasks/update", json!({"inputResponses": answers})),
        ("tasks/cancel", json!({})),
    ];
    for (method, extra) in &calls {
        let with = |task: &str| {
            let mut params = extra.clone();
            params["taskId"] = json!(task);
            params
        };
        let foreign = post(url, method, with(&id), &bob).await;
        let missing = post(url, method, with(unknown), &bob).await;
        assert_eq!(
            error_of(&foreign, &id),
            error_of(&missing, unknown),
            "{method}: {foreign} vs {missing}"
        );
    }
    // Bob's listen leaves Alice's task out, as it does an unknown id.
    for task in [id.as_str(), unknown] {
        let ack = &listen(url, &[task], &bob, 1).await[0];
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "{ack}"
        );
        assert_eq!(
            ack["params"]["notifications"]["taskIds"],
            json!([]),
            "{ack}"
        );
    }

    // Alice sees her task, untouched by Bob's update and cancel.
    let got = post(url, "tasks/get", json!({"taskId": id}), &alice).await;
    assert_eq!(got["result"]["status"], "input_required", "{got}");
    let heard = listen(url, &[&id], &alice, 2).await;
    assert_eq!(
        heard[0]["params"]["notifications"]["taskIds"],
        json!([id]),
        "{heard:?}"
    );
    assert_eq!(heard[1]["params"]["taskId"], json!(id), "{heard:?}");
    let acked = post(
        url,
        "tasks/update",
        json!({"taskId": id, "inputResponses": answers}),
        &alice,
    )
    .await;
    assert!(acked.get("result").is_some(), "{acked}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = post(url, "tasks/get", json!({"taskId": id}), &alice).await;
        if got["result"]["status"] == "completed" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{got}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A JWKS served over HTTP on 127.0.0.1, counting its fetches.
struct KeyServer {
    url: String,
    keys: Arc<Mutex<Value>>,
    fetches: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl KeyServer {
    async fn start(keys: Value) -> Self {
        let keys = Arc::new(Mutex::new(keys));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (served, counted) = (keys.clone(), fetches.clone());
        let app = axum::Router::new().route(
            "/jwks.json",
            axum::routing::get(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                let body = served.lock().unwrap().to_string();
                async move { ([("content-type", "application/json")], body) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            url,
            keys,
            fetches,
            task,
        }
    }
}

impl Drop for KeyServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test]
async fn keys_from_a_jwks_url_are_fetched_kept_and_fetched_again_for_a_new_key() {
    let keys = KeyServer::start(json!({"keys": [jwk("k1", KEY_A_X)]})).await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir, &keys.url);
    let url = &server.url;

    // Nothing is fetched before a token needs checking.
    assert_eq!(keys.fetches.load(Ordering::SeqCst), 0);
    let alice = Claims::valid("alice").sign();
    for _ in 0..3 {
        post(url, "tools/list", json!({}), &alice).await;
    }
    assert_eq!(
        keys.fetches.load(Ordering::SeqCst),
        1,
        "the keys are fetched once and kept"
    );
    let mut forged = Claims::valid("alice");
    forged.key = KEY_B;
    refused(url, Some(&format!("Bearer {}", forged.sign()))).await;

    // The issuer rotates to key k2: a token signed with it makes the server
    // fetch the set again (at most every 10 s), and then it is let in.
    *keys.keys.lock().unwrap() = json!({"keys": [jwk("k1", KEY_A_X), jwk("k2", KEY_B_X)]});
    let mut rotated = Claims::valid("alice");
    (rotated.key, rotated.kid) = (KEY_B, "k2");
    let rotated = format!("Bearer {}", rotated.sign());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let resp = request(url, "tools/list", json!({}), Some(&rotated))
            .send()
            .await
            .unwrap();
        if resp.status() == 200 {
            break;
        }
        assert_eq!(resp.status(), 401);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new key is never taken"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(keys.fetches.load(Ordering::SeqCst) >= 2);
}

#[tokio::test]
async fn keys_that_cannot_be_fetched_give_503_and_the_metadata_says_what_the_flags_say() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let server = start_with(
        &dir,
        &format!("http://127.0.0.1:{port}/jwks.json"),
        &[
            "--jwt-resource",
            "https://tasks.test.example/mcp",
            "--authorization-server",
            "https://as1.test.example/",
            "--authorization-server",
            "https://as2.test.example/",
        ],
    );
    for _ in 0..2 {
        let resp = request(
            &server.url,
            "tools/list",
            json!({}),
            Some(&format!("Bearer {}", Claims::valid("alice").sign())),
        )
        .send()
        .await
        .unwrap();
        assert_eq!(resp.status(), 503);
        assert!(resp.headers().contains_key("retry-after"));
    }
    // Without a token the answer is still the challenge, pointing where
    // `--jwt-resource` says clients reach the server.
    let resp = request(&server.url, "tools/list", json!({}), None)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    assert_eq!(
        resp.headers()["www-authenticate"],
        "Bearer resource_metadata=\"https://tasks.test.example/.well-known/oauth-protected-resource/mcp\""
    );
    let base = server.url.strip_suffix("/mcp").unwrap();
    let doc: Value = http()
        .get(format!("{base}/.well-known/oauth-protected-resource/mcp"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["resource"], "https://tasks.test.example/mcp", "{doc}");
    assert_eq!(
        doc["authorization_servers"],
        json!(["https://as1.test.example/", "https://as2.test.example/"]),
        "{doc}"
    );
}

/// The conformance server trusting key A from a JWKS file, logging as
/// `rust_log` says to the file `log`; killed when dropped.
struct Logging {
    child: std::process::Child,
    url: String,
}

impl Logging {
    fn start(dir: &tempfile::TempDir, rust_log: &str, log: &std::path::Path) -> Self {
        let jwks = dir.path().join("jwks.json");
        std::fs::write(&jwks, json!({"keys": [jwk("k1", KEY_A_X)]}).to_string()).unwrap();
        let mut child = std::process::Command::new(common::bin("conformance"))
            .args(["--addr", "127.0.0.1:0", "--store"])
            .arg(dir.path().join("tasks.db"))
            .args(["--jwt-issuer", ISSUER, "--jwt-audience", AUDIENCE, "--jwks"])
            .arg(&jwks)
            .env("RUST_LOG", rust_log)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("the server starts");
        let (url, _) = common::process::listening(&mut child, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("the server did not say where it listens: {e}"));
        Self { child, url }
    }
}

impl Drop for Logging {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Each refused token is logged at DEBUG, under the reference its 401
/// gave, with its reason; at INFO a burst of them is one summary line,
/// counted by reason (the rest of a minute's burst follows at the minute's
/// end: the runtime's unit test `refusals_are_summed_up_at_most_once_a_minute`).
#[tokio::test]
async fn refused_tokens_are_logged_at_debug_with_a_summary_at_info() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr.log");
    let server = Logging::start(&dir, "info,rmcp=warn,mcp_tasks_runtime::auth=debug", &log);
    let with = |change: fn(&mut Claims)| {
        let mut c = Claims::valid("alice");
        change(&mut c);
        c.sign()
    };
    let tokens = [
        ("expired", with(|c| c.exp = now() - 3600)),
        (
            "wrong audience",
            with(|c| c.aud = "https://elsewhere.test.example/mcp".into()),
        ),
        ("bad signature", with(|c| c.key = KEY_B)),
        ("unknown key", with(|c| (c.key, c.kid) = (KEY_B, "k2"))),
        ("malformed", "not-a-jwt".to_owned()),
    ];
    let mut references = Vec::new();
    for _ in 0..3 {
        for (reason, token) in &tokens {
            let resp = request(
                &server.url,
                "tools/list",
                json!({}),
                Some(&format!("Bearer {token}")),
            )
            .send()
            .await
            .unwrap();
            assert_eq!(resp.status(), 401);
            let body = resp.text().await.unwrap();
            let reference = body
                .split("(reference ")
                .nth(1)
                .and_then(|r| r.split(')').next())
                .unwrap_or_else(|| panic!("no reference in {body:?}"))
                .to_owned();
            references.push((*reason, reference));
        }
    }
    // The log has them all (it is written as they happen).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if references.iter().all(|(_, r)| text.contains(r.as_str())) {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not every reference is in the log: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for (reason, reference) in &references {
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.contains(reference.as_str()))
            .collect();
        assert_eq!(lines.len(), 1, "{reference}: {lines:?}");
        assert!(
            lines[0].contains(" DEBUG ") && lines[0].contains(&format!("reason=\"{reason}\"")),
            "{reason}: {}",
            lines[0]
        );
    }
    let summaries: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("bearer tokens refused:"))
        .collect();
    assert_eq!(summaries.len(), 1, "one line for the burst: {text}");
    assert!(
        summaries[0].contains(" INFO ") && summaries[0].contains("refused: 1 (expired 1)"),
        "{}",
        summaries[0]
    );
    // At INFO alone, the summary is all there is.
    let info: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" INFO ") && l.contains("token"))
        .collect();
    assert_eq!(info, summaries, "{text}");
}

/// N10: under JWT auth, the 2025-11-25 `tasks/list`, `tasks/get` and
/// `tasks/result` of a session are limited to its token's subject: alice's
/// task is not listed for bob, and bob's `tasks/get` and `tasks/result` of
/// it get the same error as an id never issued.
#[tokio::test]
async fn a_2025_11_25_session_sees_only_its_subjects_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_file(&dir);
    let alice_token = Claims::valid("alice").sign();
    let bob_token = Claims::valid("bob").sign();
    let alice = common::session::Session::open(&server.url, Some(&alice_token)).await;
    let bob = common::session::Session::open(&server.url, Some(&bob_token)).await;

    let call =
        json!({"name": "slow_compute", "arguments": {"seconds": 0.1, "label": "a"}, "task": {}});
    let created = alice.request(1, "tools/call", call).await;
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    // Its result, once it is done, is alice's to read.
    let result = alice
        .request(2, "tasks/result", json!({"taskId": id}))
        .await;
    assert_eq!(
        result["result"]["content"][0]["text"], "slow_compute(a) done after 0.1s",
        "{result}"
    );

    let listed = alice.request(3, "tasks/list", json!({})).await;
    schemas().legacy("ListTasksResult", &listed["result"]);
    let ids = |listed: &Value| -> Vec<String> {
        listed["result"]["tasks"]
            .as_array()
            .unwrap_or_else(|| panic!("{listed}"))
            .iter()
            .map(|t| t["taskId"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        ids(&listed),
        std::slice::from_ref(&id),
        "alice's task, listed for her"
    );
    let listed = bob.request(4, "tasks/list", json!({})).await;
    schemas().legacy("ListTasksResult", &listed["result"]);
    assert!(
        ids(&listed).is_empty(),
        "alice's task listed for bob: {listed}"
    );

    let unknown = "0123456789abcdef0123456789abcdef";
    for (n, method) in [(5, "tasks/get"), (7, "tasks/result")] {
        let foreign = bob.request(n, method, json!({"taskId": id})).await;
        let never = bob.request(n + 1, method, json!({"taskId": unknown})).await;
        assert!(foreign.get("result").is_none(), "{method}: {foreign}");
        assert_eq!(foreign["error"]["code"], never["error"]["code"], "{method}");
        let message = |reply: &Value, task: &str| {
            reply["error"]["message"]
                .as_str()
                .unwrap()
                .replace(task, "<id>")
        };
        assert_eq!(
            message(&foreign, &id),
            message(&never, unknown),
            "{method}: bob is told of alice's task as of one never issued"
        );
        assert_eq!(
            foreign["error"].get("data"),
            never["error"].get("data"),
            "{method}"
        );
    }
}

/// A `tasks/get` answered at the HTTP front door is read for the token's
/// subject as rmcp's way reads it: the owner gets the same task both ways
/// (see `request::both_ways`), and another subject gets, both ways, what
/// an unknown id gets.
#[tokio::test]
async fn a_poll_at_the_front_door_is_scoped_to_the_token_as_rmcp_scopes_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_file(&dir);
    let url = &server.url;
    let (alice, bob) = (Claims::valid("alice").sign(), Claims::valid("bob").sign());
    let created = post(
        url,
        "tools/call",
        json!({"name": "confirm_delete", "arguments": {"filename": "a.txt"}}),
        &alice,
    )
    .await;
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    let unknown = "0123456789abcdef0123456789abcdef";
    let get = |task: &str, token: &str| {
        let (task, token) = (task.to_owned(), format!("Bearer {token}"));
        move || request(url, "tasks/get", json!({"taskId": task}), Some(&token))
    };
    let body = |w: &request::Wire| serde_json::from_slice::<Value>(&w.2).unwrap();

    let [plain, rmcp] = request::both_ways(get(&id, &alice)).await;
    assert_eq!(plain, rmcp);
    assert_eq!(
        body(&plain)["result"]["status"],
        "input_required",
        "{}",
        body(&plain)
    );
    let [foreign, rmcp] = request::both_ways(get(&id, &bob)).await;
    assert_eq!(foreign, rmcp);
    let [missing, _] = request::both_ways(get(unknown, &bob)).await;
    assert_eq!(
        error_of(&body(&foreign), &id),
        error_of(&body(&missing), unknown)
    );
}
