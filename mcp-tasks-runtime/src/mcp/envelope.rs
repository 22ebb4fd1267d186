//! The JSON-RPC envelope of an HTTP request, checked before rmcp reads it,
//! and `_meta.serverInfo` on the answers to 2026-07-28 requests.
//!
//! rmcp answers a body it cannot type with HTTP 415 and a text body, and
//! serves a request that names no protocol version at all as a 2025-03-26
//! one. The spec asks otherwise:
//!
//! | body | answer | wire rules |
//! |---|---|---|
//! | not JSON | `-32700`, HTTP 400, no `id` | core Basic (JSON-RPC), Streamable HTTP |
//! | a batch (array), not an object, `id: null`, no `method` | `-32600`, HTTP 400 | core Basic (JSON-RPC), Streamable HTTP |
//! | a request or notification whose `params` is not an object (`[1]`, `"x"`, `5`) | `-32602` naming what it is, HTTP 400 (without `id` for a notification) | core Streamable HTTP, schema `Request.params` |
//! | `initialize` as a 2026-07-28 request (that version in the `MCP-Protocol-Version` header or `_meta`) | `-32601`, HTTP 404, and no session | core Streamable HTTP; Changelog (removed methods) |
//! | a request outside a session (not `initialize`) with neither the `MCP-Protocol-Version` header nor `_meta` protocolVersion | `-32602`, HTTP 400, naming both | core Basic § `_meta` |
//! | the same with a header naming a version the server does not serve | `-32022` with `supported` and `requested`, HTTP 400 | core Versioning |
//!
//! A refused body still goes through rmcp's checks of the request's headers
//! (`Host`, `Origin`, `Accept`, `Content-Type`), so a request that fails
//! those gets rmcp's answer (403, 406, 415) as before: rmcp is handed a body
//! that cannot parse, and only when what it answers is that failure is the
//! refusal sent instead. Nothing reaches a handler.

use std::sync::LazyLock;

use axum::{
    body::{Body, Bytes, to_bytes},
    extract::Request,
    http::{HeaderMap, StatusCode, header, request::Parts},
    middleware::Next,
    response::{IntoResponse as _, Response},
};
use memchr::memmem::Finder;
use rmcp::model::{ErrorCode, ErrorData, JsonRpcError, ProtocolVersion, RequestId};
use serde_json::{Map, Value, json};

mod census;

pub(super) use census::census;

use super::options::JsonLimits;
use crate::Engine;

/// The `_meta` key of the server's name and version (core Basic § `_meta`).
pub(super) const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// The `_meta` key of a request's protocol version (core Basic § `_meta`).
const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

/// Largest answer body [`Front::stamp`] reads to add `_meta` (a larger one
/// is sent as it is).
const STAMP_LIMIT: usize = 16 * 1024 * 1024;

/// What the HTTP edge knows of the server: the versions it serves, and its
/// name and version for `_meta`.
#[derive(Debug)]
pub(super) struct Front {
    supported: Vec<ProtocolVersion>,
    server_info: Value,
    limits: JsonLimits,
    engine: Engine,
}

/// What [`Front::inspect`] makes of a request body.
pub(super) struct Inspection {
    /// The answer instead of serving the request, if it is refused.
    pub(super) refusal: Option<Refusal>,
    /// Whether it is a 2026-07-28 request (outside a session, with a
    /// protocol version in its `_meta`), whose result gets `serverInfo`.
    pub(super) modern: bool,
    /// The body, parsed, when it is served: the edge reads and rewrites
    /// it without parsing it again.
    pub(super) message: Option<Value>,
}

/// A request refused before rmcp types it.
pub(super) struct Refusal {
    id: Option<RequestId>,
    error: ErrorData,
    status: StatusCode,
}

impl Front {
    pub(super) fn new(
        supported: Vec<ProtocolVersion>,
        server_info: Value,
        limits: JsonLimits,
        engine: Engine,
    ) -> Self {
        Self {
            supported,
            server_info,
            limits,
            engine,
        }
    }

