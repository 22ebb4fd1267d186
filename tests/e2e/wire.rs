//! Raw wire checks over HTTP: every response of a full task flow, byte for
//! byte as the server sends it, validated against the official JSON Schemas
//! (`mcp-2026-07-28.schema.json` for core results and errors,
//! `tasks-extension.schema.json` for task results).

mod common;

use std::time::{Duration, Instant};

use common::{
    raw::{Raw, Reply},
    *,
};
use serde_json::{Value, json};

fn result(r: &Reply) -> &Value {
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
        .get("result")
        .unwrap_or_else(|| panic!("expected a result: {}", r.body))
}

fn error(r: &Reply, code: i64) -> &Value {
    schemas().core("JSONRPCErrorResponse", &r.body);
    assert_eq!(r.body["error"]["code"], json!(code), "{}", r.body);
    &r.body["error"]
}

/// An empty ack (`tasks/update`, `tasks/cancel`): `resultType` and the
/// server's name in `_meta`, nothing of the task (tasks ext. `tasks/update`,
/// `tasks/cancel`; core Basic § `_meta`).
fn assert_ack(ack: &Value) {
    assert_eq!(ack["resultType"], "complete", "{ack}");
    assert_eq!(
        ack["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "mcp-tasks-conformance",
        "{ack}"
    );
    assert_eq!(
        ack.as_object().map(|o| o.len()),
        Some(2),
        "nothing else: {ack}"
    );
}

async fn poll(raw: &mut Raw, id: &str, until: &[&str]) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = raw
            .send("tasks/get", json!({"taskId": id}), true, Some(id))
            .await;
        let task = result(&r).clone();
        schemas().tasks("GetTaskResult", &task);
        assert_eq!(task["resultType"], "complete");
        if until.contains(&task["status"].as_str().unwrap()) {
            return task;
        }
        assert!(Instant::now() < deadline, "stuck at {task}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn every_response_of_a_task_flow_matches_the_official_schemas() {
    let (_dir, server) = Server::fresh();
    let mut raw = Raw::new(&server.url);
    let s = schemas();

    let r = raw.send("server/discover", json!({}), true, None).await;
    s.core("DiscoverResult", result(&r));
    assert_eq!(
        result(&r)["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
        json!({})
    );
    assert!(result(&r)["capabilities"].get("tasks").is_none());

    let r = raw.send("tools/list", json!({}), true, None).await;
    s.core("ListToolsResult", result(&r));
    for tool in result(&r)["tools"].as_array().unwrap() {
        s.core("Tool", tool);
    }

    // A task: created, parked with a question, answered, completed.
    let r = raw
        .send(
            "tools/call",
            json!({"name": "confirm_delete", "arguments": {"filename": "x"}}),
            true,
            Some("confirm_delete"),
        )
        .await;
    let created = result(&r).clone();
    s.tasks("CreateTaskResult", &created);
    assert_eq!(created["resultType"], "task");
    assert_eq!(created["status"], "working");
    for absent in [
        "result",
        "error",
        "inputRequests",
        "requestState",
        "ttl",
        "pollInterval",
        "task",
    ] {
        assert!(
            created.get(absent).is_none(),
            "CreateTaskResult has no `{absent}`: {created}"
        );
    }
    let id = created["taskId"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 32, "128 bits as hex");

    let parked = poll(&mut raw, &id, &["input_required"]).await;
    assert_eq!(
        parked["inputRequests"]["confirm"]["method"],
        "elicitation/create"
    );

    let r = raw
        .send(
            "tasks/update",
            json!({"taskId": id, "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": true}}}}),
            true,
            Some(&id),
        )
        .await;
    s.tasks("UpdateTaskResult", result(&r));
    assert_ack(result(&r));

    let done = poll(&mut raw, &id, &["completed"]).await;
    s.core("CallToolResult", &done["result"]);
    assert_eq!(done["result"]["isError"], false);

    let r = raw
        .send("tasks/cancel", json!({"taskId": id}), true, Some(&id))
        .await;
    s.tasks("CancelTaskResult", result(&r));
    assert_ack(result(&r));

    // A failed task carries a JSON-RPC error and no result.
    let r = raw
        .send(
            "tools/call",
            json!({"name": "protocol_error_job", "arguments": {}}),
            true,
            Some("protocol_error_job"),
        )
        .await;
    let fid = result(&r)["taskId"].as_str().unwrap().to_owned();
    let failed = poll(&mut raw, &fid, &["failed"]).await;
    s.core("Error", &failed["error"]);
    assert!(failed.get("result").is_none());

    // A cancelled task.
    let r = raw
        .send(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 30, "label": "c"}}),
            true,
            Some("slow_compute"),
        )
        .await;
    let cid = result(&r)["taskId"].as_str().unwrap().to_owned();
    raw.send("tasks/cancel", json!({"taskId": cid}), true, Some(&cid))
        .await;
    poll(&mut raw, &cid, &["cancelled"]).await;

    // Inline, without the extension: a plain result, and an MRTR round.
    let r = raw
        .send(
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "Ada"}}),
            false,
            Some("greet"),
        )
        .await;
    s.core("CallToolResult", result(&r));
    assert_eq!(result(&r)["content"][0]["text"], "Hello, Ada!");
    let r = raw
        .send(
            "tools/call",
            json!({"name": "test_input_required_result_elicitation", "arguments": {}}),
            false,
            Some("test_input_required_result_elicitation"),
        )
        .await;
    s.core("InputRequiredResult", result(&r));
    assert_eq!(result(&r)["resultType"], "input_required");

    // Errors.
    let r = raw
        .send("tasks/get", json!({"taskId": "nope"}), true, Some("nope"))
        .await;
    error(&r, -32602);
    let r = raw
        .send("tasks/get", json!({"taskId": "nope"}), false, Some("nope"))
        .await;
    error(&r, -32021);
    assert_eq!(r.status, 400);
    let r = raw.send("tasks/list", json!({}), true, None).await;
    error(&r, -32601);
    let r = raw
        .send("tasks/result", json!({"taskId": id}), true, None)
        .await;
    error(&r, -32601);
    // Bad arguments: a tool error (C-TOOLS), not a JSON-RPC error.
    let r = raw
        .send(
            "tools/call",
            json!({"name": "confirm_delete", "arguments": {"filename": 7}}),
            true,
            Some("confirm_delete"),
        )
        .await;
    s.core("CallToolResult", result(&r));
    assert_eq!(result(&r)["isError"], true);
    let text = result(&r)["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("filename"), "{text}");
}

