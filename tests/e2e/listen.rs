//! Push: `subscriptions/listen` with `notifications.taskIds`, over
//! Streamable HTTP (an SSE stream on the listen request, read raw) and over
//! stdio (notifications on the connection), each message validated against
//! the official schemas. Servers run in this process on 127.0.0.1 on a
//! SQLite file, except the fleet test, which puts two instances on one
//! Postgres schema.

mod common;

use std::{
    io::{BufRead as _, BufReader, Write as _},
    process::Stdio,
    sync::{
        atomic::{AtomicUsize, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use common::{postgres_or_skip, request, schemas};
use futures::StreamExt as _;
use mcp_tasks_runtime::{
    Elicit, Engine, Result, ToolError, ask_user, checkpoint,
    mcp::{self, TaskServer},
    question::AskError,
    store::{SqliteStore, Store, TaskRecord},
    task_tool,
    tool::Registry,
};
use mcp_tasks_store_contract::{Forward, Forwarded};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// The answer to the release question.
#[derive(Deserialize, serde::Serialize, JsonSchema, Elicit)]
struct Release {
    /// Whether to release.
    go: bool,
}

/// Asks whether to release, then says what it did. Asks to be polled only
/// every 30 s: a client that sees its end sooner heard it by push.
#[task_tool(task = required, poll_interval = "30s")]
async fn release(
    /// What to release.
    name: String,
) -> Result<String, ToolError> {
    let answer: Result<Release, AskError> = ask_user(format!("Release {name}?")).key("go").await;
    // Some work after the answer (not journaled: no state change), so a
    // client that looks right after answering still sees the task working.
    #[allow_nondeterminism]
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(format!("release({name}): go = {}", answer?.go))
}

/// Outlives its one-second time to live.
#[task_tool(task = required, ttl = "1s")]
async fn fleeting() -> String {
    mcp_tasks_runtime::durable::sleep(Duration::from_secs(30)).await;
    "too late".into()
}

/// How many steps `ticker` has taken, in every run of it.
static TICKS: AtomicUsize = AtomicUsize::new(0);

/// Takes a journaled step every 50 ms, for ten minutes.
#[task_tool(task = required)]
async fn ticker() -> Result<String, ToolError> {
    for i in 0..12_000_u32 {
        checkpoint(format!("tick {i}"), || async {
            TICKS.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>(())
        })
        .await?;
        #[allow_nondeterminism]
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok("ticked".into())
}

fn registry() -> Registry {
    Registry::new()
        .with(release_tool())
        .unwrap()
        .with(fleeting_tool())
        .unwrap()
        .with(ticker_tool())
        .unwrap()
}

/// A server on `store`, its URL, and the server itself (for its counters).
async fn serve_on(store: impl Store, principal: bool) -> (String, TaskServer) {
    serve_engine(Engine::builder(store), principal).await
}

/// A server on the engine `builder` makes.
async fn serve_engine(
    builder: mcp_tasks_runtime::engine::EngineBuilder,
    principal: bool,
) -> (String, TaskServer) {
    let engine = builder.registry(registry()).start().await.unwrap();
    let mut builder = TaskServer::builder(engine);
    if principal {
        builder = builder.principal(|parts: &axum::http::request::Parts| {
            parts
                .headers
                .get("x-user")?
                .to_str()
                .ok()
                .map(str::to_owned)
        });
    }
    let server = builder.build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(mcp::serve(listener, server.clone()).into_future());
    (url, server)
}

async fn serve(dir: &tempfile::TempDir, principal: bool) -> (String, TaskServer) {
    let store = SqliteStore::open(dir.path().join("tasks.db"))
        .await
        .unwrap();
    serve_on(store, principal).await
}

/// An HTTP request as a 2026-07-28 client sends it.
fn request(
    url: &str,
    id: Value,
    method: &str,
    mut params: Value,
    tasks: bool,
    user: Option<&str>,
) -> reqwest::RequestBuilder {
    static HTTP: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    params["_meta"] = request::meta(tasks);
    let mut req = HTTP
        .get_or_init(reqwest::Client::new)
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method)
        .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    if let Some(task) = params.get("taskId").and_then(Value::as_str) {
        req = req.header("Mcp-Name", task);
    }
    if method == "tools/call" {
        req = req.header("Mcp-Name", params["name"].as_str().unwrap());
    }
    if let Some(user) = user {
        req = req.header("x-user", user);
    }
    req
}

/// A request answered with one JSON body.
async fn post(url: &str, method: &str, params: Value, user: Option<&str>) -> Value {
    let resp = request(url, json!(1), method, params, true, user)
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap();
    resp.json().await.unwrap()
}

async fn create(url: &str, name: &str, user: Option<&str>) -> String {
    let created = post(
        url,
        "tools/call",
        json!({"name": "release", "arguments": {"name": name}}),
        user,
    )
    .await;
    created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned()
}

/// What `tasks/get` shows now, as a notification carries it (less
/// `resultType` and the result's own `_meta`).
async fn get(url: &str, id: &str) -> Value {
    let mut got = post(url, "tasks/get", json!({"taskId": id}), None).await["result"].take();
    let obj = got.as_object_mut().unwrap();
    obj.remove("resultType");
    obj.remove("_meta");
    got
}

/// The messages of one SSE stream, as JSON, as they arrive.
struct Sse {
    events: futures::stream::BoxStream<'static, reqwest::Result<Vec<u8>>>,
    buffer: Vec<u8>,
}

impl Sse {
    async fn open(req: reqwest::RequestBuilder) -> Self {
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let content_type = resp.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(
            content_type.starts_with("text/event-stream"),
            "a listen is answered with a stream: {content_type}"
        );
        assert_eq!(resp.headers()["x-accel-buffering"], "no");
        Self {
            events: resp.bytes_stream().map(|c| c.map(|b| b.to_vec())).boxed(),
            buffer: Vec::new(),
        }
    }

    /// The next JSON-RPC message, or `None` when the stream ended.
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = find(&self.buffer, b"\n\n") {
                let event: Vec<u8> = self.buffer.drain(..end + 2).collect();
                let text = String::from_utf8(event).unwrap();
                let data: Vec<&str> = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                if data.is_empty() || data.iter().all(|d| d.is_empty()) {
                    continue; // a keep-alive comment, or a priming event
                }
                return Some(serde_json::from_str(&data.join("\n")).unwrap());
            }
            let chunk = tokio::time::timeout(Duration::from_secs(20), self.events.next())
                .await
                .expect("the stream says something within 20 s")?;
            self.buffer.extend_from_slice(&chunk.unwrap());
        }
    }

    async fn expect(&mut self) -> Value {
        self.next().await.expect("the stream is still open")
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Opens a listen stream `sub` on `params`, as `user`.
async fn listen(url: &str, sub: &Value, params: Value, user: Option<&str>) -> Sse {
    Sse::open(request(
        url,
        sub.clone(),
        "subscriptions/listen",
        params,
        true,
        user,
    ))
    .await
}

fn listen_params(ids: &[&str]) -> Value {
    json!({"notifications": {"taskIds": ids}})
}

/// Checks one `notifications/tasks` of subscription `sub` and returns the
/// task it carries (without `_meta`).
fn task_of(message: &Value, sub: &Value) -> Value {
    assert_eq!(message["method"], "notifications/tasks", "{message}");
    assert_eq!(
        message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        *sub
    );
    schemas().tasks("TaskStatusNotification", message);
    let mut task = message["params"].clone();
    task.as_object_mut().unwrap().remove("_meta");
    task
}

fn ack_ids(message: &Value, sub: &Value) -> Value {
    assert_eq!(
        message["method"], "notifications/subscriptions/acknowledged",
        "the acknowledgement comes first: {message}"
    );
    assert_eq!(
        message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        *sub
    );
    schemas().core("SubscriptionsAcknowledgedNotification", message);
    message["params"]["notifications"]["taskIds"].clone()
}

#[tokio::test]
async fn a_listener_hears_every_change_of_a_task_until_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _server) = serve(&dir, false).await;
    let id = create(&url, "v1", None).await;
    let sub = json!("listen-1");
    let unknown = "00000000000000000000000000000000";
    let mut sse = listen(&url, &sub, listen_params(&[&id, unknown, &id]), None).await;
    assert_eq!(
        ack_ids(&sse.expect().await, &sub),
        json!([id]),
        "the unknown id is left out and the repeated one named once"
    );

    // The state when the listen began, then each change.
    let mut seen = vec![task_of(&sse.expect().await, &sub)];
    while seen.last().unwrap()["status"] != "input_required" {
        seen.push(task_of(&sse.expect().await, &sub));
    }
    let parked = seen.last().unwrap().clone();
    assert_eq!(parked, get(&url, &id).await, "as tasks/get shows it");
    assert_eq!(parked["taskId"], json!(id));
    assert!(parked["inputRequests"]["go"].is_object(), "{parked}");

    let ack = post(
        &url,
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"go": {"action": "accept", "content": {"go": true}}}}),
        None,
    )
    .await;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    loop {
        let task = task_of(&sse.expect().await, &sub);
        assert_ne!(&task, seen.last().unwrap(), "only changes are sent");
        seen.push(task);
        if seen.last().unwrap()["status"] == "completed" {
            break;
        }
    }
    let done = seen.last().unwrap().clone();
    assert_eq!(done, get(&url, &id).await, "the terminal one too");
    // Nothing more can come: the stream ends, answered.
    let last = sse.expect().await;
    assert_eq!(last["id"], sub, "{last}");
    assert_eq!(last["result"]["resultType"], "complete");
    schemas().core("SubscriptionsListenResult", &last["result"]);
    assert!(sse.next().await.is_none());
    assert_eq!(
        done["result"]["content"][0]["text"],
        "release(v1): go = true"
    );
    let mut statuses: Vec<&str> = seen.iter().map(|t| t["status"].as_str().unwrap()).collect();
    // A claim moves `lastUpdatedAt`: the same status may come twice in a row.
    statuses.dedup();
    assert!(
        statuses.ends_with(&["input_required", "working", "completed"]),
        "every status change, in order: {statuses:?}"
    );
}

