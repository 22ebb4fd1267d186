//! The protocol's edges: what the server answers to requests that are
//! malformed, name no or a foreign protocol version, or call a method
//! 2026-07-28 removed, over HTTP and stdio. Each test sends the exact
//! request and checks the exact JSON-RPC answer (and HTTP status), against
//! the official schemas where one applies.

mod common;

use std::{
    io::{BufRead, BufReader, Write},
    path::Path,
    process::Stdio,
};

use common::{
    raw::{Raw, Reply},
    request::meta,
    *,
};
use serde_json::{Value, json};

const V: &str = "2026-07-28";
const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// POSTs `body` (sent as is) with the standard `Accept` and `Content-Type`
/// and `headers`; the status and the body as JSON (or as a JSON string when
/// it is not JSON).
async fn post(url: &str, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(body.to_owned());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.expect("the server answers");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

/// A 2026-07-28 request as the spec has it (headers and `_meta`).
async fn modern(url: &str, id: u64, method: &str, mut params: Value, tasks: bool) -> (u16, Value) {
    // `Mcp-Name` as a client sets it: the tool's name, the resource, the task.
    let name = ["name", "uri", "taskId"]
        .iter()
        .find_map(|k| params.get(*k).and_then(Value::as_str))
        .map(str::to_owned);
    params["_meta"] = meta(tasks);
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let mut headers = vec![("MCP-Protocol-Version", V), ("Mcp-Method", method)];
    if let Some(name) = &name {
        headers.push(("Mcp-Name", name));
    }
    post(url, &headers, &body.to_string()).await
}

/// Checks a JSON-RPC error answer: valid, with `code` and the request's id
/// (none when `id` is `None`); its message.
fn rpc_error(body: &Value, code: i64, id: Option<Value>) -> String {
    schemas().core("JSONRPCErrorResponse", body);
    assert_eq!(body["error"]["code"], json!(code), "{body}");
    match id {
        Some(id) => assert_eq!(body["id"], id, "{body}"),
        None => assert!(body.get("id").is_none(), "no id: {body}"),
    }
    body["error"]["message"].as_str().unwrap().to_owned()
}

fn tasks_in(store: &Path) -> i64 {
    let c =
        rusqlite::Connection::open_with_flags(store, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    c.query_row("SELECT count(*) FROM tasks", [], |r| r.get(0))
        .unwrap()
}

// core Basic § `_meta` ---------------------------------------------------

#[tokio::test]
async fn a_request_naming_no_protocol_version_is_refused_with_invalid_params() {
    let (_dir, server) = Server::fresh();
    let url = &server.url;
    for body in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": "call-1", "method": "tools/call",
               "params": {"name": "greet", "arguments": {"name": "Ada"}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"taskId": "t"}}),
    ] {
        let (status, answer) = post(url, &[], &body.to_string()).await;
        assert_eq!(status, 400, "{answer}");
        let message = rpc_error(&answer, -32602, Some(body["id"].clone()));
        assert!(
            message.contains("MCP-Protocol-Version")
                && message.contains("io.modelcontextprotocol/protocolVersion"),
            "the message names what is missing: {message}"
        );
    }
    assert_eq!(tasks_in(&server.store), 0, "nothing ran");

    // `initialize` (how a client of an earlier version opens) needs no
    // header, and the session it opens is served as before.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "old", "version": "1"}}});
    let resp = reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let session = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = resp.text().await;
    let in_session = [("Mcp-Session-Id", session.as_str())];
    let (status, _) = post(
        url,
        &in_session,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    assert_eq!(status, 202);
    // A 2025-03-26 client sends no header: its requests in the session are served.
    let (status, answer) = post(
        url,
        &in_session,
        r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#,
    )
    .await;
    assert_eq!(status, 200);
    let text = answer.as_str().unwrap_or_default();
    assert!(
        text.contains(r#""id":5"#) && text.contains(r#""result":{}"#),
        "{answer}"
    );
}

// core Versioning, Changelog (removed methods) ---------------------------

#[tokio::test]
async fn a_foreign_protocol_version_gets_unsupported_protocol_version() {
    let (_dir, server) = Server::fresh();
    let url = &server.url;
    let supported = json!(["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", V]);

    // In the header and `_meta` alike.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2099-01-01",
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    let (status, answer) = post(
        url,
        &[
            ("MCP-Protocol-Version", "2099-01-01"),
            ("Mcp-Method", "tools/list"),
        ],
        &body.to_string(),
    )
    .await;
    assert_eq!(status, 400);
    rpc_error(&answer, -32022, Some(json!(1)));
    schemas().core("UnsupportedProtocolVersionError", &answer);
    assert_eq!(
        answer["error"]["data"],
        json!({"requested": "2099-01-01", "supported": supported})
    );

    // In the header alone.
    let (status, answer) = post(
        url,
        &[("MCP-Protocol-Version", "2099-01-01")],
        r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
    )
    .await;
    assert_eq!(status, 400);
    rpc_error(&answer, -32022, Some(json!(2)));
    schemas().core("UnsupportedProtocolVersionError", &answer);
    assert_eq!(
        answer["error"]["data"],
        json!({"requested": "2099-01-01", "supported": supported})
    );
}

#[tokio::test]
async fn methods_2026_07_28_removed_are_not_found_in_its_requests() {
    let (_dir, server) = Server::fresh();
    let url = &server.url;
    for (method, params) in [
        ("ping", json!({})),
        ("logging/setLevel", json!({"level": "info"})),
        ("resources/subscribe", json!({"uri": "test://static-text"})),
        (
            "resources/unsubscribe",
            json!({"uri": "test://static-text"}),
        ),
        ("tasks/result", json!({"taskId": "t"})),
        ("tasks/list", json!({})),
        // Whatever their params: the method is looked up first.
        ("initialize", json!({})),
        ("logging/setLevel", json!({})),
        ("resources/subscribe", json!({})),
        ("resources/unsubscribe", json!({"uri": 7})),
    ] {
        let (status, answer) = modern(url, 7, method, params, true).await;
        assert_eq!(status, 404, "{method}: {answer}");
        rpc_error(&answer, -32601, Some(json!(7)));
        schemas().core("MethodNotFoundError", &answer["error"]);
    }
}

#[tokio::test]
async fn a_2026_07_28_initialize_is_not_found_and_opens_no_session() {
    let (_dir, server) = Server::fresh();
    let url = &server.url;
    // A correct handshake in every field, sent as a 2026-07-28 request.
    let mut params = json!({"protocolVersion": V, "capabilities": {},
                            "clientInfo": {"name": "modern", "version": "1"}});
    params["_meta"] = meta(false);
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "initialize", "params": params});
    let resp = reqwest::Client::new()
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", V)
        .header("Mcp-Method", "initialize")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert!(
        resp.headers().get("mcp-session-id").is_none(),
        "no session is opened: {:?}",
        resp.headers()
    );
    let answer: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    let message = rpc_error(&answer, -32601, Some(json!(5)));
    schemas().core("MethodNotFoundError", &answer["error"]);
    assert!(message.contains("initialize"), "{message}");
}

