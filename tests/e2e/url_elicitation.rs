//! URL-mode elicitation (`ask_url`; core Elicitation § URL mode) end to end
//! over HTTP on 127.0.0.1, in-process: a 2026-07-28 client sees the question
//! in a task's `inputRequests` and in an inline `InputRequiredResult`, as
//! `{"mode": "url", "message", "url"}` with no `elicitationId`; a client that
//! did not declare `elicitation.url` is not asked (tasks ext. § Input
//! Requests); a 2025-11-25 session gets it as a request with its
//! `elicitationId`. Every message is checked against the official schemas.

mod common;

use std::time::{Duration, Instant};

use common::schemas;
use mcp_tasks_runtime::{
    Engine, ToolError, mcp,
    question::{AskError, UrlAnswer, ask_url},
    store::MemoryStore,
    task_tool,
    tool::Registry,
};
use serde_json::{Value, json};

const PAGE: &str = "https://registry.example.com/connect";

/// Sends the user to the registry's sign-in page.
#[task_tool]
async fn connect() -> Result<String, ToolError> {
    let answer = ask_url("Sign in to the registry.", PAGE).key("login").await;
    Ok(match answer {
        Ok(UrlAnswer::Accepted) => "accepted".into(),
        Ok(UrlAnswer::Declined) => "declined".into(),
        Ok(other) => format!("{other:?}"),
        Err(AskError::Unsupported(what)) => format!("unsupported: {what}"),
        Err(e) => return Err(e.into()),
    })
}

async fn serve() -> String {
    let engine = Engine::builder(MemoryStore::new())
        .registry(Registry::new().with(connect_tool()).unwrap())
        .start()
        .await
        .unwrap();
    let server = mcp_tasks_runtime::mcp::TaskServer::builder(engine).build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(mcp::serve(listener, server).into_future());
    url
}

/// A 2026-07-28 request declaring `caps` (plus the tasks extension when
/// `tasks`); its `result`, checked to be one.
async fn send(url: &str, method: &str, mut params: Value, caps: &Value, tasks: bool) -> Value {
    let mut caps = caps.clone();
    if tasks {
        caps["extensions"] = json!({"io.modelcontextprotocol/tasks": {}});
    }
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    });
    let name = params
        .get("taskId")
        .or_else(|| params.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let resp = reqwest::Client::new()
        .post(url)
        .timeout(Duration::from_secs(20))
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method)
        .header("Mcp-Name", name)
        .json(&body)
        .send()
        .await
        .expect("the server answers");
    assert_eq!(resp.status(), 200);
    let reply: Value = resp.json().await.expect("a JSON answer");
    reply
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("{method} failed: {reply}"))
}

