//! `tasks/get` answered at the front door. A 2026-07-28 poll, as clients
//! send it, is read and answered here from the engine, without rmcp's
//! parse of the body, its checks of the headers against it and the service
//! it starts for each request: more than half of what a poll cost
//! (BENCHMARKS.md, "What a `tasks/get` costs, layer by layer").
//!
//! A request is answered here only when every rule it meets on rmcp's way
//! is known to pass, and it gets what that way answers, byte for byte (the
//! same types, serialized the same way, then `serverInfo` as `stamp` adds
//! it): the endpoint's path, no session, the headers rmcp asks for
//! (`Host` and `Origin` by rmcp's own check, `Content-Type`, `Accept`
//! without parameters, `MCP-Protocol-Version: 2026-07-28` equal to the
//! body's, `Mcp-Method` and `Mcp-Name` each once and equal to the body's,
//! `Mcp-Name` filled in as the edge fills it), the body within the JSON
//! limits (counted as `census` counts) and exactly `jsonrpc`, `id` (a string or an integer), `method`
//! and `params` holding exactly `taskId` and `_meta` (each key once), the
//! `_meta` rmcp requires, declaring the tasks extension, and a log level,
//! if any, that is one. The task is read as the handler reads it, for the
//! request's principal. Anything else, and every error (an unknown,
//! expired or foreign task, a store that fails), goes on to rmcp
//! unchanged and is answered there, as before.

use std::sync::Arc;

use axum::http::{HeaderMap, header, request::Parts};
use rmcp::model::{
    GetTaskResult, MetaObject, ProtocolVersion, RequestId, RequestMetaObject, ServerJsonRpcMessage,
    ServerResult,
};
use serde::Deserialize;
use serde_json::Value;

use super::{header_value, host_check::HostCheck};
use crate::{
    Engine,
    mcp::{
        envelope::{self, SERVER_INFO, census},
        options::JsonLimits,
        server::Settings,
        wire,
    },
};

/// What the front door needs to answer a `tasks/get` itself.
pub(super) struct FastGet {
    /// The endpoint's path, as the router routes it.
    pub(super) path: String,
    /// Fill a missing `Mcp-Name` from the body, as the edge does.
    pub(super) fill_names: bool,
    /// rmcp's checks of `Host` and `Origin`.
    pub(super) hosts: HostCheck,
    pub(super) limits: JsonLimits,
    pub(super) engine: Engine,
    /// The server's name and version, for `_meta`.
    pub(super) server_info: Value,
    /// Who makes a request.
    pub(super) settings: Arc<Settings>,
}

debug_fields!(FastGet |fast| path: fast.path, engine: fast.engine);

/// A `tasks/get` request, every field once and no other.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Poll<'a> {
    jsonrpc: &'a str,
    id: Value,
    method: &'a str,
    params: PollParams,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PollParams {
    #[serde(rename = "taskId")]
    task_id: String,
    #[serde(rename = "_meta")]
    meta: RequestMetaObject,
}

const METHOD: &str = "tasks/get";

/// The longest body counted after it is parsed rather than before: so
/// short a tree costs little to build.
const COUNTED_AFTER: usize = 4096;

/// Whether a poll whose `_meta` is `meta` is within `limits`, counted as
/// `census` counts: the message, its `jsonrpc`, `id`, `method`, `params`
/// and `taskId`, then `_meta`'s values, two levels down.
fn within(meta: &serde_json::Map<String, Value>, limits: JsonLimits) -> bool {
    fn all<'a>(values: impl Iterator<Item = &'a Value>) -> (usize, usize) {
        values
            .map(one)
            .fold((1, 1), |(n, d), (m, e)| (n + m, d.max(e + 1)))
    }
    fn one(value: &Value) -> (usize, usize) {
        match value {
            Value::Object(map) => all(map.values()),
            Value::Array(items) => all(items.iter()),
            _ => (1, 0),
        }
    }
    let (values, depth) = all(meta.values());
    6 + values <= limits.max_values && 2 + depth <= limits.max_depth
}