#[tokio::test]
async fn a_listen_without_the_tasks_extension_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _server) = serve(&dir, false).await;
    let id = create(&url, "v2", None).await;
    let resp = request(
        &url,
        json!(7),
        "subscriptions/listen",
        listen_params(&[&id]),
        false,
        None,
    )
    .send()
    .await
    .unwrap();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["id"], 7);
    assert_eq!(body["error"]["code"], -32021, "{body}");
    assert!(
        body["error"]["data"]["requiredCapabilities"]["extensions"]
            ["io.modelcontextprotocol/tasks"]
            .is_object(),
        "{body}"
    );
    schemas().core("JSONRPCErrorResponse", &body);
}

#[tokio::test]
async fn malformed_listen_params_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _server) = serve(&dir, false).await;
    for (params, names) in [
        (json!({"notifications": {"taskIds": "abc"}}), "taskIds"),
        (json!({"notifications": {"taskIds": [1]}}), "taskIds[0]"),
        (json!({"notifications": []}), "notifications"),
        (json!({}), "notifications"),
    ] {
        let body: Value = request(&url, json!(3), "subscriptions/listen", params, true, None)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(body["error"]["code"], -32602, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(names), "{message} names {names}");
    }
}

#[tokio::test]
async fn another_principals_tasks_are_never_confirmed() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _server) = serve(&dir, true).await;
    let alices = create(&url, "a", Some("alice")).await;
    let sub = json!(11);
    let mut bob = listen(&url, &sub, listen_params(&[&alices]), Some("bob")).await;
    assert_eq!(ack_ids(&bob.expect().await, &sub), json!([]));
    // A stream that follows no task has nothing to carry: it ends at once.
    let end = bob.expect().await;
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
    assert!(bob.next().await.is_none());
    let mut alice = listen(&url, &sub, listen_params(&[&alices]), Some("alice")).await;
    assert_eq!(ack_ids(&alice.expect().await, &sub), json!([alices]));
    assert_eq!(
        task_of(&alice.expect().await, &sub)["taskId"],
        json!(alices)
    );
    post(
        &url,
        "tasks/cancel",
        json!({"taskId": alices}),
        Some("alice"),
    )
    .await;
    loop {
        if task_of(&alice.expect().await, &sub)["status"] == "cancelled" {
            break;
        }
    }
}