    /// Checks a POST body (and, outside a session, its protocol version).
    /// A body over [`JsonLimits`] is refused by [`census`] before any tree
    /// of it is built.
    pub(super) fn inspect(&self, headers: &HeaderMap, body: &[u8]) -> Inspection {
        let in_session = headers.contains_key("mcp-session-id");
        if let Err((id, error)) = census(body, self.limits, "body") {
            return refused(id, error, StatusCode::BAD_REQUEST);
        }
        let message: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => {
                let error = ErrorData::parse_error(
                    format!("Parse error: the body is not JSON ({e})"),
                    None,
                );
                return refused(None, error, StatusCode::BAD_REQUEST);
            }
        };
        if let Err((id, error)) = check(&message) {
            return refused(id, error, StatusCode::BAD_REQUEST);
        }
        let Some(obj) = message.as_object() else {
            let error = invalid_request("the body is not a JSON-RPC message");
            return refused(None, error, StatusCode::BAD_REQUEST);
        };
        let id = obj.get("id").and_then(request_id);
        let method = obj.get("method").and_then(Value::as_str);
        let meta_version = obj
            .get("params")
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(PROTOCOL_VERSION));
        let modern = !in_session && meta_version.is_some();
        let is_request = method.is_some() && id.is_some();
        if let Some((id, error)) = refuse_while_draining(&message, &self.engine) {
            return refused(Some(id), error, StatusCode::OK);
        }
        if method == Some("initialize") && !in_session && stateless(headers, meta_version) {
            let error = ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                "Method not found: `initialize` is not part of protocol version 2026-07-28, \
                 whose requests need no handshake (`server/discover` tells what the server \
                 supports)",
                None,
            );
            return refused(id, error, StatusCode::NOT_FOUND);
        }
        if in_session || !is_request || method == Some("initialize") || meta_version.is_some() {
            return Inspection {
                refusal: None,
                modern,
                message: Some(message),
            };
        }
        let refusal = match headers.get("mcp-protocol-version").map(|v| v.to_str()) {
            // rmcp answers a header it cannot read.
            Some(Err(_)) => None,
            Some(Ok(version)) => {
                let version = version.trim();
                let served = self.supported.iter().any(|v| v.as_str() == version);
                (!served).then(|| Refusal {
                    id,
                    error: ErrorData::unsupported_protocol_version(
                        serde_json::from_value(json!(version))
                            .unwrap_or(ProtocolVersion::V_2026_07_28),
                        &self.supported,
                    ),
                    status: StatusCode::BAD_REQUEST,
                })
            }
            None => Some(Refusal {
                id,
                error: ErrorData::invalid_params(
                    format!(
                        "Invalid params: the request names no protocol version: a 2026-07-28 \
                         request carries the `MCP-Protocol-Version` header and \
                         `params._meta[\"{PROTOCOL_VERSION}\"]` (with \
                         `io.modelcontextprotocol/clientCapabilities`); clients of earlier \
                         versions open a session with `initialize`"
                    ),
                    None,
                ),
                status: StatusCode::BAD_REQUEST,
            }),
        };
        Inspection {
            refusal,
            modern,
            message: Some(message),
        }
    }

    /// Adds `_meta["io.modelcontextprotocol/serverInfo"]` to the result in
    /// a JSON answer, unless it has one (`serverInfo`), and drops the empty
    /// `elicitationId`s rmcp writes into URL-mode `inputRequests`
    /// ([`drop_empty_elicitation_ids`]). Other answers (errors, event
    /// streams, 202s) are passed on as they are.
    pub(super) async fn stamp(&self, response: Response) -> Response {
        let is_json = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if response.status() != StatusCode::OK || !is_json {
            return response;
        }
        let (mut parts, body) = response.into_parts();
        let bytes = match to_bytes(body, STAMP_LIMIT).await {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::warn!(error = %crate::id::Redacted(&e), "could not read an answer to add serverInfo");
                return StatusCode::INTERNAL_SERVER_ERROR.into_response();
            }
        };
        let (body, changed) = self.stamped(bytes);
        if changed {
            parts.headers.remove(header::CONTENT_LENGTH);
        }
        Response::from_parts(parts, Body::from(body))
    }

    /// A JSON answer's body as [`stamp`](Self::stamp) sends it, and whether
    /// that changed it.
    pub(super) fn stamped(&self, bytes: Bytes) -> (Bytes, bool) {
        // The hot results (`tasks/get`, a created task) carry `serverInfo`
        // from where they were built: they are passed on without being
        // parsed again, unless one holds an empty `elicitationId`. (A result
        // whose own content uses the `serverInfo` key as an object key is
        // taken as stamped too: its `_meta` then goes without it.)
        if contains(&bytes, &SERVER_INFO_KEY) && !contains(&bytes, &EMPTY_ELICITATION_ID) {
            return (bytes, false);
        }
        let Ok(mut message) = serde_json::from_slice::<Value>(&bytes) else {
            return (bytes, false);
        };
        let dropped = drop_empty_elicitation_ids(&mut message);
        if !add_server_info(&mut message, &self.server_info) && !dropped {
            return (bytes, false);
        }
        match serde_json::to_vec(&message) {
            Ok(stamped) => (stamped.into(), true),
            Err(_) => (bytes, false),
        }
    }
}