#[tokio::test]
async fn missing_mcp_name_on_tasks_is_tolerated_but_a_contradicting_one_is_refused() {
    let (_dir, server) = Server::fresh();
    let mut raw = Raw::new(&server.url);
    let r = raw
        .send(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0.1, "label": "h"}}),
            true,
            Some("slow_compute"),
        )
        .await;
    let id = result(&r)["taskId"].as_str().unwrap().to_owned();

    // Omitted `Mcp-Name`: served from the body's taskId.
    let r = raw
        .send("tasks/get", json!({"taskId": id}), true, None)
        .await;
    schemas().tasks("GetTaskResult", result(&r));

    // A header that contradicts the body: -32020, HTTP 400.
    let r = raw
        .send(
            "tasks/get",
            json!({"taskId": id}),
            true,
            Some("someone-else"),
        )
        .await;
    assert_eq!(r.status, 400);
    error(&r, -32020);
}

#[tokio::test]
async fn foreign_host_and_origin_are_refused() {
    let (_dir, server) = Server::fresh();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    let send = |host: Option<&str>, origin: Option<&str>| {
        let mut req = reqwest::Client::new()
            .post(&server.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", "server/discover")
            .json(&body);
        if let Some(h) = host {
            req = req.header("Host", h);
        }
        if let Some(o) = origin {
            req = req.header("Origin", o);
        }
        req.send()
    };
    assert_eq!(send(None, None).await.unwrap().status(), 200);
    assert_eq!(
        send(Some("evil.example.com"), None).await.unwrap().status(),
        403
    );
    assert_eq!(
        send(None, Some("http://evil.example.com"))
            .await
            .unwrap()
            .status(),
        403
    );
}

/// Answers checked (MRTR § Error Handling) on the wire: an answer that does
/// not fit the question's form is acked, not taken. `tasks/get` then shows
/// the task still `input_required`, the same key outstanding, and a
/// `statusMessage` naming the field; an answer that fits then completes the
/// task.
#[tokio::test]
async fn a_bad_answer_is_acked_and_the_question_stays_open() {
    let (_dir, server) = Server::fresh();
    let mut raw = Raw::new(&server.url);
    let s = schemas();
    let r = raw
        .send(
            "tools/call",
            json!({"name": "confirm_delete", "arguments": {"filename": "x"}}),
            true,
            Some("confirm_delete"),
        )
        .await;
    s.tasks("CreateTaskResult", result(&r));
    let id = result(&r)["taskId"].as_str().unwrap().to_owned();
    let parked = poll(&mut raw, &id, &["input_required"]).await;
    let question = parked["inputRequests"]["confirm"].clone();
    assert_eq!(question["method"], "elicitation/create", "{parked}");

    // Wrong type, a missing field, not an object at all: each is acked and
    // leaves the question open, its message naming what was wrong.
    let bad = [
        (
            json!({"action": "accept", "content": {"confirm": "yes"}}),
            "`confirm`",
        ),
        (json!({"action": "accept", "content": {}}), "\"confirm\""),
        (json!("yes"), "JSON object"),
    ];
    for (answer, names) in bad {
        let update = json!({"taskId": id, "inputResponses": {"confirm": answer}});
        let r = raw.send("tasks/update", update, true, Some(&id)).await;
        s.tasks("UpdateTaskResult", result(&r));
        assert_eq!(
            result(&r)["resultType"],
            "complete",
            "the ack: {}",
            result(&r)
        );

        let r = raw
            .send("tasks/get", json!({"taskId": id}), true, Some(&id))
            .await;
        let task = result(&r).clone();
        s.tasks("GetTaskResult", &task);
        assert_eq!(task["status"], "input_required", "{answer}: {task}");
        assert_eq!(
            task["inputRequests"],
            json!({"confirm": question}),
            "{answer}: the same key, the same question"
        );
        let message = task["statusMessage"].as_str().unwrap_or_default();
        assert!(
            message.contains("`confirm`") && message.contains(names),
            "{answer}: {message}"
        );
    }

    let good = json!({"action": "accept", "content": {"confirm": true}});
    let update = json!({"taskId": id, "inputResponses": {"confirm": good}});
    let r = raw.send("tasks/update", update, true, Some(&id)).await;
    assert_eq!(
        result(&r)["resultType"],
        "complete",
        "the ack: {}",
        result(&r)
    );
    let done = poll(&mut raw, &id, &["completed"]).await;
    s.core("CallToolResult", &done["result"]);
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"],
        "confirm_delete(x): confirmed = true"
    );
}

