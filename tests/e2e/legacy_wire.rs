//! MCP 2025-11-25 clients on the wire, in-process over HTTP on 127.0.0.1:
//! `initialize` and sessions, plain calls of task tools, and that revision's
//! experimental tasks (SEP-1686), every answer checked against the official
//! 2025-11-25 schema.

mod common;

use std::{collections::HashMap, sync::Mutex, time::Duration};

use common::{
    schemas,
    session::{Sse, answer},
};
use mcp_tasks_runtime::{
    Engine, ToolError, checkpoint, confirm,
    durable::{self, Either},
    mcp::{self, TaskServer},
    question::AskError,
    store::MemoryStore,
    task_tool,
    tool::Registry,
};
use serde_json::{Value, json};

/// How many times `nap`'s work ran, by tag.
static NAPS: Mutex<Option<HashMap<String, usize>>> = Mutex::new(None);

fn naps(tag: &str) -> usize {
    let naps = NAPS.lock().unwrap();
    naps.as_ref().and_then(|n| n.get(tag)).copied().unwrap_or(0)
}

/// Counts its work once (journaled), then sleeps durably.
#[task_tool]
async fn nap(
    /// How long, in milliseconds.
    ms: u64,
    /// Told apart in the result.
    tag: String,
) -> Result<String, ToolError> {
    checkpoint("count", || async {
        let mut naps = NAPS.lock().unwrap();
        *naps
            .get_or_insert_with(HashMap::new)
            .entry(tag.clone())
            .or_default() += 1;
        Ok::<_, ToolError>(())
    })
    .await?;
    durable::status(format!("napping {ms} ms"));
    durable::sleep(Duration::from_millis(ms)).await;
    Ok(format!("{tag} rested {ms} ms"))
}

/// Asks before going on.
#[task_tool]
async fn ask() -> Result<String, ToolError> {
    let yes = confirm("Go on?").await?;
    Ok(format!("answered {yes}"))
}

/// `ask`, round by round in the call (never a task).
#[task_tool(task = forbidden)]
async fn ask_inline() -> Result<String, ToolError> {
    let yes = confirm("Go on?").await?;
    Ok(format!("answered {yes}"))
}

/// Asks with a deadline of 300 ms; says whether it was answered in time.
async fn ask_briefly() -> Result<String, ToolError> {
    match confirm("Go on?").timeout(Duration::from_millis(300)).await {
        Ok(yes) => Ok(format!("answered {yes}")),
        Err(AskError::TimedOut) => Ok("timed out".into()),
        Err(e) => Err(ToolError::new(e.to_string())),
    }
}

/// Two questions raced: the first answer wins.
#[task_tool]
async fn either() -> Result<String, ToolError> {
    match durable::select(confirm("A?").key("a"), confirm("B?").key("b")).await {
        Either::Left(a) => Ok(format!("a {}", a?)),
        Either::Right(b) => Ok(format!("b {}", b?)),
    }
}

/// `ask_briefly` as a task.
#[task_tool]
async fn brief() -> Result<String, ToolError> {
    ask_briefly().await
}

/// `ask_briefly`, inline.
#[task_tool(task = forbidden)]
async fn brief_inline() -> Result<String, ToolError> {
    ask_briefly().await
}

/// Only runs as a task.
#[task_tool(task = required)]
async fn only_task() -> &'static str {
    "done"
}

/// Never runs as a task.
#[task_tool(task = forbidden)]
async fn never_task() -> &'static str {
    "inline"
}