#[tokio::test]
async fn a_graceful_end_answers_the_listen_request() {
    let dir = tempfile::tempdir().unwrap();
    let (url, server) = serve(&dir, false).await;
    let id = create(&url, "v3", None).await;
    let sub = json!("bye");
    let mut sse = listen(&url, &sub, listen_params(&[&id]), None).await;
    ack_ids(&sse.expect().await, &sub);
    task_of(&sse.expect().await, &sub);
    let closing = tokio::spawn({
        let server = server.clone();
        async move { server.close_listeners(Duration::from_secs(5)).await }
    });
    let mut last = sse.expect().await;
    while last.get("method").is_some() {
        last = sse.expect().await;
    }
    assert_eq!(last["id"], sub);
    assert_eq!(last["result"]["resultType"], "complete", "{last}");
    assert_eq!(
        last["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        sub
    );
    schemas().core("JSONRPCResultResponse", &last);
    schemas().core("SubscriptionsListenResult", &last["result"]);
    assert!(sse.next().await.is_none(), "then the stream ends");
    closing.await.unwrap();
    assert_eq!(server.open_listeners(), 0);
}

/// Opens and drops 1,000 listen streams on ten parked tasks; afterwards the
/// server holds no listener and watches no more tasks than before.
#[tokio::test]
async fn a_thousand_listeners_that_go_away_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let (url, server) = serve(&dir, false).await;
    let mut ids = Vec::new();
    for i in 0..10 {
        ids.push(create(&url, &format!("p{i}"), None).await);
    }
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    // Every task parked: no run of them is left to watch.
    for id in &ids {
        for _ in 0..200 {
            if get(&url, id).await["status"] == "input_required" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let engine = server.engine().clone();
    let before = engine.watched_tasks();
    let mut rss_warm = None;
    for i in 0..1000 {
        if i == 100 {
            rss_warm = rss_kib();
        }
        let sub = json!(i);
        let mut sse = Sse::open(request(
            &url,
            sub.clone(),
            "subscriptions/listen",
            listen_params(&refs),
            true,
            None,
        ))
        .await;
        let ack = sse.expect().await;
        assert_eq!(
            ack["params"]["notifications"]["taskIds"]
                .as_array()
                .unwrap()
                .len(),
            10
        );
        assert_eq!(sse.expect().await["method"], "notifications/tasks");
        drop(sse);
    }
    let mut settled = false;
    for _ in 0..1000 {
        if server.open_listeners() == 0 && engine.watched_tasks() == before {
            settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        settled,
        "listeners left: {}, tasks watched: {} (before: {before})",
        server.open_listeners(),
        engine.watched_tasks()
    );
    eprintln!(
        "1,000 listen/close cycles: {} listeners open, {} tasks watched after (before: {before}); \
         this test process's RSS {rss_warm:?} KiB after 100 cycles, {:?} KiB after 1,000",
        server.open_listeners(),
        engine.watched_tasks(),
        rss_kib()
    );
}

fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches(" kB")
        .parse()
        .ok()
}

/// Over stdio: the notifications share the connection with the answers,
/// and `notifications/cancelled` ends the stream without an answer.
#[test]
fn a_listener_over_stdio_hears_the_task_and_cancels_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = common::process::stdio_server(
        common::bin("conformance"),
        &dir.path().join("tasks.db"),
        Stdio::inherit(),
    );
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if let Ok(v) = serde_json::from_str(&line) {
                let _ = tx.send(v);
            }
        }
    });
    let mut send = |id: Value, method: &str, mut params: Value| {
        params["_meta"] = request::meta(true);
        let mut message = json!({"jsonrpc": "2.0", "method": method, "params": params});
        if !id.is_null() {
            message["id"] = id;
        }
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    };
    let next = || {
        lines
            .recv_timeout(Duration::from_secs(20))
            .expect("the server says something within 20 s")
    };

    send(
        json!(1),
        "tools/call",
        json!({"name": "confirm_delete", "arguments": {"filename": "x.txt"}}),
    );
    let created = next();
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    let sub = json!("listen-1");
    send(
        sub.clone(),
        "subscriptions/listen",
        listen_params(&[&id, "nope"]),
    );
    assert_eq!(ack_ids(&next(), &sub), json!([id]));
    let mut task = task_of(&next(), &sub);
    while task["status"] != "input_required" {
        task = task_of(&next(), &sub);
    }
    // A second listener, cancelled before the task changes.
    let other = json!("listen-2");
    send(other.clone(), "subscriptions/listen", listen_params(&[&id]));
    assert_eq!(ack_ids(&next(), &other), json!([id]));
    assert_eq!(task_of(&next(), &other)["status"], "input_required");
    send(
        Value::Null,
        "notifications/cancelled",
        json!({"requestId": "listen-2"}),
    );
    send(json!(2), "tasks/get", json!({"taskId": id}));
    assert_eq!(next()["id"], 2);
    send(
        json!(3),
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": true}}}}),
    );
    let mut seen = Vec::new();
    let end = loop {
        let message = next();
        if message["id"] == sub {
            break message;
        }
        seen.push(message);
    };
    // The task ended, so listen-1 ended too, answered.
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
    assert_eq!(
        end["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        sub
    );
    let statuses: Vec<Value> = seen
        .iter()
        .filter(|m| m.get("method").is_some())
        .map(|m| task_of(m, &sub)["status"].clone())
        .collect();
    assert_eq!(statuses.last(), Some(&json!("completed")), "{seen:?}");
    // The update's answer may come after the stream's end.
    if !seen.iter().any(|m| m["id"] == 3) {
        let answer = next();
        assert_eq!(answer["id"], 3, "the update was answered: {answer}");
        seen.push(answer);
    }
    assert!(
        seen.iter().all(|m| m["id"] != other),
        "no answer to the cancelled listen: {seen:?}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Two instances on one Postgres schema: a task that runs on B is heard by
/// a listener on A, through the store's change feed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_on_one_instance_hears_a_task_running_on_another() {
    let test = "a_listener_on_one_instance_hears_a_task_running_on_another";
    let Some((schema, [(a, _server_a), (b, _server_b)])) =
        two_on_postgres(test, "mcp_tasks_listen").await
    else {
        return;
    };
    heard_across(&a, &b).await;
    drop(schema);
}

/// Two processes on one SQLite file: a task that runs on B is heard by a
/// listener on A, through A's check for commits it did not make.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_hears_a_task_running_in_another_process_on_one_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let [(a, _server_a), (b, _server_b)] = two_on_one_file(&dir).await;
    heard_across(&a, &b).await;
}