/// Answers checked (MRTR § Error Handling) in an MRTR round: an inline answer
/// that does not fit is asked again, under the same key, with a message that
/// says what was wrong.
#[tokio::test]
async fn a_bad_inline_answer_is_asked_again() {
    let (_dir, server) = Server::fresh();
    let mut raw = Raw::new(&server.url);
    let s = schemas();
    let call = json!({"name": "test_input_required_result_request_state", "arguments": {}});
    let name = Some("test_input_required_result_request_state");
    let r = raw.send("tools/call", call.clone(), false, name).await;
    let first = result(&r).clone();
    s.core("InputRequiredResult", &first);
    let schema = first["inputRequests"]["confirm"]["params"]["requestedSchema"].clone();
    assert!(schema.is_object(), "{first}");

    let mut again = call.clone();
    again["inputResponses"] = json!({"confirm": {"action": "accept", "content": {"ok": "yes"}}});
    again["requestState"] = first["requestState"].clone();
    let r = raw.send("tools/call", again, false, name).await;
    let second = result(&r).clone();
    s.core("InputRequiredResult", &second);
    let asked = &second["inputRequests"]["confirm"]["params"];
    assert_eq!(asked["requestedSchema"], schema, "{second}");
    let message = asked["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("not accepted") && message.contains("`ok`"),
        "{message}"
    );

    let mut last = call;
    last["inputResponses"] = json!({"confirm": {"action": "accept", "content": {"ok": true}}});
    last["requestState"] = second["requestState"].clone();
    let r = raw.send("tools/call", last, false, name).await;
    let done = result(&r).clone();
    s.core("CallToolResult", &done);
    assert_eq!(done["content"][0]["text"], "state-ok: confirmed = true");
}