/// A server with these tools; with `users`, tasks are bound to the `x-user`
/// header's principal.
async fn serve(users: bool) -> String {
    let registry = Registry::new()
        .with(nap_tool())
        .and_then(|r| r.with(ask_tool()))
        .and_then(|r| r.with(only_task_tool()))
        .and_then(|r| r.with(never_task_tool()))
        .and_then(|r| r.with(brief_tool()))
        .and_then(|r| r.with(brief_inline_tool()))
        .and_then(|r| r.with(ask_inline_tool()))
        .and_then(|r| r.with(either_tool()))
        .unwrap();
    let engine = Engine::builder(MemoryStore::new())
        .registry(registry)
        .start()
        .await
        .unwrap();
    let mut builder = TaskServer::builder(engine);
    if users {
        builder = builder.principal(|parts: &axum::http::request::Parts| {
            let user = parts.headers.get("x-user")?.to_str().ok()?;
            Some(user.to_owned())
        });
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(mcp::serve(listener, builder.build()).into_future());
    url
}

/// A 2025-11-25 client session, spoken raw.
struct Session {
    http: reqwest::Client,
    url: String,
    id: String,
    user: Option<String>,
    initialize: Value,
}

impl Session {
    async fn open(url: &str, user: Option<&str>) -> Self {
        let http = reqwest::Client::new();
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {}, "tasks": {"requests": {"elicitation": {"create": {}}}}},
            "clientInfo": {"name": "raw", "version": "1"},
        }});
        let mut req = http
            .post(url)
            .header("Accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(u) = user {
            req = req.header("x-user", u);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let id = resp.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let initialize = answer(&resp.text().await.unwrap(), 0);
        let session = Self {
            http,
            url: url.to_owned(),
            id,
            user: user.map(str::to_owned),
            initialize,
        };
        let status = session
            .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await
            .status();
        assert_eq!(status, 202);
        session
    }

    async fn post(&self, body: Value) -> reqwest::Response {
        self.builder(body).send().await.unwrap()
    }

    /// Starts a request whose answer is awaited elsewhere; yields its body.
    fn start(&self, body: Value) -> tokio::task::JoinHandle<String> {
        let req = self.builder(body);
        tokio::spawn(async move { req.send().await.unwrap().text().await.unwrap_or_default() })
    }

    fn builder(&self, body: Value) -> reqwest::RequestBuilder {
        let mut req = self
            .http
            .post(&self.url)
            .header("Accept", "application/json, text/event-stream")
            .header("Mcp-Session-Id", &self.id)
            .header("MCP-Protocol-Version", "2025-11-25")
            .json(&body);
        if let Some(u) = &self.user {
            req = req.header("x-user", u);
        }
        req
    }

    /// Sends request `id` and returns its JSON-RPC answer (`result` or `error`).
    async fn request(&self, id: u64, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let text = self.post(body).await.text().await.unwrap();
        answer(&text, id)
    }

    async fn result(&self, method: &str, params: Value) -> Value {
        let answer = self.request(1, method, params).await;
        answer
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("{method} failed: {answer:#}"))
    }

    async fn error(&self, method: &str, params: Value) -> Value {
        let answer = self.request(1, method, params).await;
        answer
            .get("error")
            .cloned()
            .unwrap_or_else(|| panic!("{method} did not fail: {answer:#}"))
    }

    /// Opens the session's own stream (where requests withdrawn outside any
    /// call go) and gathers what comes on it, until the reader is aborted.
    async fn listen(&self) -> (std::sync::Arc<Mutex<String>>, tokio::task::JoinHandle<()>) {
        let mut stream = self
            .http
            .get(&self.url)
            .header("Accept", "text/event-stream")
            .header("Mcp-Session-Id", &self.id)
            .header("MCP-Protocol-Version", "2025-11-25")
            .send()
            .await
            .unwrap();
        assert_eq!(stream.status(), 200);
        let seen = std::sync::Arc::new(Mutex::new(String::new()));
        let reader = {
            let seen = seen.clone();
            tokio::spawn(async move {
                while let Ok(Some(chunk)) = stream.chunk().await {
                    seen.lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&chunk));
                }
            })
        };
        (seen, reader)
    }

    /// Ends the session (`DELETE`, as its user: a session belongs to the
    /// principal that opened it).
    async fn close(&self) {
        let mut req = self
            .http
            .delete(&self.url)
            .header("Mcp-Session-Id", &self.id)
            .header("MCP-Protocol-Version", "2025-11-25");
        if let Some(u) = &self.user {
            req = req.header("x-user", u);
        }
        req.send().await.unwrap();
    }
}