/// A task created on instance B expires there (B's sweep purges it, as B
/// knows its deadline); a listener on instance A sees its stream end as a
/// listener on B would, and A's `tasks/get` no longer finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_purged_by_another_process_on_one_sqlite_file_ends_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let [(a, _server_a), (b, _server_b)] = two_on_one_file(&dir).await;
    expiry_heard_across(&a, &b).await;
}

/// As above, on one Postgres schema: B's purge is announced on the change
/// feed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_purged_by_another_instance_on_postgres_ends_the_stream() {
    let test = "an_expiry_purged_by_another_instance_on_postgres_ends_the_stream";
    let Some((schema, [(a, _server_a), (b, _server_b)])) =
        two_on_postgres(test, "mcp_tasks_purge").await
    else {
        return;
    };
    expiry_heard_across(&a, &b).await;
    drop(schema);
}

/// Two processes on one SQLite file, with leases far longer than the test
/// (renewed every 40 s): a task running on A is cancelled through B, and
/// A's run stops taking steps within seconds, from A's check for commits it
/// did not make, not at its next lease renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_through_another_process_stops_the_run_before_its_lease_renews() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    let leased = |store| Engine::builder(store).lease(Duration::from_secs(120));
    let (a, _server_a) = serve_engine(leased(SqliteStore::open(&path).await.unwrap()), false).await;
    let (b, _server_b) = serve_engine(leased(SqliteStore::open(&path).await.unwrap()), false).await;
    let created = post(
        &a,
        "tools/call",
        json!({"name": "ticker", "arguments": {}}),
        None,
    )
    .await;
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    let started = Instant::now();
    while TICKS.load(Ordering::SeqCst) < 3 {
        assert!(started.elapsed() < ACROSS, "the ticker runs on A");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cancelled = post(&b, "tasks/cancel", json!({"taskId": id}), None).await;
    assert!(cancelled.get("result").is_some(), "{cancelled}");
    // The run on A hears the request and ends the task cancelled.
    let asked = Instant::now();
    while get(&b, &id).await["status"] != "cancelled" {
        assert!(
            asked.elapsed() < Duration::from_secs(20),
            "the task still runs on A 20 s after the cancel request"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // And takes no more steps: none for a whole second (one every 50 ms
    // while it ran).
    let (mut last, mut since) = (TICKS.load(Ordering::SeqCst), Instant::now());
    while since.elapsed() < Duration::from_secs(1) {
        assert!(
            asked.elapsed() < Duration::from_secs(20),
            "A's run still takes steps 20 s after the cancel request ({last} steps)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = TICKS.load(Ordering::SeqCst);
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    assert_eq!(get(&a, &id).await["status"], "cancelled");
}

/// Two servers on one SQLite file in `dir`: two stores, each with its own
/// connections, as two processes have.
async fn two_on_one_file(dir: &tempfile::TempDir) -> [(String, TaskServer); 2] {
    let path = dir.path().join("tasks.db");
    [
        serve_on(SqliteStore::open(&path).await.unwrap(), false).await,
        serve_on(SqliteStore::open(&path).await.unwrap(), false).await,
    ]
}

/// Two servers on a new schema (named from `prefix`) of the test Postgres
/// server, with the schema (dropped when it is); `None` when there is no
/// server (see [`postgres_or_skip`]).
async fn two_on_postgres(
    test: &str,
    prefix: &str,
) -> Option<(
    mcp_tasks_runtime::store::testing::PostgresSchema,
    [(String, TaskServer); 2],
)> {
    let url = postgres_or_skip(test).await?;
    let schema = mcp_tasks_runtime::store::testing::PostgresSchema::new(&url, prefix);
    let store = || {
        mcp_tasks_runtime::store::PostgresStore::builder(schema.url())
            .schema(schema.name())
            .connect()
    };
    let servers = [
        serve_on(store().await.unwrap(), false).await,
        serve_on(store().await.unwrap(), false).await,
    ];
    Some((schema, servers))
}

/// Within this long, a listener on one instance hears what another did.
const ACROSS: Duration = Duration::from_secs(30);

/// A `release` task created and answered on `b`, followed by a listener on
/// `a` from its question to its end.
async fn heard_across(a: &str, b: &str) {
    let id = create(b, "fleet", None).await;
    let sub = json!("on-a");
    let mut sse = listen(a, &sub, listen_params(&[&id]), None).await;
    assert_eq!(ack_ids(&sse.expect().await, &sub), json!([id]));
    let mut task = task_of(&sse.expect().await, &sub);
    let asked = async {
        while task["status"] != "input_required" {
            task = task_of(&sse.expect().await, &sub);
        }
    };
    tokio::time::timeout(ACROSS, asked)
        .await
        .expect("the listener on A hears B's task ask its question");
    post(
        b,
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"go": {"action": "accept", "content": {"go": false}}}}),
        None,
    )
    .await;
    let ended = async {
        while task["status"] != "completed" {
            task = task_of(&sse.expect().await, &sub);
        }
    };
    tokio::time::timeout(ACROSS, ended)
        .await
        .expect("the listener on A hears B's task end");
    assert_eq!(
        task["result"]["content"][0]["text"],
        "release(fleet): go = false"
    );
    assert_eq!(task, get(a, &id).await);
}

/// A `fleeting` task created on `b` (a second to live), followed by a
/// listener on `a` until `b` purges it.
async fn expiry_heard_across(a: &str, b: &str) {
    let created = post(
        b,
        "tools/call",
        json!({"name": "fleeting", "arguments": {}}),
        None,
    )
    .await;
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    let sub = json!("far");
    let mut sse = listen(a, &sub, listen_params(&[&id]), None).await;
    assert_eq!(ack_ids(&sse.expect().await, &sub), json!([id]));
    let end = async {
        loop {
            let message = sse.expect().await;
            if message.get("method").is_none() {
                break message;
            }
            assert_eq!(task_of(&message, &sub)["status"], "working", "{message}");
        }
    };
    let end = tokio::time::timeout(ACROSS, end)
        .await
        .expect("the stream on A ends once B has purged the task");
    assert_eq!(end["id"], sub, "no notification after the expiry: {end}");
    assert_eq!(end["result"]["resultType"], "complete");
    let gone = post(a, "tasks/get", json!({"taskId": id}), None).await;
    assert_eq!(gone["error"]["code"], -32602, "{gone}");
}

/// The `TaskClient` follows a task by push: after the answer, the end
/// arrives on the listen stream, well before the next poll the server asks
/// for (30 s), with one listen request and few `tasks/get`. With push off,
/// the same call waits for that poll.
#[tokio::test]
async fn the_task_client_follows_a_task_by_push() {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("tasks.db"))
        .await
        .unwrap();
    let engine = Engine::builder(store)
        .registry(registry())
        .start()
        .await
        .unwrap();
    let server = TaskServer::builder(engine).build();
    let (gets, listens) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let counted = {
        let (gets, listens) = (gets.clone(), listens.clone());
        axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let method = req
                    .headers()
                    .get("mcp-method")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                match method.as_str() {
                    "tasks/get" => gets.fetch_add(1, Ordering::SeqCst),
                    "subscriptions/listen" => listens.fetch_add(1, Ordering::SeqCst),
                    _ => 0,
                };
                next.run(req)
            },
        )
    };
    let app = mcp_tasks_runtime::mcp::router(server).layer(counted);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let connect = |push: bool| {
        mcp_tasks_client::TaskClient::http(url.clone())
            .push(push)
            .on_form::<Release, _>(|_| Some(Release { go: true }))
            .connect()
    };
    let client = connect(true).await.unwrap();
    let said: String = tokio::time::timeout(
        Duration::from_secs(20),
        client.call("release", json!({"name": "pushed"})),
    )
    .await
    .expect("the end arrives by push, before the 30 s poll")
    .unwrap();
    assert_eq!(said, "release(pushed): go = true");
    assert_eq!(listens.load(Ordering::SeqCst), 1, "one listen request");
    let gets = gets.load(Ordering::SeqCst);
    assert!(
        gets <= 3,
        "{gets} tasks/get: at the start and after the answer"
    );

    // The same call, polling: its end waits for the poll.
    let polling = connect(false).await.unwrap();
    let waited = tokio::time::timeout(
        Duration::from_secs(5),
        polling.call::<String>("release", json!({"name": "polled"})),
    )
    .await;
    assert!(
        waited.is_err(),
        "without push, the end waits for the 30 s poll"
    );
    assert_eq!(listens.load(Ordering::SeqCst), 1, "no listen without push");
}