/// A searcher for bytes looked for in every answer, built once (building
/// one cost more than the search itself on a `tasks/get`).
type Needle = LazyLock<Finder<'static>>;

/// [`SERVER_INFO`] as a key in serialized JSON.
static SERVER_INFO_KEY: Needle =
    LazyLock::new(|| Finder::new(b"\"io.modelcontextprotocol/serverInfo\":"));
/// An empty `elicitationId`, as serde_json writes it.
static EMPTY_ELICITATION_ID: Needle = LazyLock::new(|| Finder::new(b"\"elicitationId\":\"\""));

/// Whether `haystack` holds `needle`.
fn contains(haystack: &[u8], needle: &Needle) -> bool {
    needle.find(haystack).is_some()
}

/// Drops the empty `elicitationId` rmcp writes into the URL-mode
/// elicitations of a 2026-07-28 result's `inputRequests` (that revision has
/// no such field); whether it dropped any.
pub(super) fn drop_empty_elicitation_ids(message: &mut Value) -> bool {
    message
        .get_mut("result")
        .is_some_and(super::wire::drop_empty_elicitation_ids)
}

/// Adds `_meta["io.modelcontextprotocol/serverInfo"]` to the result of a
/// JSON-RPC response (`serverInfo`), unless it has one; whether it did.
/// Errors and notifications are left alone.
pub(super) fn add_server_info(message: &mut Value, server_info: &Value) -> bool {
    let Some(result) = message.get_mut("result").and_then(Value::as_object_mut) else {
        return false;
    };
    let meta = result
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    match meta.as_object_mut() {
        Some(meta) if !meta.contains_key(SERVER_INFO) => {
            meta.insert(SERVER_INFO.into(), server_info.clone());
            true
        }
        _ => false,
    }
}