/// Waits up to five seconds for what a session's stream gathered (see
/// `Session::listen`) to satisfy `found`; fails with `missing` and the text.
async fn until_seen(seen: &Mutex<String>, missing: &str, found: impl Fn(&str) -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !found(&seen.lock().unwrap()) {
        assert!(
            std::time::Instant::now() < deadline,
            "{missing}: {}",
            seen.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `tasks/get` until the task is terminal.
async fn until_terminal(s: &Session, id: &str) -> Value {
    for _ in 0..400 {
        let t = s.result("tasks/get", json!({"taskId": id})).await;
        if ["completed", "failed", "cancelled"].contains(&t["status"].as_str().unwrap()) {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("task {id} did not finish");
}

#[tokio::test]
async fn initialize_offers_the_legacy_tasks_and_discover_agrees_on_versions() {
    let url = serve(false).await;
    let s = Session::open(&url, None).await;
    let init = &s.initialize["result"];
    schemas().legacy("InitializeResult", init);
    assert_eq!(init["protocolVersion"], "2025-11-25");
    let tasks = &init["capabilities"]["tasks"];
    assert_eq!(tasks["requests"]["tools"]["call"], json!({}));
    assert_eq!(tasks["cancel"], json!({}));
    assert!(
        tasks.get("list").is_none(),
        "no tasks/list without an identified requestor"
    );
    assert!(
        init["capabilities"].get("extensions").is_none(),
        "the 2026 tasks extension is not offered to a 2025-11-25 session: {init:#}"
    );

    // A 2026-07-28 `server/discover` lists the same versions `initialize`
    // negotiates, plus 2026-07-28.
    let discover = reqwest::Client::new()
        .post(&url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "server/discover")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }}}),
        )
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let versions = discover["result"]["supportedVersions"].clone();
    for v in [
        "2024-11-05",
        "2025-03-26",
        "2025-06-18",
        "2025-11-25",
        "2026-07-28",
    ] {
        assert!(
            versions.as_array().unwrap().contains(&json!(v)),
            "{v} missing from {discover:#}"
        );
    }
}

#[tokio::test]
async fn tools_list_shows_each_task_tools_task_support() {
    let url = serve(false).await;
    let s = Session::open(&url, None).await;
    let list = s.result("tools/list", json!({})).await;
    schemas().legacy("ListToolsResult", &list);
    let support = |name: &str| {
        let tool = list["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no tool {name}"));
        tool.pointer("/execution/taskSupport").cloned()
    };
    assert_eq!(support("nap"), Some(json!("optional")));
    assert_eq!(support("only_task"), Some(json!("required")));
    assert_eq!(support("never_task"), None, "forbidden is the default");
}

#[tokio::test]
async fn a_task_augmented_call_runs_as_a_task_to_its_result() {
    let url = serve(false).await;
    let s = Session::open(&url, None).await;
    let created = s
        .result(
            "tools/call",
            json!({"name": "nap", "arguments": {"ms": 200, "tag": "sep1686"}, "task": {"ttl": 60000}}),
        )
        .await;
    schemas().legacy("CreateTaskResult", &created);
    let task = &created["task"];
    assert_eq!(task["status"], "working");
    let id = task["taskId"].as_str().unwrap().to_owned();

    let got = s.result("tasks/get", json!({"taskId": id})).await;
    schemas().legacy("GetTaskResult", &got);
    assert_eq!(got["taskId"], id.as_str());

    // `tasks/result` waits for the outcome and names the task.
    let result = s.result("tasks/result", json!({"taskId": id})).await;
    schemas().legacy("CallToolResult", &result);
    assert_eq!(result["content"][0]["text"], "sep1686 rested 200 ms");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str()
    );
    let done = s.result("tasks/get", json!({"taskId": id})).await;
    assert_eq!(done["status"], "completed");
}

