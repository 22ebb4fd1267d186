//! Requests for a method of the protocol whose params do not fit it.
//!
//! rmcp types a request by trying each method's params in turn; when none
//! fits, the request reaches the handler as a custom request under its own
//! method name, and an unhandled custom request is answered `-32601` ("method
//! not found"). For a method the protocol defines, that is the wrong answer:
//! the method exists, its params are malformed, so the answer is `-32602`
//! naming what is wrong (tasks ext. § Task Creation; core MRTR § Error
//! Handling). [`refusal`] gives it, on every transport (the handler is where
//! rmcp's typing ends on all of them).

#[allow(deprecated)] // logging/setLevel: still served in sessions
use rmcp::model::SetLevelRequestParams;
use rmcp::{
    ErrorData as McpError,
    model::{
        CallToolRequestParams, CancelTaskParams, ClientCapabilities, CompleteRequestParams,
        CustomRequest, ErrorCode, GetPromptRequestParams, GetTaskParams, InitializeRequestParams,
        PaginatedRequestParams, ReadResourceRequestParams, SubscribeRequestParams,
        UnsubscribeRequestParams, UpdateTaskParams,
    },
};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::input::json_kind;

/// What a 2026-07-28 `ping` or `initialize` is renamed with on its way into
/// rmcp over stdio: this prefix, then the method. rmcp answers both itself
/// before a handler sees them (`ping` with `{}` before a client's first
/// request picks an era, as the sessions of earlier versions allow;
/// `initialize` with a 2025-11-25 handshake). 2026-07-28 has neither (core
/// Changelog), so one that says it is of that version is renamed by
/// [`rename_modern_removed`], and [`refusal`] answers it `-32601`.
const MODERN_PREFIX: &str = "mcp-tasks/2026-07-28/";

/// Renames a `ping` or `initialize` carrying a 2026-07-28 (or later)
/// `_meta` protocolVersion to [`MODERN_PREFIX`] and its name (stdio only:
/// over HTTP the envelope and rmcp answer them `-32601`). Whether it did.
pub(super) fn rename_modern_removed(message: &mut Value) -> bool {
    let modern = message
        .pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
        .and_then(Value::as_str)
        .is_some_and(|v| v >= rmcp::model::ProtocolVersion::NO_INITIALIZE.as_str());
    let method = message.get("method").and_then(Value::as_str);
    let Some(method) = method.filter(|m| modern && matches!(*m, "ping" | "initialize")) else {
        return false;
    };
    message["method"] = Value::String(format!("{MODERN_PREFIX}{method}"));
    true
}

/// Methods 2026-07-28 removed (core Changelog): its requests get `-32601` for
/// them, whatever their params, as the method is looked up before its params.
const REMOVED: &[&str] = &[
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// The answer to a custom request that is really a protocol method with
/// malformed params: `-32602` naming the problem (or `-32021` first for
/// `tasks/*` from a request that did not declare the extension, as rmcp
/// answers well-formed ones, tasks ext. § Error Handling). In a 2026-07-28
/// request (`modern`), a method that version removed is `-32601` instead.
/// `None` for any other method: those are the wrapped handler's to answer.
#[allow(deprecated)] // logging/setLevel
pub(crate) fn refusal(
    request: &CustomRequest,
    declares_tasks: bool,
    modern: bool,
) -> Option<McpError> {
    let method = request.method.as_str();
    let params = request.params.as_ref();
    let (method, modern) = match method.strip_prefix(MODERN_PREFIX) {
        Some(removed) => (removed, true),
        None => (method, modern),
    };
    if modern && REMOVED.contains(&method) {
        return Some(McpError::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("Method not found: `{method}` is not part of protocol version 2026-07-28"),
            None,
        ));
    }
    let problem = match method {
        "tools/call" => tool_call(params)
            .err()
            .or_else(|| typed::<CallToolRequestParams>(params)),
        "tasks/get" | "tasks/update" | "tasks/cancel" => {
            if !declares_tasks {
                return Some(McpError::missing_required_client_capability(
                    ClientCapabilities::builder().enable_tasks().build(),
                ));
            }
            task_request(method, params).err().or_else(|| match method {
                "tasks/get" => typed::<GetTaskParams>(params),
                "tasks/update" => typed::<UpdateTaskParams>(params),
                _ => typed::<CancelTaskParams>(params),
            })
        }
        "initialize" => typed::<InitializeRequestParams>(params),
        "prompts/get" => typed::<GetPromptRequestParams>(params),
        "resources/read" => typed::<ReadResourceRequestParams>(params),
        "resources/subscribe" => typed::<SubscribeRequestParams>(params),
        "resources/unsubscribe" => typed::<UnsubscribeRequestParams>(params),
        "completion/complete" => typed::<CompleteRequestParams>(params),
        "logging/setLevel" => typed::<SetLevelRequestParams>(params),
        "tools/list" | "prompts/list" | "resources/list" | "resources/templates/list" => {
            optional::<PaginatedRequestParams>(params)
        }
        _ => return None,
    };
    let problem = problem.unwrap_or_else(|| "the params do not fit the method".to_owned());
    Some(McpError::invalid_params(
        format!("invalid params for `{method}`: {problem}"),
        None,
    ))
}