/// A task whose time to live runs out is gone: a `tasks/get` says "not
/// found", so no notification claims otherwise; the stream, with nothing
/// left to follow, ends answered.
#[tokio::test]
async fn an_expired_task_ends_its_stream_without_a_notification() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _server) = serve(&dir, false).await;
    let created = post(
        &url,
        "tools/call",
        json!({"name": "fleeting", "arguments": {}}),
        None,
    )
    .await;
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    let sub = json!("short");
    let mut sse = listen(&url, &sub, listen_params(&[&id]), None).await;
    assert_eq!(ack_ids(&sse.expect().await, &sub), json!([id]));
    let end = loop {
        let message = sse.expect().await;
        if message.get("method").is_none() {
            break message;
        }
        // The run claims the task and goes to sleep; it is never said to
        // have failed.
        assert_eq!(task_of(&message, &sub)["status"], "working", "{message}");
    };
    assert_eq!(end["id"], sub, "no notification after the expiry: {end}");
    assert_eq!(end["result"]["resultType"], "complete");
    let gone = post(&url, "tasks/get", json!({"taskId": id}), None).await;
    assert_eq!(gone["error"]["code"], -32602, "{gone}");
}

/// A server whose listens are capped at 2 per principal and 2 per task.
async fn capped_server(principal: bool) -> (tempfile::TempDir, String, TaskServer) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("tasks.db"))
        .await
        .unwrap();
    let mut limits = mcp_tasks_runtime::engine::Limits::default();
    limits.max_listens_per_principal = 2;
    limits.max_listens_per_task = 2;
    let (url, server) = serve_engine(Engine::builder(store).limits(limits), principal).await;
    (dir, url, server)
}