#[tokio::test]
async fn cancel_ends_a_task_once_and_refuses_a_finished_one() {
    let url = serve(false).await;
    let s = Session::open(&url, None).await;
    let created = s
        .result(
            "tools/call",
            json!({"name": "nap", "arguments": {"ms": 60000, "tag": "c"}, "task": {}}),
        )
        .await;
    let id = created["task"]["taskId"].as_str().unwrap().to_owned();
    let cancelled = s.result("tasks/cancel", json!({"taskId": id})).await;
    schemas().legacy("CancelTaskResult", &cancelled);
    assert_eq!(cancelled["status"], "cancelled");
    let again = s.error("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(again["code"], -32602, "{again:#}");
    assert!(
        again["message"].as_str().unwrap().contains("cancelled"),
        "{again:#}"
    );
    let unknown = s.error("tasks/get", json!({"taskId": "nope"})).await;
    assert_eq!(unknown["code"], -32602, "{unknown:#}");
}

#[tokio::test]
async fn task_support_is_enforced_as_that_revision_says() {
    let url = serve(false).await;
    let s = Session::open(&url, None).await;
    // A required tool called plainly: -32601, naming what is missing.
    let plain = s
        .error("tools/call", json!({"name": "only_task", "arguments": {}}))
        .await;
    assert_eq!(plain["code"], -32601, "{plain:#}");
    assert!(
        plain["message"].as_str().unwrap().contains("params.task"),
        "{plain:#}"
    );
    // ...and as a task, it runs.
    let created = s
        .result(
            "tools/call",
            json!({"name": "only_task", "arguments": {}, "task": {}}),
        )
        .await;
    let id = created["task"]["taskId"].as_str().unwrap().to_owned();
    assert_eq!(until_terminal(&s, &id).await["status"], "completed");
    // A forbidden tool with `params.task`: -32601.
    let forbidden = s
        .error(
            "tools/call",
            json!({"name": "never_task", "arguments": {}, "task": {}}),
        )
        .await;
    assert_eq!(forbidden["code"], -32601, "{forbidden:#}");
    // ...and plainly, it answers inline.
    let inline = s
        .result("tools/call", json!({"name": "never_task", "arguments": {}}))
        .await;
    assert_eq!(inline["content"][0]["text"], "inline");
}

#[tokio::test]
async fn tasks_are_bound_to_their_requestor_and_listed_for_them_only() {
    let url = serve(true).await;
    let alice = Session::open(&url, Some("alice")).await;
    let bob = Session::open(&url, Some("bob")).await;
    assert_eq!(
        alice.initialize["result"]["capabilities"]["tasks"]["list"],
        json!({})
    );
    let mut mine = Vec::new();
    for tag in ["a1", "a2"] {
        let created = alice
            .result(
                "tools/call",
                json!({"name": "nap", "arguments": {"ms": 10, "tag": tag}, "task": {}}),
            )
            .await;
        mine.push(created["task"]["taskId"].as_str().unwrap().to_owned());
    }
    let listed = alice.result("tasks/list", json!({})).await;
    schemas().legacy("ListTasksResult", &listed);
    let ids: Vec<&str> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["taskId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, mine, "alice's tasks, oldest first");
    assert_eq!(
        bob.result("tasks/list", json!({})).await["tasks"],
        json!([])
    );
    let foreign = bob.error("tasks/get", json!({"taskId": mine[0]})).await;
    assert_eq!(foreign["code"], -32602, "another's task reads as not found");
    let bad = alice.error("tasks/list", json!({"cursor": "junk"})).await;
    assert_eq!(bad["code"], -32602, "{bad:#}");
}

#[tokio::test]
async fn a_plain_call_runs_as_a_task_and_reports_progress() {
    let url = serve(true).await;
    let s = Session::open(&url, Some("carol")).await;
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "nap", "arguments": {"ms": 100, "tag": "plain"},
        "_meta": {"progressToken": "p1"},
    }});
    let text = s.post(body).await.text().await.unwrap();
    let result = answer(&text, 5);
    schemas().legacy("CallToolResult", &result["result"]);
    assert_eq!(
        result["result"]["content"][0]["text"],
        "plain rested 100 ms"
    );
    assert!(
        text.contains("notifications/progress") && text.contains("napping 100 ms"),
        "the status message arrives as progress: {text}"
    );
    // The call ran as a durable task of the caller's.
    let listed = s.result("tasks/list", json!({})).await;
    assert_eq!(listed["tasks"][0]["status"], "completed");
}