impl Refusal {
    /// Answers the refusal once rmcp's checks of the request's headers
    /// pass: rmcp gets a body it cannot parse, and its answer is sent when
    /// it is anything but that parse failure.
    pub(super) async fn answer(self, parts: Parts, next: Next) -> Response {
        let probe = Request::from_parts(parts, Body::from(&b"\0"[..]));
        let response = next.run(probe).await;
        if response.status() != StatusCode::UNSUPPORTED_MEDIA_TYPE {
            return response;
        }
        let (parts, body) = response.into_parts();
        let text = to_bytes(body, 64 * 1024).await.unwrap_or_default();
        if !text.starts_with(b"fail to deserialize") {
            return Response::from_parts(parts, Body::from(text));
        }
        let body = serde_json::to_vec(&JsonRpcError::new(self.id, self.error))
            .unwrap_or_else(|_| b"{}".to_vec());
        (
            self.status,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response()
    }
}

/// Checks that `message` is one JSON-RPC message whose `params`, if any, are
/// an object; otherwise the error to answer, and the message's id when it has
/// a valid one (core Basic, Streamable HTTP). Both transports check with it.
pub(super) fn check(message: &Value) -> Result<(), (Option<RequestId>, ErrorData)> {
    let Some(obj) = message.as_object() else {
        let what = if message.is_array() {
            "send one JSON-RPC message at a time; batches are not supported"
        } else {
            "not a JSON-RPC message (an object)"
        };
        return Err((None, invalid_request(what)));
    };
    let id = obj.get("id").and_then(request_id);
    if let Some(problem) = envelope_problem(obj) {
        return Err((id, invalid_request(&problem)));
    }
    if let Some(problem) = params_problem(obj) {
        return Err((id, ErrorData::invalid_params(problem, None)));
    }
    if let Some(error) = log_level_problem(obj) {
        return Err((id, error));
    }
    Ok(())
}

/// The `_meta` key of the level of log messages a request asks for.
const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// The levels of `notifications/message`, least severe first (RFC 5424,
/// as the schema's `LoggingLevel`).
const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// `-32602` for a request whose `_meta` names a log level that is none of
/// [`LOG_LEVELS`] (`"loud"`, `5`): served as if it named none, it would get
/// no log messages without a word.
fn log_level_problem(obj: &Map<String, Value>) -> Option<ErrorData> {
    let method = obj.get("method")?.as_str()?;
    let level = obj.get("params")?.get("_meta")?.get(LOG_LEVEL)?;
    if is_log_level(level) {
        return None;
    }
    let shown = match level {
        Value::String(s) => format!("{:?}", s.chars().take(64).collect::<String>()),
        Value::Number(n) => n.to_string(),
        other => crate::input::json_kind(other).to_owned(),
    };
    Some(ErrorData::invalid_params(
        format!(
            "Invalid params: `params._meta[\"{LOG_LEVEL}\"]` of `{method}` is {shown}, not a log \
             level: one of {}",
            LOG_LEVELS.join(", ")
        ),
        Some(json!({"field": format!("params._meta.{LOG_LEVEL}"), "accepted": LOG_LEVELS})),
    ))
}

/// Whether `level` names one of [`LOG_LEVELS`].
pub(super) fn is_log_level(level: &Value) -> bool {
    level.as_str().is_some_and(|l| LOG_LEVELS.contains(&l))
}

/// Whether a request names a version without `initialize` (2026-07-28 or
/// later) in its `MCP-Protocol-Version` header or its `_meta`: a request of
/// the stateless era, whatever else it says.
fn stateless(headers: &HeaderMap, meta_version: Option<&Value>) -> bool {
    let header = headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    let meta = meta_version.and_then(Value::as_str);
    [header, meta]
        .into_iter()
        .flatten()
        .any(|v| v >= ProtocolVersion::NO_INITIALIZE.as_str())
}

/// The answer to a `tools/call` request that comes while the engine drains
/// ([`Engine::admit_call`]): refused here, before rmcp, which would log a
/// WARN for each (the drain's own lines say how many were refused). Both
/// transports ask it.
pub(super) fn refuse_while_draining(
    message: &Value,
    engine: &Engine,
) -> Option<(RequestId, ErrorData)> {
    if message.get("method").and_then(Value::as_str) != Some("tools/call") {
        return None;
    }
    let id = message.get("id").and_then(request_id)?;
    let refused = engine.admit_call().err()?;
    Some((id, refused.into()))
}

fn refused(id: Option<RequestId>, error: ErrorData, status: StatusCode) -> Inspection {
    Inspection {
        refusal: Some(Refusal { id, error, status }),
        modern: false,
        message: None,
    }
}

fn invalid_request(problem: &str) -> ErrorData {
    ErrorData::invalid_request(format!("Invalid Request: {problem}"), None)
}

/// A JSON-RPC id as the spec allows it: a string or an integer.
pub(super) fn request_id(v: &Value) -> Option<RequestId> {
    match v {
        Value::String(_) => serde_json::from_value(v.clone()).ok(),
        Value::Number(n) if n.is_i64() || n.is_u64() => serde_json::from_value(v.clone()).ok(),
        _ => None,
    }
}

/// What is wrong with the `params` of a request or notification, if
/// anything: MCP's are an object (or left out). rmcp cannot type a message
/// with other `params`, and would answer with a bare HTTP 415.
fn params_problem(obj: &Map<String, Value>) -> Option<String> {
    let params = obj.get("params")?;
    if params.is_object() || params.is_null() || !obj.contains_key("method") {
        return None;
    }
    let method = obj
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Some(format!(
        "Invalid params: `params` of `{method}` must be an object, not {}",
        crate::input::json_kind(params)
    ))
}

/// What makes `obj` no JSON-RPC 2.0 message, if anything.
fn envelope_problem(obj: &Map<String, Value>) -> Option<String> {
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Some("`jsonrpc` must be \"2.0\"".to_owned());
    }
    if let Some(id) = obj.get("id")
        && request_id(id).is_none()
    {
        return Some(if id.is_null() {
            "`id` must be a string or an integer, never null".to_owned()
        } else {
            "`id` must be a string or an integer".to_owned()
        });
    }
    match obj.get("method") {
        Some(Value::String(_)) => None,
        Some(_) => Some("`method` must be a string".to_owned()),
        // A client's answer to a request of the server's.
        None if obj.contains_key("id")
            && (obj.contains_key("result") || obj.contains_key("error")) =>
        {
            None
        }
        None => Some("no `method`: neither a request nor a notification".to_owned()),
    }
}