/// A listen the server refuses, as `user`.
async fn refused_listen(url: &str, sub: Value, ids: &[&str], user: Option<&str>) -> Value {
    let mut req = request(
        url,
        sub,
        "subscriptions/listen",
        listen_params(ids),
        true,
        user,
    );
    req = req.timeout(Duration::from_secs(20));
    let refused: Value = req.send().await.unwrap().json().await.unwrap();
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    schemas().core("JSONRPCErrorResponse", &refused);
    refused
}

/// Waits until the server holds fewer than `n` open listens.
async fn until_fewer_listeners(server: &TaskServer, n: usize) {
    for _ in 0..200 {
        if server.open_listeners() < n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("a closed stream gives its place back");
}

/// Without a principal, listens count per task: a client holding the cap
/// on its task does not lock another client (from the same address, as on
/// loopback) out of its own task. One more on the full task is refused
/// naming the limit and the task, as is a listen naming it among others;
/// closing one makes room.
#[tokio::test]
async fn anonymous_listens_are_capped_per_task_so_one_client_cannot_lock_out_another() {
    let (_dir, url, server) = capped_server(false).await;
    let mine = create(&url, "mine", None).await;
    let theirs = create(&url, "theirs", None).await;

    let first = listen(&url, &json!(1), listen_params(&[&mine]), None).await;
    let _second = listen(&url, &json!(2), listen_params(&[&mine]), None).await;
    let refused = refused_listen(&url, json!(3), &[&mine], None).await;
    assert_eq!(refused["error"]["data"]["limit"], "max_listens_per_task");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains(&mine), "names the task: {message}");

    // Another client, on its own task: served.
    let mut other = listen(&url, &json!(4), listen_params(&[&theirs]), None).await;
    assert_eq!(ack_ids(&other.expect().await, &json!(4)), json!([theirs]));
    assert_eq!(task_of(&other.expect().await, &json!(4))["taskId"], theirs);
    // Naming the full task among others is refused whole, and takes no place.
    let refused = refused_listen(&url, json!(5), &[&theirs, &mine], None).await;
    assert_eq!(refused["error"]["data"]["limit"], "max_listens_per_task");
    let mut again = listen(&url, &json!(6), listen_params(&[&theirs]), None).await;
    assert_eq!(ack_ids(&again.expect().await, &json!(6)), json!([theirs]));

    drop(first);
    until_fewer_listeners(&server, 4).await;
    let mut third = listen(&url, &json!(7), listen_params(&[&mine]), None).await;
    assert_eq!(ack_ids(&third.expect().await, &json!(7)), json!([mine]));
}