/// A 2026-07-28 `tasks/get` as clients send it is answered at the HTTP
/// front door, without rmcp; the same request in a form it leaves to rmcp
/// (see `request::both_ways`) is answered by rmcp's transport and the
/// handler. The two answers are the same, byte for byte, whatever the
/// task's state, the poll's capabilities, its id and its log level; and so
/// are the refusals (an unknown or expired task, no tasks extension, a bad
/// log level).
#[tokio::test]
async fn a_poll_gets_the_same_answer_at_the_front_door_as_from_rmcp() {
    let (_dir, server) = Server::fresh();
    let mut raw = Raw::new(&server.url);
    let mut start = async |tool: &str, arguments: Value| {
        let params = json!({"name": tool, "arguments": arguments});
        let r = raw.send("tools/call", params, true, Some(tool)).await;
        result(&r)["taskId"].as_str().unwrap().to_owned()
    };
    let working = start("slow_compute", json!({"seconds": 3600, "label": "w"})).await;
    let asking = start("confirm_delete", json!({"filename": "a.txt"})).await;
    let done = start("slow_compute", json!({"seconds": 0, "label": "d"})).await;
    let failed = start("protocol_error_job", json!({})).await;
    let erred = start("failing_job", json!({})).await;
    let expired = start("short_lived", json!({})).await;
    let cancelled = start("slow_compute", json!({"seconds": 3600, "label": "c"})).await;
    let r = raw
        .send(
            "tasks/cancel",
            json!({"taskId": cancelled}),
            true,
            Some(&cancelled),
        )
        .await;
    result(&r);
    poll(&mut raw, &asking, &["input_required"]).await;
    poll(&mut raw, &done, &["completed"]).await;
    poll(&mut raw, &failed, &["failed"]).await;
    poll(&mut raw, &erred, &["completed"]).await;
    poll(&mut raw, &cancelled, &["cancelled"]).await;
    // `short_lived` is kept a second.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let tasks = json!({"io.modelcontextprotocol/tasks": {}});
    let capabilities = [
        json!({"elicitation": {}, "extensions": tasks}),
        json!({"extensions": tasks}),
        json!({"elicitation": {"url": {}}, "sampling": {}, "extensions": tasks}),
        json!({"elicitation": {}}),
    ];
    let unknown = "0123456789abcdef0123456789abcdef".to_owned();
    let ids = [
        working, asking, done, failed, erred, expired, cancelled, unknown,
    ];
    let http = reqwest::Client::new();
    let (mut answered, mut refused) = (0, 0);
    for (n, task) in ids.iter().enumerate() {
        for (c, caps) in capabilities.iter().enumerate() {
            for level in [None, Some("debug"), Some("loud")] {
                let mut meta = request::meta(true);
                meta["io.modelcontextprotocol/clientCapabilities"] = caps.clone();
                if let Some(level) = level {
                    meta["io.modelcontextprotocol/logLevel"] = json!(level);
                }
                let params = json!({"taskId": task, "_meta": meta});
                let id = if c % 2 == 0 {
                    json!(n)
                } else {
                    json!(format!("poll-{n}"))
                };
                let [plain, rmcp] = request::both_ways(|| {
                    request::post(
                        &http,
                        &server.url,
                        id.clone(),
                        "tasks/get",
                        &params,
                        Some(task),
                    )
                })
                .await;
                let shown = |w: &request::Wire| String::from_utf8_lossy(&w.2).into_owned();
                assert_eq!(plain, rmcp, "{}\nrmcp: {}", shown(&plain), shown(&rmcp));
                let body: Value = serde_json::from_slice(&plain.2).unwrap();
                if let Some(result) = body.get("result") {
                    schemas().tasks("GetTaskResult", result);
                    answered += 1;
                } else {
                    schemas().core("JSONRPCErrorResponse", &body);
                    refused += 1;
                }
            }
        }
    }
    // Six tasks, three capabilities with the extension, two good levels.
    assert_eq!((answered, refused), (36, 60));

    // A request nested as deep as the server allows (64 levels, the
    // default) is served; one level deeper is refused, whichever way.
    for (levels, served) in [(64, true), (65, false)] {
        let mut nested = json!([]);
        // The message, `params` and `_meta` are three levels.
        for _ in 4..levels {
            nested = json!([nested]);
        }
        let mut meta = request::meta(true);
        meta["x"] = nested;
        let params = json!({"taskId": ids[0], "_meta": meta});
        let [plain, rmcp] = request::both_ways(|| {
            request::post(
                &http,
                &server.url,
                json!(1),
                "tasks/get",
                &params,
                Some(&ids[0]),
            )
        })
        .await;
        assert_eq!(plain, rmcp, "{levels} levels");
        let body: Value = serde_json::from_slice(&plain.2).unwrap();
        assert_eq!(
            body.get("result").is_some(),
            served,
            "{levels} levels: {body}"
        );
    }
}