// tasks ext. § Task Creation; core MRTR § Error Handling -----------------

#[tokio::test]
async fn a_known_method_with_malformed_params_gets_invalid_params_naming_the_problem() {
    let (_dir, server) = Server::fresh();
    let url = &server.url;
    let cases = [
        ("tools/call", json!({"arguments": {}}), "`name` is missing"),
        (
            "tools/call",
            json!({"name": "greet", "arguments": ["Ada"]}),
            "`arguments` must be an object",
        ),
        ("tasks/get", json!({}), "`taskId` is missing"),
        (
            "tasks/cancel",
            json!({"taskId": 7}),
            "`taskId` must be a string",
        ),
        (
            "tasks/update",
            json!({"taskId": "t"}),
            "`inputResponses` is missing",
        ),
        (
            "tasks/update",
            json!({"taskId": "t", "inputResponses": ["yes"]}),
            "`inputResponses` must be an object",
        ),
        (
            "tasks/update",
            json!({"taskId": "t", "inputResponses": "yes"}),
            "`inputResponses` must be an object",
        ),
    ];
    for (method, params, problem) in cases {
        let (status, answer) = modern(url, 3, method, params.clone(), true).await;
        assert_eq!(status, 200, "{method} {params}: {answer}");
        let message = rpc_error(&answer, -32602, Some(json!(3)));
        assert!(
            message.contains(method) && message.contains(problem),
            "{method} {params}: {message}"
        );
    }
    // `tasks/*` without the extension: the capability comes first (tasks ext.
    // § Error Handling).
    let (status, answer) = modern(url, 4, "tasks/get", json!({}), false).await;
    assert_eq!(status, 400);
    rpc_error(&answer, -32021, Some(json!(4)));
    assert_eq!(
        answer["error"]["data"]["requiredCapabilities"],
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    );
    assert_eq!(tasks_in(&server.store), 0);
}