/// With a principal, a caller holds at most `max_listens_per_principal`
/// open streams, whatever tasks they follow; another principal is still
/// served.
#[tokio::test]
async fn listens_with_a_principal_are_capped_per_principal() {
    let (_dir, url, server) = capped_server(true).await;
    let a = create(&url, "a", Some("alice")).await;
    let b = create(&url, "b", Some("alice")).await;
    let c = create(&url, "c", Some("carol")).await;

    let first = listen(&url, &json!(1), listen_params(&[&a]), Some("alice")).await;
    let _second = listen(&url, &json!(2), listen_params(&[&b]), Some("alice")).await;
    let refused = refused_listen(&url, json!(3), &[&b], Some("alice")).await;
    assert_eq!(
        refused["error"]["data"]["limit"],
        "max_listens_per_principal"
    );
    let mut carol = listen(&url, &json!(4), listen_params(&[&c]), Some("carol")).await;
    assert_eq!(ack_ids(&carol.expect().await, &json!(4)), json!([c]));

    drop(first);
    until_fewer_listeners(&server, 3).await;
    let mut third = listen(&url, &json!(5), listen_params(&[&a]), Some("alice")).await;
    assert_eq!(ack_ids(&third.expect().await, &json!(5)), json!([a]));
}

/// Forwards every call to a SQLite store, and keeps the ids each task
/// read (`get`, `versions`) asked for.
#[derive(Debug)]
struct Counting {
    inner: std::sync::Arc<SqliteStore>,
    /// For each read: the ids it asked for.
    reads: std::sync::Mutex<Vec<Vec<String>>>,
}

