//! The engine's tools replaced while it serves (`Engine::set_registry`):
//! clients hear of it and list the new tools, a 2026-07-28 client on its
//! `subscriptions/listen` stream (read raw, each message validated against
//! the official schema, and through rmcp's client), a 2025-11-25 session
//! with `notifications/tools/list_changed`; a task of a tool that is gone
//! fails, naming it, when it must run again. Servers run in this process
//! on 127.0.0.1 on a SQLite file.

mod common;

use std::time::{Duration, Instant};

use common::{Client, request, schemas, session::Sse};
use mcp_tasks_runtime::{
    Elicit, Engine, ToolError, ask_user,
    engine::Limits,
    mcp::{self, TaskServer},
    store::SqliteStore,
    task_tool,
    tool::Registry,
};
use rmcp::{
    ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient,
    model::{
        ClientConfig, Implementation, ProtocolVersion, ServerNotification, SubscriptionFilter,
    },
    service::{NotificationContext, RunningService},
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The answer to the release question.
#[derive(Deserialize, Serialize, JsonSchema, Elicit)]
struct Release {
    /// Whether to release.
    go: bool,
}

/// Asks whether to release.
#[task_tool(task = required)]
async fn release(
    /// What to release.
    name: String,
) -> Result<String, ToolError> {
    let answer: Release = ask_user(format!("Release {name}?")).key("go").await?;
    Ok(format!("release({name}): go = {}", answer.go))
}

/// Says hello.
#[task_tool]
async fn hello() -> String {
    "hello".into()
}

/// Says goodbye.
#[task_tool]
async fn goodbye() -> String {
    "goodbye".into()
}

/// The tools the server starts with.
fn before() -> Registry {
    Registry::new()
        .with(release_tool())
        .unwrap()
        .with(hello_tool())
        .unwrap()
}

/// The tools it serves after the change: `release` and `hello` are gone.
fn after() -> Registry {
    Registry::new().with(goodbye_tool()).unwrap()
}

/// A server of [`before`] on a SQLite file in `dir`: its URL, and the
/// server (for its engine).
async fn serve(dir: &tempfile::TempDir) -> (String, TaskServer) {
    serve_with(dir, Limits::default()).await
}

/// [`serve`] with `limits`.
async fn serve_with(dir: &tempfile::TempDir, limits: Limits) -> (String, TaskServer) {
    let store = SqliteStore::open(dir.path().join("tasks.db"))
        .await
        .unwrap();
    let engine = Engine::builder(store)
        .registry(before())
        .limits(limits)
        .start()
        .await
        .unwrap();
    let server = TaskServer::builder(engine).build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(mcp::serve(listener, server.clone()).into_future());
    (url, server)
}

fn http() -> &'static reqwest::Client {
    static HTTP: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    HTTP.get_or_init(reqwest::Client::new)
}

/// `method` with `params` (and a 2026-07-28 `_meta` declaring the tasks
/// extension), as a 2026-07-28 client posts it.
fn post(url: &str, id: Value, method: &str, mut params: Value) -> reqwest::RequestBuilder {
    params["_meta"] = request::meta(true);
    let name = request::name_of(&params).map(str::to_owned);
    request::post(http(), url, id, method, &params, name.as_deref())
}