impl FastGet {
    /// The JSON-RPC answer to a `tasks/get` with this head and `body`, or
    /// `None` to serve it as before. May fill in `Mcp-Name`, as the edge
    /// does before rmcp reads the request.
    pub(super) async fn answer(&self, head: &mut Parts, body: &[u8]) -> Option<Vec<u8>> {
        let (id, task_id, meta) = self.read(head, body)?;
        let caps = meta.client_capabilities()?;
        if !caps.supports_tasks() || !self.hosts.passes(head).await {
            return None;
        }
        let principal = self.settings.principal(Some(head));
        let record = self.engine.get(&task_id, principal.as_deref()).await.ok()?;
        let shown = wire::Caller::of(Some(&caps)).input;
        let mut result = GetTaskResult::new(wire::detailed(record, shown).ok()?);
        let mut meta = MetaObject::default();
        meta.0.insert(SERVER_INFO.into(), self.server_info.clone());
        result.meta = Some(meta);
        let message = ServerJsonRpcMessage::response(ServerResult::GetTaskResult(result), id);
        let answer = serde_json::to_vec(&message).ok()?;
        crate::metrics::poll();
        Some(answer)
    }

    /// The request's id, task id and `_meta`, when its head and body are a
    /// poll rmcp would serve (all but `Host`, `Origin` and the capabilities).
    fn read(
        &self,
        head: &mut Parts,
        body: &[u8],
    ) -> Option<(RequestId, String, RequestMetaObject)> {
        let version = ProtocolVersion::V_2026_07_28;
        let headers = &head.headers;
        let plain = head.uri.path() == self.path
            && !headers.contains_key("mcp-session-id")
            && only(headers, "mcp-method") == Some(METHOD)
            && headers.get("mcp-protocol-version").map(|v| v.as_bytes()) == Some(version.as_str().as_bytes())
            && content_is_json(headers)
            && accepts_json_and_sse(headers)
            // A short body is counted once parsed (see `within`).
            && (body.len() <= COUNTED_AFTER || census(body, self.limits, "body").is_ok());
        if !plain {
            return None;
        }
        let poll: Poll<'_> = serde_json::from_slice(body).ok()?;
        let id = match &poll.id {
            Value::String(_) => serde_json::from_value(poll.id).ok()?,
            Value::Number(n) if n.is_i64() => serde_json::from_value(poll.id).ok()?,
            _ => return None,
        };
        let meta = poll.params.meta;
        let level = meta.get("io.modelcontextprotocol/logLevel");
        if poll.jsonrpc != "2.0"
            || poll.method != METHOD
            || meta
                .get("io.modelcontextprotocol/protocolVersion")
                .and_then(Value::as_str)
                != Some(version.as_str())
            || level.is_some_and(|l| !envelope::is_log_level(l))
            || (body.len() <= COUNTED_AFTER && !within(&meta, self.limits))
        {
            return None;
        }
        let task_id = poll.params.task_id;
        if self.fill_names && !head.headers.contains_key("mcp-name") {
            head.headers.insert("mcp-name", header_value(&task_id)?);
        }
        (only(&head.headers, "mcp-name") == Some(task_id.as_str())).then_some((id, task_id, meta))
    }
}

/// The one value of header `name`, if it has exactly one and it is text.
fn only<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    values
        .next()
        .is_none()
        .then(|| value.to_str().ok())
        .flatten()
}

/// rmcp's check of `Content-Type`: `application/json`, parameters allowed.
fn content_is_json(headers: &HeaderMap) -> bool {
    let Some(Ok(value)) = headers.get(header::CONTENT_TYPE).map(|v| v.to_str()) else {
        return false;
    };
    let essence = value.split_once(';').map_or(value, |(e, _)| e);
    essence.trim().eq_ignore_ascii_case("application/json")
}

/// Whether `Accept` lists both `application/json` and `text/event-stream`,
/// as rmcp requires, in a plain list: with parameters (a `q`) or quotes,
/// rmcp decides.
fn accepts_json_and_sse(headers: &HeaderMap) -> bool {
    let (mut json, mut sse) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        if value.contains([';', '"']) {
            return false;
        }
        for essence in value.split(',').map(str::trim) {
            json |= essence.eq_ignore_ascii_case("application/json");
            sse |= essence.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && sse
}