async fn poll(url: &str, id: &str, caps: &Value, until: &[&str]) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let task = send(url, "tasks/get", json!({"taskId": id}), caps, true).await;
        schemas().tasks("GetTaskResult", &task);
        if until.contains(&task["status"].as_str().unwrap_or_default()) {
            return task;
        }
        assert!(Instant::now() < deadline, "stuck at {task}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The question exactly as 2026-07-28 has it, valid as an `InputRequest`.
fn assert_url_question(request: &Value) {
    assert_eq!(
        request,
        &json!({
            "method": "elicitation/create",
            "params": {"mode": "url", "message": "Sign in to the registry.", "url": PAGE},
        }),
        "no elicitationId in 2026-07-28"
    );
    schemas().core("InputRequest", request);
    schemas().core("ElicitRequestURLParams", &request["params"]);
}

#[tokio::test]
async fn a_task_asks_a_url_question_of_a_client_that_declared_it() {
    let url = serve().await;
    let caps = json!({"elicitation": {"url": {}}});
    let call = json!({"name": "connect", "arguments": {}});
    let created = send(&url, "tools/call", call, &caps, true).await;
    schemas().tasks("CreateTaskResult", &created);
    let id = created["taskId"].as_str().unwrap().to_owned();
    let parked = poll(&url, &id, &caps, &["input_required"]).await;
    let requests = parked["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{parked}");
    assert_url_question(&parked["inputRequests"]["login"]);

    // Content with an action is refused: the key stays outstanding.
    let bad = json!({"action": "accept", "content": {"token": "s3cret"}});
    let update = json!({"taskId": id, "inputResponses": {"login": bad}});
    let ack = send(&url, "tasks/update", update, &caps, true).await;
    schemas().tasks("UpdateTaskResult", &ack);
    let task = send(&url, "tasks/get", json!({"taskId": id}), &caps, true).await;
    assert_eq!(task["status"], "input_required", "{task}");
    assert_url_question(&task["inputRequests"]["login"]);
    let message = task["statusMessage"].as_str().unwrap_or_default();
    assert!(message.contains("`content`"), "{message}");

    let good = json!({"action": "accept"});
    schemas().core("ElicitResult", &good);
    let update = json!({"taskId": id, "inputResponses": {"login": good}});
    send(&url, "tasks/update", update, &caps, true).await;
    let done = poll(&url, &id, &caps, &["completed"]).await;
    schemas().core("CallToolResult", &done["result"]);
    assert_eq!(done["result"]["content"][0]["text"], "accepted", "{done}");
}

#[tokio::test]
async fn an_inline_call_asks_it_round_by_round() {
    let url = serve().await;
    let caps = json!({"elicitation": {"form": {}, "url": {}}});
    let call = json!({"name": "connect", "arguments": {}});
    let first = send(&url, "tools/call", call.clone(), &caps, false).await;
    schemas().core("InputRequiredResult", &first);
    assert_url_question(&first["inputRequests"]["login"]);

    let mut again = call;
    again["inputResponses"] = json!({"login": {"action": "decline"}});
    again["requestState"] = first["requestState"].clone();
    let done = send(&url, "tools/call", again, &caps, false).await;
    schemas().core("CallToolResult", &done);
    assert_eq!(done["content"][0]["text"], "declined", "{done}");
}

#[tokio::test]
async fn a_client_without_elicitation_url_is_not_asked() {
    let url = serve().await;
    for caps in [
        json!({}),
        json!({"elicitation": {}}),
        json!({"elicitation": {"form": {}}}),
    ] {
        let call = json!({"name": "connect", "arguments": {}});
        let created = send(&url, "tools/call", call.clone(), &caps, true).await;
        let id = created["taskId"].as_str().unwrap().to_owned();
        let done = poll(&url, &id, &caps, &["completed", "input_required"]).await;
        assert_eq!(done["status"], "completed", "{caps}: {done}");
        assert_eq!(
            done["result"]["content"][0]["text"], "unsupported: elicitation.url",
            "{caps}"
        );
        // Inline too: no round, the answer at once.
        let done = send(&url, "tools/call", call, &caps, false).await;
        schemas().core("CallToolResult", &done);
        assert_eq!(
            done["content"][0]["text"], "unsupported: elicitation.url",
            "{caps}"
        );
    }
}

/// A 2025-11-25 session: the question is a request in the session, with
/// the `elicitationId` that revision requires.
#[tokio::test]
async fn a_2025_11_25_session_gets_a_url_request_with_an_elicitation_id() {
    let url = serve().await;
    let http = reqwest::Client::new();
    let post = |body: Value, session: Option<&str>| {
        let mut req = http
            .post(&url)
            .timeout(Duration::from_secs(20))
            .header("Accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(s) = session {
            req = req
                .header("Mcp-Session-Id", s)
                .header("MCP-Protocol-Version", "2025-11-25");
        }
        req.send()
    };
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {"url": {}}},
        "clientInfo": {"name": "raw", "version": "1"},
    }});
    let resp = post(init, None).await.unwrap();
    assert_eq!(resp.status(), 200);
    let session = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        post(initialized, Some(&session)).await.unwrap().status(),
        202
    );

    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "connect", "arguments": {},
    }});
    let mut resp = post(call, Some(&session)).await.unwrap();
    let mut asked = Vec::new();
    let mut buf = String::new();
    let result = 'call: loop {
        let chunk = tokio::time::timeout(Duration::from_secs(20), resp.chunk())
            .await
            .unwrap_or_else(|_| panic!("stuck after {asked:?}"))
            .unwrap()
            .unwrap_or_else(|| panic!("the stream ended after {asked:?}: {buf}"));
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find('\n') {
            let line: String = buf.drain(..=end).collect();
            let Some(data) = line.strip_prefix("data:") else {
                continue;
            };
            let Ok(message) = serde_json::from_str::<Value>(data.trim()) else {
                continue;
            };
            if message["method"] == "elicitation/create" {
                schemas().legacy("ElicitRequest", &message);
                schemas().legacy("ElicitRequestURLParams", &message["params"]);
                let params = &message["params"];
                assert_eq!(params["mode"], "url", "{message}");
                assert_eq!(params["url"], PAGE);
                assert_eq!(params["message"], "Sign in to the registry.");
                let elicitation = params["elicitationId"].as_str().unwrap_or_default();
                assert!(!elicitation.is_empty(), "{message}");
                asked.push(elicitation.to_owned());
                let answer = json!({"action": "accept"});
                schemas().legacy("ElicitResult", &answer);
                let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": answer});
                let status = post(reply, Some(&session)).await.unwrap().status();
                assert!(status.is_success(), "{status}");
            } else if message["id"] == json!(7) {
                break 'call message;
            }
        }
    };
    assert_eq!(asked.len(), 1, "{asked:?}");
    schemas().legacy("CallToolResult", &result["result"]);
    assert_eq!(
        result["result"]["content"][0]["text"], "accepted",
        "{result:#}"
    );
}