// core Streamable HTTP ---------------------------------------------------

#[tokio::test]
async fn a_body_that_is_no_single_message_gets_a_json_rpc_error() {
    let (_dir, server) = Server::fresh();
    let url = &server.url;
    let headers = [("MCP-Protocol-Version", V)];

    let (status, answer) = post(url, &headers, r#"{"jsonrpc":"2.0","id":1,"method":"#).await;
    assert_eq!(status, 400, "{answer}");
    rpc_error(&answer, -32700, None);
    schemas().core("ParseError", &answer["error"]);

    let ping =
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": meta(false)}});
    let (status, answer) = post(url, &headers, &json!([ping, ping]).to_string()).await;
    assert_eq!(status, 400, "{answer}");
    let message = rpc_error(&answer, -32600, None);
    schemas().core("InvalidRequestError", &answer["error"]);
    assert!(message.contains("batch"), "{message}");

    let mut null_id = ping.clone();
    null_id["id"] = Value::Null;
    let (status, answer) = post(url, &headers, &null_id.to_string()).await;
    assert_eq!(status, 400, "{answer}");
    let message = rpc_error(&answer, -32600, None);
    assert!(message.contains("null"), "{message}");

    let (status, answer) = post(url, &headers, r#""ping""#).await;
    assert_eq!(status, 400, "{answer}");
    rpc_error(&answer, -32600, None);

    // The transport's own checks still come first: a foreign Origin is
    // refused (403) whatever the body.
    let (status, _) = post(
        url,
        &[
            ("MCP-Protocol-Version", V),
            ("Origin", "http://evil.example"),
        ],
        "{",
    )
    .await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn params_that_are_no_object_get_invalid_params() {
    let (_dir, server) = Server::fresh();
    let url = &server.url;
    for (params, kind) in [
        (json!([1]), "an array"),
        (json!("x"), "a string"),
        (json!(5), "a number"),
    ] {
        // A request: its id comes back.
        let body = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": params});
        let headers = [("MCP-Protocol-Version", V), ("Mcp-Method", "tools/list")];
        let (status, answer) = post(url, &headers, &body.to_string()).await;
        assert_eq!(status, 400, "{params}: {answer}");
        let message = rpc_error(&answer, -32602, Some(json!(8)));
        assert!(
            message.contains("`params`") && message.contains(kind),
            "{message}"
        );
        // A notification: refused with an HTTP error, the JSON-RPC error
        // without an id (C-HTTP: a notification that is not accepted).
        let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params});
        let headers = [
            ("MCP-Protocol-Version", V),
            ("Mcp-Method", "notifications/cancelled"),
        ];
        let (status, answer) = post(url, &headers, &note.to_string()).await;
        assert_eq!(status, 400, "{params}: {answer}");
        let message = rpc_error(&answer, -32602, None);
        assert!(
            message.contains("notifications/cancelled") && message.contains(kind),
            "{message}"
        );
    }
}

// C-TOOLS --------------------------------------------------------------

/// Checks a tool error result naming `field`.
fn tool_error(body: &Value, field: &str) {
    let result = &body["result"];
    schemas().core("CallToolResult", result);
    assert_eq!(result["isError"], true, "{body}");
    assert_eq!(result["resultType"], "complete", "{body}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains(field), "the text names `{field}`: {text}");
    assert!(result.get("taskId").is_none(), "{body}");
}

#[tokio::test]
async fn bad_arguments_are_a_tool_error_and_no_task() {
    let (_dir, server) = Server::fresh();
    let url = &server.url;
    // A task tool, declaring and not; a sync one; an unknown argument.
    for (tasks, name, arguments, field) in [
        (true, "confirm_delete", json!({"filename": 7}), "filename"),
        (true, "confirm_delete", json!({}), "filename"),
        (
            false,
            "slow_compute",
            json!({"seconds": "soon", "label": "x"}),
            "seconds",
        ),
        (
            true,
            "slow_compute",
            json!({"seconds": 1, "label": "x", "colour": "red"}),
            "colour",
        ),
        (false, "greet", json!({"name": 5}), "name"),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                          "params": {"name": name, "arguments": arguments, "_meta": meta(tasks)}});
        let (status, answer) = post(
            url,
            &[
                ("MCP-Protocol-Version", V),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", name),
            ],
            &body.to_string(),
        )
        .await;
        assert_eq!(status, 200, "{answer}");
        schemas().core("JSONRPCResultResponse", &answer);
        tool_error(&answer, field);
    }
    assert_eq!(tasks_in(&server.store), 0, "no task was created");

    // An unknown tool is still a protocol error.
    let mut raw = Raw::new(url);
    let Reply { status, body } = raw
        .send(
            "tools/call",
            json!({"name": "no_such_tool", "arguments": {}}),
            true,
            Some("no_such_tool"),
        )
        .await;
    assert_eq!(status, 200);
    let message = rpc_error(&body, -32602, Some(body["id"].clone()));
    assert!(message.contains("no_such_tool"), "{message}");
}