#[tokio::test]
async fn a_cancelled_plain_call_cancels_its_task() {
    let url = serve(true).await;
    let s = Session::open(&url, Some("dave")).await;
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "nap", "arguments": {"ms": 60000, "tag": "cancel-me"},
    }});
    let pending = s.start(call);
    let id = loop {
        let listed = s.result("tasks/list", json!({})).await;
        if let Some(id) = listed["tasks"][0]["taskId"].as_str() {
            break id.to_owned();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let sent = s
        .post(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 9, "reason": "changed my mind"}}),
        )
        .await;
    assert_eq!(sent.status(), 202);
    assert_eq!(until_terminal(&s, &id).await["status"], "cancelled");
    pending.abort();
}

#[tokio::test]
async fn a_repeat_of_a_call_whose_session_ended_joins_its_task() {
    let url = serve(true).await;
    let args = json!({"name": "nap", "arguments": {"ms": 1500, "tag": "once"}});
    let first = Session::open(&url, Some("erin")).await;
    let lost =
        first.start(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": args}));
    let id = loop {
        let listed = first.result("tasks/list", json!({})).await;
        if let Some(id) = listed["tasks"][0]["taskId"].as_str() {
            break id.to_owned();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // The client goes away mid-call: its session ends, and with it the
    // call's stream.
    first.close().await;
    let ended = tokio::time::timeout(Duration::from_secs(5), lost).await;
    assert!(
        ended.is_ok(),
        "the lost call's stream did not end with its session"
    );

    let second = Session::open(&url, Some("erin")).await;
    let result = second
        .request(
            4,
            "tools/call",
            json!({"name": "nap", "arguments": {"ms": 1500, "tag": "once"}}),
        )
        .await;
    assert_eq!(
        result["result"]["content"][0]["text"], "once rested 1500 ms",
        "{result:#}"
    );
    let listed = second.result("tasks/list", json!({})).await;
    let tasks = listed["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "no second task: {listed:#}");
    assert_eq!(tasks[0]["taskId"], id.as_str());
    assert_eq!(naps("once"), 1, "the work ran once");
}

#[tokio::test]
async fn a_question_the_client_leaves_unanswered_times_out_on_its_deadline() {
    let url = serve(false).await;
    let s = Session::open(&url, None).await;
    // The session's own stream, where requests withdrawn outside any call
    // go.
    let (seen, reader) = s.listen().await;
    // As a task relayed by the call, and inline round by round: the
    // `elicitation/create` goes out, the client never answers, and the
    // call ends on the question's deadline.
    for (id, tool) in [(7, "brief"), (8, "brief_inline")] {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": tool, "arguments": {},
        }});
        let text = tokio::time::timeout(Duration::from_secs(20), async {
            s.post(body).await.text().await.unwrap()
        })
        .await
        .unwrap_or_else(|_| panic!("{tool}: the call did not end on the deadline"));
        assert!(
            text.contains("elicitation/create"),
            "{tool}: the question was asked: {text}"
        );

        let result = answer(&text, id);
        schemas().legacy("CallToolResult", &result["result"]);
        assert_eq!(
            result["result"]["content"][0]["text"], "timed out",
            "{tool}: {result:#}"
        );
    }
    // The inline round withdrew its question when the deadline passed.
    until_seen(
        &seen,
        "no notifications/cancelled on the session's stream",
        |text| text.contains("notifications/cancelled"),
    )
    .await;
    reader.abort();
}

/// An answer in the session that does not fit the question's form is not
/// taken: the question is asked again (a new `elicitation/create`, saying
/// what was wrong), and an answer that fits then ends the call. The same
/// for a call relayed from its task and for one run round by round.
#[tokio::test]
async fn a_bad_answer_in_the_session_is_asked_again() {
    let url = serve(false).await;
    let s = Session::open(&url, None).await;
    for (id, tool) in [(11, "ask"), (12, "ask_inline")] {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": tool, "arguments": {},
        }});
        let mut call = Sse::new(s.post(body).await);
        let answers = [
            json!({"action": "accept", "content": {"confirm": "yes"}}),
            json!({"action": "accept", "content": {"confirm": true}}),
        ];
        let mut asked = Vec::new();
        let result = loop {
            let message = call.next(&format!("{tool}: after {asked:?}")).await;
            {
                if message["method"] == "elicitation/create" {
                    schemas().legacy("ElicitRequest", &message);
                    let answer = answers
                        .get(asked.len())
                        .unwrap_or_else(|| panic!("{tool}: asked too often: {asked:?}"));
                    asked.push(message["params"]["message"].as_str().unwrap().to_owned());
                    let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": answer});
                    assert!(s.post(reply).await.status().is_success());
                } else if message["id"] == json!(id) {
                    break message;
                }
            }
        };
        assert_eq!(asked.len(), 2, "{tool}: {asked:?}");
        assert_eq!(asked[0], "Go on?");
        assert!(
            asked[1].contains("not accepted")
                && asked[1].contains("`confirm`")
                && asked[1].ends_with("Go on?"),
            "{tool}: {asked:?}"
        );
        schemas().legacy("CallToolResult", &result["result"]);
        assert_eq!(
            result["result"]["content"][0]["text"], "answered true",
            "{tool}: {result:#}"
        );
    }
}