impl Counting {
    fn read(&self, ids: &[String]) {
        self.reads.lock().unwrap().push(ids.to_vec());
    }

    /// The reads that asked for any of `ids`.
    fn reads_of(&self, ids: &[String]) -> usize {
        self.reads
            .lock()
            .unwrap()
            .iter()
            .filter(|read| read.iter().any(|id| ids.contains(id)))
            .count()
    }
}

#[async_trait::async_trait]
impl Forward for Counting {
    type Inner = SqliteStore;
    fn inner(&self) -> &std::sync::Arc<SqliteStore> {
        &self.inner
    }
    async fn get(&self, id: &str) -> Result<Option<TaskRecord>> {
        self.read(&[id.to_owned()]);
        self.inner.get(id).await
    }
    async fn versions(&self, ids: &[String]) -> Result<Vec<(String, u64)>> {
        self.read(ids);
        self.inner.versions(ids).await
    }
    async fn unfinished_among(&self, ids: &[String]) -> Result<Vec<String>> {
        self.read(ids);
        self.inner.unfinished_among(ids).await
    }
}

/// A listen naming 1,024 ids the store does not hold reads them in one
/// store query, confirms none, and ends; a known id among them is followed.
#[tokio::test]
async fn a_listen_naming_many_unknown_ids_reads_the_store_once() {
    let dir = tempfile::tempdir().unwrap();
    let counting = std::sync::Arc::new(Forwarded(Counting {
        inner: std::sync::Arc::new(
            SqliteStore::open(dir.path().join("tasks.db"))
                .await
                .unwrap(),
        ),
        reads: std::sync::Mutex::default(),
    }));
    let (url, _server) = serve_engine(Engine::builder_arc(counting.clone()), false).await;
    let unknown: Vec<String> = (0..mcp_tasks_runtime::mcp::MAX_LISTEN_IDS)
        .map(|i| format!("{i:032x}"))
        .collect();
    let named: Vec<&str> = unknown.iter().map(String::as_str).collect();

    let sub = json!("many");
    let mut sse = listen(&url, &sub, listen_params(&named), None).await;
    assert_eq!(ack_ids(&sse.expect().await, &sub), json!([]));
    let end = sse.expect().await;
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
    assert_eq!(
        counting.0.reads_of(&unknown),
        1,
        "one store query for the ids named"
    );

    // With one known id among the unknown: that one is followed.
    let known = create(&url, "known", None).await;
    let mut named = named[1..].to_vec();
    named.push(&known);
    let sub = json!("some");
    let mut sse = listen(&url, &sub, listen_params(&named), None).await;
    assert_eq!(ack_ids(&sse.expect().await, &sub), json!([known]));
    assert_eq!(task_of(&sse.expect().await, &sub)["taskId"], known);
    assert_eq!(counting.0.reads_of(&unknown), 2);
}