#[tokio::test]
async fn bad_arguments_in_a_2025_11_25_task_call_are_a_tool_error_and_no_task() {
    let (_dir, server) = Server::fresh();
    let url = &server.url;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"tasks": {"requests": {"elicitation": {"create": {}}}}},
        "clientInfo": {"name": "legacy", "version": "1"}}});
    let resp = reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .unwrap();
    let session = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = resp.text().await;
    let headers = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    post(
        url,
        &headers,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    for (arguments, field) in [
        (json!({"filename": 7}), "filename"),
        (json!({"filename": "x", "force": true}), "force"),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "confirm_delete", "arguments": arguments, "task": {"ttl": 60000}}});
        let (status, answer) = post(url, &headers, &body.to_string()).await;
        assert_eq!(status, 200);
        let answer = sse_answer(&answer, 3);
        schemas().legacy("JSONRPCResultResponse", &answer);
        let result = &answer["result"];
        schemas().legacy("CallToolResult", result);
        assert_eq!(result["isError"], true, "{answer}");
        assert!(result.get("task").is_none(), "no task: {answer}");
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.contains(field), "{text}");
    }
    assert_eq!(tasks_in(&server.store), 0, "no task was created");
}

/// The JSON-RPC answer to request `id` in a session's SSE body.
fn sse_answer(body: &Value, id: u64) -> Value {
    if body.is_object() {
        return body.clone();
    }
    body.as_str()
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|m| m.get("id") == Some(&json!(id)))
        .unwrap_or_else(|| panic!("no answer to {id} in {body}"))
}

/// Every JSON-RPC message of an answer: the one JSON body, or each `data:`
/// of an SSE body.
fn messages(body: &Value) -> Vec<Value> {
    if body.is_object() {
        return vec![body.clone()];
    }
    body.as_str()
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .collect()
}