/// The names `tools/list` shows, over raw HTTP.
async fn listed(url: &str) -> Vec<String> {
    let (status, body) =
        request::json_reply(post(url, json!("list"), "tools/list", json!({}))).await;
    assert_eq!(status, 200, "{body}");
    body["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("a list of tools: {body}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The next message on `stream`, within 20 s (keep-alive comments do not
/// count), waiting `why`.
async fn next(stream: &mut Sse, why: &str) -> Value {
    tokio::time::timeout(Duration::from_secs(20), stream.next(why))
        .await
        .unwrap_or_else(|_| panic!("nothing came within 20 s, waiting {why}"))
}

#[tokio::test]
async fn a_listener_hears_that_the_tools_changed_and_lists_the_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (url, server) = serve(&dir).await;

    let (_, discovered) =
        request::json_reply(post(&url, json!(1), "server/discover", json!({}))).await;
    schemas().core("DiscoverResult", &discovered["result"]);
    assert_eq!(
        discovered["result"]["capabilities"]["tools"]["listChanged"], true,
        "{discovered}"
    );
    assert_eq!(listed(&url).await, ["hello", "release"]);

    // Prompts are not served here: asked for, they are left out of the
    // acknowledgement.
    let sub = json!("tools-1");
    let filter = json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true}});
    let resp = post(&url, sub.clone(), "subscriptions/listen", filter)
        .send()
        .await
        .unwrap();
    let mut stream = Sse::new(resp);
    let ack = next(&mut stream, "for the acknowledgement").await;
    schemas().core("SubscriptionsAcknowledgedNotification", &ack);
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true}),
        "{ack}"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        sub
    );

    server.engine().set_registry(after()).unwrap();
    let heard = next(&mut stream, "for the tool list to change").await;
    schemas().core("ToolListChangedNotification", &heard);
    assert_eq!(heard["method"], "notifications/tools/list_changed");
    assert_eq!(
        heard["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        sub
    );
    assert_eq!(listed(&url).await, ["goodbye"]);

    // The stream stays open for the next change.
    server.engine().set_registry(before()).unwrap();
    let heard = next(&mut stream, "for the second change").await;
    assert_eq!(heard["method"], "notifications/tools/list_changed");
    assert_eq!(listed(&url).await, ["hello", "release"]);
}

#[tokio::test]
async fn tool_list_listens_without_a_principal_are_capped_per_address() {
    let dir = tempfile::tempdir().unwrap();
    let mut limits = Limits::default();
    limits.max_listens_per_principal = 2;
    let (url, _server) = serve_with(&dir, limits).await;
    let filter = json!({"notifications": {"toolsListChanged": true}});

    let (_, malformed) = request::json_reply(post(
        &url,
        json!("bad"),
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": "yes"}}),
    ))
    .await;
    assert_eq!(malformed["error"]["code"], -32602, "{malformed}");
    assert!(
        malformed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("toolsListChanged"),
        "{malformed}"
    );

    let mut open = Vec::new();
    for i in 0..2 {
        let resp = post(&url, json!(i), "subscriptions/listen", filter.clone())
            .send()
            .await
            .unwrap();
        let mut stream = Sse::new(resp);
        let ack = next(&mut stream, "for the acknowledgement").await;
        assert_eq!(ack["params"]["notifications"]["toolsListChanged"], true);
        open.push(stream);
    }
    let third = post(&url, json!(3), "subscriptions/listen", filter.clone());
    let (_, refused) = tokio::time::timeout(Duration::from_secs(20), request::json_reply(third))
        .await
        .expect("a third listen is refused, not opened");
    schemas().core("JSONRPCErrorResponse", &refused);
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    assert_eq!(
        refused["error"]["data"]["limit"], "max_listens_per_principal",
        "{refused}"
    );

    // One closed makes room.
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let resp = post(&url, json!(4), "subscriptions/listen", filter.clone())
            .send()
            .await
            .unwrap();
        if resp
            .headers()
            .get("content-type")
            .is_some_and(|t| t.to_str().unwrap().starts_with("text/event-stream"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the closed stream was never let go"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_rmcp_client_listening_hears_that_the_tools_changed() {
    let dir = tempfile::tempdir().unwrap();
    let (url, server) = serve(&dir).await;
    let client = common::http_client(&url, false).await;
    let mut subscription = client
        .peer()
        .listen(SubscriptionFilter::builder().tools_list_changed().build())
        .await
        .expect("the listen is acknowledged");
    assert_eq!(
        subscription.acknowledged().tools_list_changed,
        Some(true),
        "{:?}",
        subscription.acknowledged()
    );

    server.engine().set_registry(after()).unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(20), subscription.next())
        .await
        .expect("a notification within 20 s")
        .expect("a well-formed notification")
        .expect("the subscription is open");
    assert!(
        matches!(heard, ServerNotification::ToolListChangedNotification(_)),
        "{heard:?}"
    );
    let names: Vec<String> = client
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(names, ["goodbye"]);
}

/// A 2025-11-25 client that counts `notifications/tools/list_changed`.
#[derive(Clone)]
struct Heard(tokio::sync::mpsc::UnboundedSender<()>);

impl ClientHandler for Heard {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            common::capabilities(false),
            Implementation::new("e2e", "1.0.0"),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.0.send(());
    }
}

