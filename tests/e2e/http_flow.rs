//! End to end over Streamable HTTP on 127.0.0.1: rmcp's client against the
//! conformance server process.

mod common;

use common::*;
use rmcp::{
    model::{
        CallToolResponse, CancelTaskParams, ErrorCode, GetTaskParams, TaskPayload, TaskStatus,
        UpdateTaskParams,
    },
    service::ServiceError,
};
use serde_json::json;

fn mcp_error(e: ServiceError) -> rmcp::ErrorData {
    match e {
        ServiceError::McpError(e) => e,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

#[tokio::test]
async fn call_task_input_required_update_completed() {
    let (_dir, server) = Server::fresh();
    let client = http_client(&server.url, true).await;
    let id = task_id(
        client
            .call_tool_once(call("confirm_delete", json!({"filename": "a.txt"})))
            .await
            .unwrap(),
    );

    let parked = poll_until(&client, &id, |t| t.status() == TaskStatus::InputRequired).await;
    let TaskPayload::InputRequired { input_requests } = &parked.payload else {
        unreachable!()
    };
    assert_eq!(input_requests.keys().collect::<Vec<_>>(), ["confirm"]);
    let request = serde_json::to_value(&input_requests["confirm"]).unwrap();
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "Delete a.txt?");
    assert_eq!(
        request["params"]["requestedSchema"]["properties"]["confirm"]["type"],
        "boolean"
    );

    // An answer to a key that is not outstanding is ignored (and acked).
    update(&client, &id, json!({"nope": {"action": "accept"}})).await;
    let still = client
        .peer()
        .get_task(GetTaskParams::new(id.clone()))
        .await
        .unwrap()
        .task;
    assert_eq!(still.status(), TaskStatus::InputRequired);

    update(
        &client,
        &id,
        json!({"confirm": {"action": "accept", "content": {"confirm": true}}}),
    )
    .await;
    let done = poll_until(&client, &id, is_terminal).await;
    assert_eq!(done.status(), TaskStatus::Completed);
    assert_eq!(
        result_text(&done),
        ("confirm_delete(a.txt): confirmed = true".to_owned(), false)
    );
}

#[tokio::test]
async fn two_questions_at_once_partial_answers() {
    let (_dir, server) = Server::fresh();
    let client = http_client(&server.url, true).await;
    let id = task_id(
        client
            .call_tool_once(call("multi_input", json!({})))
            .await
            .unwrap(),
    );
    let parked = poll_until(&client, &id, |t| t.status() == TaskStatus::InputRequired).await;
    let TaskPayload::InputRequired { input_requests } = &parked.payload else {
        unreachable!()
    };
    assert_eq!(
        input_requests.keys().collect::<Vec<_>>(),
        ["input-a", "input-b"]
    );

    let answer = |key: &str, v: &str| {
        serde_json::from_value(json!({key: {"action": "accept", "content": {"value": v}}})).unwrap()
    };
    client
        .peer()
        .update_task(UpdateTaskParams::new(id.clone(), answer("input-a", "x")))
        .await
        .unwrap();
    let half = client
        .peer()
        .get_task(GetTaskParams::new(id.clone()))
        .await
        .unwrap()
        .task;
    let TaskPayload::InputRequired { input_requests } = &half.payload else {
        panic!("{half:?}")
    };
    assert_eq!(input_requests.keys().collect::<Vec<_>>(), ["input-b"]);

    client
        .peer()
        .update_task(UpdateTaskParams::new(id.clone(), answer("input-b", "y")))
        .await
        .unwrap();
    let done = poll_until(&client, &id, is_terminal).await;
    assert_eq!(result_text(&done).0, "multi_input: a = x, b = y");
}

#[tokio::test]
async fn cancel_a_running_task_and_a_finished_one() {
    let (_dir, server) = Server::fresh();
    let client = http_client(&server.url, true).await;
    let id = task_id(
        client
            .call_tool_once(call("slow_compute", json!({"seconds": 60, "label": "x"})))
            .await
            .unwrap(),
    );
    client
        .peer()
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .unwrap();
    let t = poll_until(&client, &id, is_terminal).await;
    assert_eq!(t.status(), TaskStatus::Cancelled);
    // Cancelling a finished task is acknowledged and changes nothing.
    client
        .peer()
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .unwrap();
    let again = client
        .peer()
        .get_task(GetTaskParams::new(id))
        .await
        .unwrap()
        .task;
    assert_eq!(again.status(), TaskStatus::Cancelled);
}

#[tokio::test]
async fn tool_error_completes_with_is_error_and_protocol_error_fails() {
    let (_dir, server) = Server::fresh();
    let client = http_client(&server.url, true).await;
    let id = task_id(
        client
            .call_tool_once(call("failing_job", json!({})))
            .await
            .unwrap(),
    );
    let t = poll_until(&client, &id, is_terminal).await;
    assert_eq!(t.status(), TaskStatus::Completed);
    assert_eq!(
        result_text(&t),
        (
            "failing_job: intentional tool execution error".to_owned(),
            true
        )
    );

    let id = task_id(
        client
            .call_tool_once(call("protocol_error_job", json!({})))
            .await
            .unwrap(),
    );
    let t = poll_until(&client, &id, is_terminal).await;
    assert_eq!(t.status(), TaskStatus::Failed);
    let TaskPayload::Failed { error } = &t.payload else {
        unreachable!()
    };
    assert_eq!(error["code"], -32603);
    assert_eq!(
        error["message"],
        "protocol_error_job: intentional protocol-level failure"
    );
}

/// Checks a tool error (`isError: true`) whose text names `field`.
fn names_the_field(r: CallToolResponse, field: &str) {
    let CallToolResponse::Complete(result) = r else {
        panic!("expected a tool error, got {r:?}")
    };
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let text = result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default();
    assert!(text.contains(field), "the text names the field: {text}");
}

#[tokio::test]
async fn unknown_tasks_and_tools_are_invalid_params_and_bad_arguments_a_tool_error() {
    let (_dir, server) = Server::fresh();
    let client = http_client(&server.url, true).await;
    let e = mcp_error(
        client
            .peer()
            .get_task(GetTaskParams::new("no-such-task"))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
    assert!(e.message.contains("no-such-task"), "{e:?}");

    // Bad arguments: a tool execution error the model can correct (C-TOOLS).
    names_the_field(
        client
            .call_tool_once(call(
                "slow_compute",
                json!({"seconds": "soon", "label": "x"}),
            ))
            .await
            .unwrap(),
        "seconds",
    );
    names_the_field(
        client
            .call_tool_once(call("confirm_delete", json!({})))
            .await
            .unwrap(),
        "filename",
    );

    let e = mcp_error(
        client
            .call_tool_once(call("no_such_tool", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
    assert!(e.message.contains("no_such_tool"), "{e:?}");
}

#[tokio::test]
async fn without_the_extension_tools_run_inline_or_are_refused() {
    let (_dir, server) = Server::fresh();
    let client = http_client(&server.url, false).await;
    match client
        .call_tool_once(call("slow_compute", json!({"seconds": 0, "label": "now"})))
        .await
        .unwrap()
    {
        CallToolResponse::Complete(r) => {
            assert_eq!(
                r.content[0].as_text().unwrap().text,
                "slow_compute(now) done after 0s"
            );
        }
        other => panic!("expected a plain result, got {other:?}"),
    }
    let e = mcp_error(
        client
            .call_tool_once(call("failing_job", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, ErrorCode(-32021));
    assert_eq!(
        e.data.unwrap()["requiredCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
        json!({})
    );
    let e = mcp_error(
        client
            .peer()
            .get_task(GetTaskParams::new("whatever"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        e.code,
        ErrorCode(-32021),
        "the capability is checked before the id"
    );
}

#[tokio::test]
async fn inline_questions_round_trip_through_signed_request_state() {
    let (_dir, server) = Server::fresh();
    let client = http_client(&server.url, false).await;
    let CallToolResponse::InputRequired(first) = client
        .call_tool_once(call("test_input_required_result_multi_round", json!({})))
        .await
        .unwrap()
    else {
        panic!("expected input_required")
    };
    let requests = first.input_requests.clone().unwrap();
    assert_eq!(requests.keys().collect::<Vec<_>>(), ["step1"]);
    let state1 = first.request_state.clone().unwrap();

    let retry = |responses: serde_json::Value, state: String| {
        call("test_input_required_result_multi_round", json!({}))
            .with_input_responses(serde_json::from_value(responses).unwrap())
            .with_request_state(state)
    };
    let CallToolResponse::InputRequired(second) = client
        .call_tool_once(retry(
            json!({"step1": {"action": "accept", "content": {"name": "Ada"}}}),
            state1.clone(),
        ))
        .await
        .unwrap()
    else {
        panic!("expected a second round")
    };
    let state2 = second.request_state.clone().unwrap();
    assert_ne!(state1, state2);
    assert_eq!(
        second.input_requests.unwrap().keys().collect::<Vec<_>>(),
        ["step2"]
    );

    let CallToolResponse::Complete(done) = client
        .call_tool_once(retry(
            json!({"step2": {"action": "accept", "content": {"color": "green"}}}),
            state2.clone(),
        ))
        .await
        .unwrap()
    else {
        panic!("expected the result")
    };
    assert_eq!(done.content[0].as_text().unwrap().text, "Ada likes green");

    // A tampered state is refused with a clear error.
    let mut tampered = state2;
    tampered.push_str("-TAMPERED");
    let e = mcp_error(
        client
            .call_tool_once(retry(
                json!({"step2": {"action": "accept", "content": {"color": "red"}}}),
                tampered,
            ))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
    assert!(e.message.contains("requestState"), "{e:?}");
}

#[tokio::test]
async fn mrtr_then_task() {
    let (_dir, server) = Server::fresh();
    let client = http_client(&server.url, true).await;
    let CallToolResponse::InputRequired(first) = client
        .call_tool_once(call("test_tool_with_task", json!({})))
        .await
        .unwrap()
    else {
        panic!("expected input_required before any task exists")
    };
    assert!(
        first
            .input_requests
            .as_ref()
            .unwrap()
            .contains_key("user_name")
    );
    let retry = call("test_tool_with_task", json!({}))
        .with_input_responses(
            serde_json::from_value(
                json!({"user_name": {"action": "accept", "content": {"name": "Alice"}}}),
            )
            .unwrap(),
        )
        .with_request_state(first.request_state.unwrap());
    let id = match client.call_tool_once(retry).await.unwrap() {
        CallToolResponse::Task(t) => t.task.task_id,
        other => panic!("expected a task, got {other:?}"),
    };
    let t = poll_until(&client, &id, is_terminal).await;
    assert_eq!(result_text(&t).0, "Hello, Alice! (async)");
}