/// The `notifications/message` texts among `messages`.
fn logged(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .map(|m| m["params"]["data"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Opens a 2025-11-25 session (`initialize`, then `initialized`); the
/// headers its requests carry.
async fn open_session(url: &str) -> Vec<(&'static str, String)> {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "legacy", "version": "1"}}});
    let resp = reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let session = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = resp.text().await;
    let headers = vec![
        ("Mcp-Session-Id", session),
        ("MCP-Protocol-Version", "2025-11-25".to_owned()),
    ];
    let (status, _) = post(
        url,
        &borrowed(&headers),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    assert_eq!(status, 202);
    headers
}

fn borrowed<'a>(headers: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    headers.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

// core Changelog (logging), Basic § Statelessness ------------------------

#[tokio::test]
async fn log_messages_go_only_where_asked_and_levels_are_per_session() {
    let (_dir, server) = Server::fresh();
    let url = &server.url;
    let tool = "test_tool_with_logging";
    let all = [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ];
    let modern_call = |log_level: Option<&str>| {
        let mut m = meta(false);
        if let Some(level) = log_level {
            m["io.modelcontextprotocol/logLevel"] = json!(level);
        }
        json!({"jsonrpc": "2.0", "id": 11, "method": "tools/call",
               "params": {"name": tool, "arguments": {}, "_meta": m}})
        .to_string()
    };
    let modern_headers = [
        ("MCP-Protocol-Version", V),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", tool),
    ];
    let session_call = r#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"test_tool_with_logging","arguments":{}}}"#;

    // A 2025-11-25 client silences its own session.
    let quiet = open_session(url).await;
    let set_level =
        r#"{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"emergency"}}"#;
    let (status, answer) = post(url, &borrowed(&quiet), set_level).await;
    assert_eq!(status, 200, "{answer}");
    assert!(sse_answer(&answer, 1).get("result").is_some(), "{answer}");

    // A 2026-07-28 request that names no log level gets no log messages.
    let (status, answer) = post(url, &modern_headers, &modern_call(None)).await;
    assert_eq!(status, 200, "{answer}");
    let got = messages(&answer);
    assert!(logged(&got).is_empty(), "no logLevel, no log: {answer}");
    assert!(got.iter().any(|m| m["id"] == 11), "{answer}");

    // One that asks for `info` gets them, whatever the session set.
    let (status, answer) = post(url, &modern_headers, &modern_call(Some("info"))).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(logged(&messages(&answer)), all, "{answer}");
    // One that asks for `error` gets none of these `info` messages.
    let (_, answer) = post(url, &modern_headers, &modern_call(Some("error"))).await;
    assert!(logged(&messages(&answer)).is_empty(), "{answer}");

    // Another session's level is its own: it never set one, so its call's
    // messages all come, on the call's own POST stream before its answer
    // (2025-11-25 transport: a request's notifications go on its stream;
    // no GET stream is open here).
    let other = open_session(url).await;
    let (_, answer) = post(url, &borrowed(&other), session_call).await;
    assert!(sse_answer(&answer, 12).get("result").is_some(), "{answer}");
    assert_eq!(logged(&messages(&answer)), all, "{answer}");
}

// tasks ext. § Input Requests --------------------------------------------

#[tokio::test]
async fn a_poll_is_shown_only_the_questions_its_client_can_answer() {
    let (_dir, server) = Server::fresh();
    let url = &server.url;
    let (status, created) = modern(
        url,
        1,
        "tools/call",
        json!({"name": "confirm_delete", "arguments": {"filename": "r77.txt"}}),
        true,
    )
    .await;
    assert_eq!(status, 200, "{created}");
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    // A `tasks/get` declaring `caps` (the tasks extension added).
    let get = |caps: Value| {
        let mut caps = caps;
        caps["extensions"] = json!({"io.modelcontextprotocol/tasks": {}});
        let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {
            "taskId": id, "_meta": {
                "io.modelcontextprotocol/protocolVersion": V,
                "io.modelcontextprotocol/clientCapabilities": caps}}});
        let headers = [
            ("MCP-Protocol-Version", V),
            ("Mcp-Method", "tasks/get"),
            ("Mcp-Name", id.as_str()),
        ];
        async move { post(url, &headers, &body.to_string()).await }
    };
    let mut seen = Value::Null;
    for _ in 0..100 {
        let (_, answer) = get(json!({"elicitation": {}})).await;
        seen = answer["result"].clone();
        if seen["status"] == "input_required" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(seen["status"], "input_required", "{seen}");
    assert!(seen["inputRequests"]["confirm"].is_object(), "{seen}");

    // A poll that declares no elicitation is not sent the form.
    let (status, answer) = get(json!({})).await;
    assert_eq!(status, 200, "{answer}");
    let result = &answer["result"];
    schemas().tasks("GetTaskResult", result);
    assert_eq!(result["status"], "input_required", "{answer}");
    assert_eq!(result["inputRequests"], json!({}), "{answer}");
    // Nor is one that declares URL mode only (`{}` alone means form mode).
    let (_, answer) = get(json!({"elicitation": {"url": {}}})).await;
    assert_eq!(answer["result"]["inputRequests"], json!({}), "{answer}");
}

// MRTR inputResponses -------------------------------------------------

#[tokio::test]
async fn inline_answers_count_only_for_the_questions_asked() {
    let (_dir, server) = Server::fresh();
    let mut raw = Raw::new(&server.url);
    let s = schemas();
    let tool = "test_input_required_result_multi_round";
    let name = json!({"action": "accept", "content": {"name": "Ada"}});
    let colour = json!({"action": "accept", "content": {"color": "green"}});
    let call = json!({"name": tool, "arguments": {}});

    // A first call has been asked nothing: answers sent with it are ignored
    // and the first question is asked.
    let mut first = call.clone();
    first["inputResponses"] = json!({"step1": name, "step2": colour});
    let r = raw.send("tools/call", first, false, Some(tool)).await;
    let asked = r.body["result"].clone();
    s.core("InputRequiredResult", &asked);
    let keys: Vec<&String> = asked["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["step1"], "{asked}");

    // The retry answers the question it was shown, and one it was not: only
    // the first is taken, and the second question is asked.
    let mut retry = call.clone();
    retry["inputResponses"] = json!({"step1": name, "step2": colour});
    retry["requestState"] = asked["requestState"].clone();
    let r = raw.send("tools/call", retry, false, Some(tool)).await;
    let asked = r.body["result"].clone();
    s.core("InputRequiredResult", &asked);
    let keys: Vec<&String> = asked["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["step2"], "{asked}");

    let mut last = call;
    last["inputResponses"] = json!({"step2": colour});
    last["requestState"] = asked["requestState"].clone();
    let r = raw.send("tools/call", last, false, Some(tool)).await;
    let done = r.body["result"].clone();
    s.core("CallToolResult", &done);
    assert_eq!(done["content"][0]["text"], "Ada likes green", "{done}");
}

// core Basic § `_meta` serverInfo ----------------------------------------

#[tokio::test]
async fn results_carry_the_server_info() {
    let (_dir, server) = Server::fresh();
    let mut raw = Raw::new(&server.url);
    let info = json!({"name": "mcp-tasks-conformance", "version": env!("CARGO_PKG_VERSION")});
    let s = schemas();
    let check = |r: &Reply, def: &str, tasks_schema: bool| -> Value {
        assert_eq!(r.status, 200, "{}", r.body);
        let result = r.body["result"].clone();
        if tasks_schema {
            s.tasks(def, &result);
        } else {
            s.core(def, &result);
        }
        assert_eq!(result["_meta"][SERVER_INFO], info, "{def}: {result}");
        result
    };

    let r = raw.send("server/discover", json!({}), true, None).await;
    check(&r, "DiscoverResult", false);
    let r = raw.send("tools/list", json!({}), true, None).await;
    check(&r, "ListToolsResult", false);
    let r = raw
        .send(
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "Ada"}}),
            true,
            Some("greet"),
        )
        .await;
    check(&r, "CallToolResult", false);
    let r = raw
        .send(
            "tools/call",
            json!({"name": "test_input_required_result_elicitation", "arguments": {}}),
            false,
            Some("test_input_required_result_elicitation"),
        )
        .await;
    check(&r, "InputRequiredResult", false);

    let r = raw
        .send(
            "tools/call",
            json!({"name": "confirm_delete", "arguments": {"filename": "x"}}),
            true,
            Some("confirm_delete"),
        )
        .await;
    let created = check(&r, "CreateTaskResult", true);
    let id = created["taskId"].as_str().unwrap().to_owned();
    let r = raw
        .send("tasks/get", json!({"taskId": id}), true, Some(&id))
        .await;
    check(&r, "GetTaskResult", true);
    let r = raw
        .send(
            "tasks/update",
            json!({"taskId": id, "inputResponses": {}}),
            true,
            Some(&id),
        )
        .await;
    let ack = check(&r, "UpdateTaskResult", true);
    assert_eq!(
        ack,
        json!({"resultType": "complete", "_meta": {SERVER_INFO: info}})
    );
    let r = raw
        .send("tasks/cancel", json!({"taskId": id}), true, Some(&id))
        .await;
    let ack = check(&r, "CancelTaskResult", true);
    assert_eq!(
        ack,
        json!({"resultType": "complete", "_meta": {SERVER_INFO: info}})
    );
}

// stdio (removed methods, versioning, task creation, tools, serverInfo) ---

#[test]
fn the_same_edges_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = common::process::stdio_server(
        common::bin("conformance"),
        &dir.path().join("tasks.db"),
        Stdio::null(),
    );
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut ask = |message: Value| -> Value {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    };
    let request = |id: u64, method: &str, mut params: Value, version: &str| {
        let mut m = meta(true);
        m["io.modelcontextprotocol/protocolVersion"] = json!(version);
        params["_meta"] = m;
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    };

    // A 2026-07-28 `initialize`, correct in every field, even as the first
    // request: no handshake, and what follows is served as 2026-07-28.
    let handshake = json!({"protocolVersion": V, "capabilities": {},
                           "clientInfo": {"name": "modern", "version": "1"}});
    let answer = ask(request(0, "initialize", handshake, V));
    let message = rpc_error(&answer, -32601, Some(json!(0)));
    assert!(message.contains("initialize"), "{message}");

    // A 2026-07-28 ping.
    let answer = ask(request(1, "ping", json!({}), V));
    rpc_error(&answer, -32601, Some(json!(1)));
    let answer = ask(request(2, "logging/setLevel", json!({"level": "info"}), V));
    rpc_error(&answer, -32601, Some(json!(2)));

    let answer = ask(request(3, "tools/list", json!({}), "2099-01-01"));
    rpc_error(&answer, -32022, Some(json!(3)));
    schemas().core("UnsupportedProtocolVersionError", &answer);

    let answer = ask(request(4, "tools/call", json!({"arguments": {}}), V));
    let message = rpc_error(&answer, -32602, Some(json!(4)));
    assert!(message.contains("`name` is missing"), "{message}");
    let answer = ask(request(
        5,
        "tasks/update",
        json!({"taskId": "t", "inputResponses": []}),
        V,
    ));
    let message = rpc_error(&answer, -32602, Some(json!(5)));
    assert!(
        message.contains("`inputResponses` must be an object"),
        "{message}"
    );

    // Params that are no object: the same error as over HTTP.
    let answer = ask(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": [1]}));
    let message = rpc_error(&answer, -32602, Some(json!(7)));
    assert!(message.contains("an array"), "{message}");

    let answer = ask(request(
        6,
        "tools/call",
        json!({"name": "confirm_delete", "arguments": {"filename": 7}}),
        V,
    ));
    tool_error(&answer, "filename");
    assert_eq!(
        answer["result"]["_meta"][SERVER_INFO]["name"],
        "mcp-tasks-conformance"
    );

    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn an_over_long_stdio_line_gets_an_error_naming_the_limit() {
    const LIMIT: usize = 4 * 1024 * 1024; // the default max_line_bytes
    let dir = tempfile::tempdir().unwrap();
    let mut child = common::process::stdio_server(
        common::bin("conformance"),
        &dir.path().join("tasks.db"),
        Stdio::null(),
    );
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut read = || -> Value {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    };
    let call = |id: u64, text: String| {
        let mut params = json!({"name": "greet", "arguments": {"name": text}});
        params["_meta"] = meta(false);
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
    };

    // A well-formed request, one byte too long for the limit.
    let mut long = call(1, String::new()).to_string();
    let pad = LIMIT + 1 - long.len();
    long = call(1, "a".repeat(pad)).to_string();
    assert_eq!(long.len(), LIMIT + 1);
    writeln!(stdin, "{long}").unwrap();
    stdin.flush().unwrap();
    let answer = read();
    let message = rpc_error(&answer, -32600, None);
    assert!(
        message.contains(&LIMIT.to_string()) && message.contains("max_line_bytes"),
        "{message}"
    );

    // The connection goes on: the next line is read and answered.
    writeln!(stdin, "{}", call(2, "Ada".into())).unwrap();
    stdin.flush().unwrap();
    let answer = read();
    assert_eq!(answer["id"], 2, "{answer}");
    assert_eq!(
        answer["result"]["content"][0]["text"], "Hello, Ada!",
        "{answer}"
    );

    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
}