/// `params` as an object, or what is wrong with it.
fn object(params: Option<&Value>) -> Result<&Map<String, Value>, String> {
    match params {
        Some(Value::Object(p)) => Ok(p),
        None | Some(Value::Null) => Err("`params` is missing".to_owned()),
        Some(other) => Err(format!(
            "`params` must be an object, not {}",
            json_kind(other)
        )),
    }
}

/// That `p[key]` is a string, or what is wrong with it (`what` says what
/// it holds).
fn string(p: &Map<String, Value>, key: &str, what: &str) -> Result<(), String> {
    match p.get(key) {
        Some(Value::String(_)) => Ok(()),
        None | Some(Value::Null) => Err(format!("`{key}` is missing: {what}")),
        Some(other) => Err(format!(
            "`{key}` must be a string, not {}",
            json_kind(other)
        )),
    }
}

fn tool_call(params: Option<&Value>) -> Result<(), String> {
    let p = object(params)?;
    string(p, "name", "the name of the tool to call")?;
    match p.get("arguments") {
        None | Some(Value::Null | Value::Object(_)) => Ok(()),
        Some(other) => Err(format!(
            "`arguments` must be an object mapping argument names to values, not {}",
            json_kind(other)
        )),
    }
}

fn task_request(method: &str, params: Option<&Value>) -> Result<(), String> {
    let p = object(params)?;
    string(p, "taskId", "the id of the task")?;
    if method != "tasks/update" {
        return Ok(());
    }
    match p.get("inputResponses") {
        Some(Value::Object(_)) => Ok(()),
        None | Some(Value::Null) => Err(
            "`inputResponses` is missing: an object mapping each answered inputRequests key \
             to its response (it may be empty)"
                .to_owned(),
        ),
        Some(other) => Err(format!(
            "`inputResponses` must be an object mapping inputRequests keys to responses, not {}",
            json_kind(other)
        )),
    }
}

/// What serde says is wrong with `params` as a `T`, if anything.
fn typed<T: DeserializeOwned>(params: Option<&Value>) -> Option<String> {
    let value = params.cloned().unwrap_or(Value::Null);
    serde_json::from_value::<T>(value)
        .err()
        .map(|e| e.to_string())
}

/// As [`typed`], for methods whose params may be left out.
fn optional<T: DeserializeOwned>(params: Option<&Value>) -> Option<String> {
    match params {
        None | Some(Value::Null) => None,
        Some(_) => typed::<T>(params),
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::ErrorCode;
    use serde_json::json;

    use super::*;

    fn custom(method: &str, params: Value) -> CustomRequest {
        CustomRequest::new(method.to_owned(), Some(params))
    }

    fn message(method: &str, params: Value) -> String {
        let e = refusal(&custom(method, params), true, true).expect("refused");
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
        e.message.into_owned()
    }

    #[test]
    fn names_the_problem() {
        assert!(message("tools/call", json!({"arguments": {}})).contains("`name` is missing"));
        assert!(
            message("tools/call", json!({"name": "x", "arguments": [1]}))
                .contains("`arguments` must be an object")
        );
        assert!(message("tasks/get", json!({})).contains("`taskId` is missing"));
        assert!(
            message("tasks/cancel", json!({"taskId": 3})).contains("`taskId` must be a string")
        );
        assert!(
            message("tasks/update", json!({"taskId": "t"})).contains("`inputResponses` is missing")
        );
        assert!(
            message("tasks/update", json!({"taskId": "t", "inputResponses": []}))
                .contains("`inputResponses` must be an object")
        );
        assert!(message("prompts/get", json!({})).contains("name"));
    }

    #[test]
    fn tasks_need_the_extension_first() {
        let e = refusal(&custom("tasks/get", json!({})), false, true).expect("refused");
        assert_eq!(e.code, ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY);
    }

    #[test]
    fn methods_2026_07_28_removed_are_not_found_in_its_requests() {
        for method in REMOVED {
            let modern = refusal(&custom(method, json!({})), true, true).expect("refused");
            assert_eq!(modern.code, ErrorCode::METHOD_NOT_FOUND, "{method}");
            let session = refusal(&custom(method, json!([])), true, false);
            assert!(
                session.is_none_or(|e| e.code == ErrorCode::INVALID_PARAMS),
                "{method}"
            );
        }
    }

    #[test]
    fn other_methods_are_left_alone() {
        assert!(refusal(&custom("tasks/result", json!({})), true, true).is_none());
        assert!(refusal(&custom("vendor/thing", json!([])), true, true).is_none());
    }
}