/// A plain call of a tool that races two questions: both are asked in the
/// session; the first answer ends the race, and the other question is
/// withdrawn from the client (`notifications/cancelled` naming its request)
/// rather than left on its screen.
#[tokio::test]
async fn a_question_that_lost_its_race_is_withdrawn_from_the_client() {
    let url = serve(false).await;
    let s = Session::open(&url, None).await;
    let (seen, reader) = s.listen().await;
    let body = json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {
        "name": "either", "arguments": {},
    }});
    let mut call = Sse::new(s.post(body).await);
    let mut asked: HashMap<String, Value> = HashMap::new();
    let result = loop {
        let message = call.next(&format!("after {asked:?}")).await;
        if message["method"] == "elicitation/create" {
            schemas().legacy("ElicitRequest", &message);
            let text = message["params"]["message"].as_str().unwrap().to_owned();
            asked.insert(text.clone(), message["id"].clone());
            if asked.len() == 2 {
                // Both are out: answer B.
                let reply = json!({"jsonrpc": "2.0", "id": asked["B?"], "result": {
                    "action": "accept", "content": {"confirm": true},
                }});
                assert!(s.post(reply).await.status().is_success());
            }
        } else if message["method"] == "notifications/cancelled" {
            seen.lock().unwrap().push_str(&format!("data: {message}\n"));
        } else if message["id"] == json!(21) {
            break message;
        }
    };
    schemas().legacy("CallToolResult", &result["result"]);
    assert_eq!(
        result["result"]["content"][0]["text"], "b true",
        "{result:#}"
    );

    // A's request is withdrawn, on the call's stream or the session's.
    let a = asked["A?"].clone();
    until_seen(
        &seen,
        &format!("A's request {a} was not withdrawn"),
        |text| {
            text.lines()
                .filter_map(|l| {
                    serde_json::from_str::<Value>(l.trim_start_matches("data:").trim()).ok()
                })
                .any(|m| m["method"] == "notifications/cancelled" && m["params"]["requestId"] == a)
        },
    )
    .await;
    reader.abort();
}