/// The crate's own `TaskClient`, declaring URL mode, gets the request in
/// its elicitation handler and answers it, in a task and inline.
#[tokio::test]
async fn task_client_answers_a_url_question() {
    use mcp_tasks_client::TaskClient;
    use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction};

    let url = serve().await;
    for tasks in [true, false] {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let client = TaskClient::http(&url)
            .tasks(tasks)
            .url_elicitation()
            .on_elicit(move |request: ElicitRequestParams| {
                let log = log.clone();
                async move {
                    if let ElicitRequestParams::UrlElicitationParams { url, message, .. } = request
                    {
                        log.lock().unwrap().push((url, message));
                    }
                    ElicitResult::new(ElicitationAction::Accept)
                }
            })
            .connect()
            .await
            .unwrap();
        let said: String =
            tokio::time::timeout(Duration::from_secs(20), client.call("connect", ()))
                .await
                .expect("the call ends")
                .unwrap();
        assert_eq!(said, "accepted", "tasks: {tasks}");
        assert_eq!(
            *seen.lock().unwrap(),
            [(PAGE.to_owned(), "Sign in to the registry.".to_owned())],
            "tasks: {tasks}"
        );
    }
}

/// A listener hears the question in `notifications/tasks` as `tasks/get`
/// shows it: no `elicitationId`.
#[tokio::test]
async fn a_listener_hears_the_question_without_an_elicitation_id() {
    use futures::StreamExt as _;

    let url = serve().await;
    let caps = json!({"elicitation": {"url": {}}});
    let call = json!({"name": "connect", "arguments": {}});
    let created = send(&url, "tools/call", call, &caps, true).await;
    let id = created["taskId"].as_str().unwrap().to_owned();
    poll(&url, &id, &caps, &["input_required"]).await;

    let mut all = caps.clone();
    all["extensions"] = json!({"io.modelcontextprotocol/tasks": {}});
    let body = json!({"jsonrpc": "2.0", "id": "sub", "method": "subscriptions/listen", "params": {
        "notifications": {"taskIds": [id]},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": all,
        },
    }});
    let resp = reqwest::Client::new()
        .post(&url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "subscriptions/listen")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let mut buf = String::new();
    let heard = 'heard: loop {
        let chunk = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .expect("a notification within 20 s")
            .expect("the stream is open")
            .unwrap();
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find('\n') {
            let line: String = buf.drain(..=end).collect();
            let Some(data) = line.strip_prefix("data:") else {
                continue;
            };
            let Ok(message) = serde_json::from_str::<Value>(data.trim()) else {
                continue;
            };
            if message["method"] == "notifications/tasks" {
                break 'heard message;
            }
        }
    };
    schemas().tasks("TaskStatusNotification", &heard);
    assert_eq!(heard["params"]["status"], "input_required", "{heard}");
    assert_url_question(&heard["params"]["inputRequests"]["login"]);
}
