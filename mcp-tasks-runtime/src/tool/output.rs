//! How what a tool fn returns becomes its `CallToolResult` (as JSON): text,
//! structured content, a raw `CallToolResult`, or a tool error.

use std::{any::TypeId, fmt::Display};

use serde::Serialize;
use serde_json::{Value, json};

use super::{JsonObject, ToolOutcome, schema::object};
use crate::error::{RpcError, ToolError};

/// Whether `T` is rmcp's `CallToolResult`, passed through as it is.
fn is_raw<T: 'static>() -> bool {
    #[cfg(feature = "server")]
    {
        TypeId::of::<T>() == TypeId::of::<rmcp::model::CallToolResult>()
    }
    #[cfg(not(feature = "server"))]
    {
        let _ = TypeId::of::<T>;
        false
    }
}

/// The output schema of a tool returning `T`; a raw `CallToolResult` has none.
pub(crate) fn output_schema<T: schemars::JsonSchema + 'static>() -> Option<JsonObject> {
    if is_raw::<T>() {
        return None;
    }
    super::schema::output_schema::<T>()
}

/// The result of a fn that returned `value`.
pub(crate) fn success<T: Serialize + 'static>(value: &T) -> ToolOutcome {
    let json = serde_json::to_value(value)
        .map_err(|e| RpcError::internal(format!("the tool's output does not serialize: {e}")))?;
    Ok(match json {
        // A raw `CallToolResult`, passed through.
        Value::Object(mut map) if is_raw::<T>() => {
            map.remove("resultType");
            map
        }
        // `String`, `&str` and anything that serializes to a string: text.
        Value::String(text) => result(Some(text), None, false),
        // `()`: no content.
        Value::Null => result(None, None, false),
        // Structured: `structuredContent` plus its JSON as text.
        value @ Value::Object(_) => result(Some(value.to_string()), Some(value), false),
        // Numbers, booleans, arrays: their JSON as text.
        value => result(Some(value.to_string()), None, false),
    })
}

/// The result of a fn that returned `Err(error)`: a tool error (`isError:
/// true`) with the error's text, or the JSON-RPC error of a
/// [`ToolError::rpc`] or an [`RpcError`].
pub(crate) fn failure<E: Display + 'static>(error: &E) -> ToolOutcome {
    let any: &dyn std::any::Any = error;
    if any
        .downcast_ref::<ToolError>()
        .is_some_and(ToolError::is_cancelled)
    {
        // Ends the run `cancelled`; this outcome is what an inline call
        // (or a plain call outside any run) sees.
        crate::task::withdraw();
        return Ok(result(Some(error.to_string()), None, true));
    }
    if let Some(rpc) = any.downcast_ref::<ToolError>().and_then(ToolError::as_rpc) {
        return Err(rpc.clone());
    }
    if let Some(rpc) = any.downcast_ref::<RpcError>() {
        return Err(rpc.clone());
    }
    // `{:#}`: an `anyhow::Error` shows its whole context chain.
    Ok(result(Some(format!("{error:#}")), None, true))
}

fn result(text: Option<String>, structured: Option<Value>, is_error: bool) -> JsonObject {
    let content = match text {
        Some(t) => json!([{"type": "text", "text": t}]),
        None => json!([]),
    };
    let mut map = object(json!({"content": content}));
    if let Some(s) = structured {
        map.insert("structuredContent".into(), s);
    }
    map.insert("isError".into(), json!(is_error));
    map
}