#[tokio::test]
async fn a_2025_session_hears_that_the_tools_changed_and_lists_the_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (url, server) = serve(&dir).await;
    let (heard, mut hearing) = tokio::sync::mpsc::unbounded_channel();
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.clone()),
    );
    let client: RunningService<RoleClient, Heard> = Heard(heard)
        .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
        .await
        .expect("the session opens");
    let info = client.peer().peer_info().expect("initialized");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2025_11_25);
    assert_eq!(
        info.capabilities
            .tools
            .as_ref()
            .and_then(|t| t.list_changed),
        Some(true),
        "{info:?}"
    );

    // The client opens its GET stream, where the notification goes, after
    // the session opened: until it has, a change is lost to it. So the
    // tools go back and forth until it hears, and end as `after`.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        server.engine().set_registry(before()).unwrap();
        server.engine().set_registry(after()).unwrap();
        if tokio::time::timeout(Duration::from_millis(250), hearing.recv())
            .await
            .is_ok()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no notifications/tools/list_changed within 20 s"
        );
    }
    let names: Vec<String> = client
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(names, ["goodbye"]);
}

/// Polls `tasks/get` over raw HTTP until task `id` has ended: the result.
async fn ended(url: &str, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, reply) =
            request::json_reply(post(url, json!("get"), "tasks/get", json!({"taskId": id}))).await;
        let status = reply["result"]["status"].as_str().unwrap_or_default();
        if ["completed", "failed", "cancelled"].contains(&status) {
            return reply["result"].clone();
        }
        assert!(Instant::now() < deadline, "task {id} never ended: {reply}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_task_of_a_removed_tool_fails_naming_it_when_answered() {
    let dir = tempfile::tempdir().unwrap();
    let (url, server) = serve(&dir).await;
    let client: Client = common::http_client(&url, true).await;
    let id = common::task_id(
        client
            .call_tool_once(common::call("release", json!({"name": "v1"})))
            .await
            .unwrap(),
    );
    common::poll_until(&client, &id, |t| {
        t.status() == rmcp::model::TaskStatus::InputRequired
    })
    .await;

    server.engine().set_registry(after()).unwrap();
    // Nothing fails before the task must run again.
    let (_, parked) =
        request::json_reply(post(&url, json!("get"), "tasks/get", json!({"taskId": id}))).await;
    assert_eq!(parked["result"]["status"], "input_required", "{parked}");

    common::update(
        &client,
        &id,
        json!({"go": {"action": "accept", "content": {"go": true}}}),
    )
    .await;
    let failed = ended(&url, &id).await;
    schemas().tasks("GetTaskResult", &failed);
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["error"]["code"], -32603, "{failed}");
    assert_eq!(
        failed["error"]["message"], "tool `release` is no longer registered on this server",
        "{failed}"
    );

    // A new call of the removed tool is refused as a tool never served is.
    let refusal = |name: &str| {
        let params = json!({"name": name, "arguments": {"name": "v2"}});
        request::json_reply(post(&url, json!("call"), "tools/call", params))
    };
    let (_, removed) = refusal("release").await;
    let (_, never) = refusal("never_served").await;
    schemas().core("JSONRPCErrorResponse", &removed);
    assert_eq!(
        removed["error"]["code"], never["error"]["code"],
        "{removed}"
    );
    assert_eq!(removed["error"]["code"], -32602, "{removed}");
    assert_eq!(removed["error"]["message"], "unknown tool `release`");
}
