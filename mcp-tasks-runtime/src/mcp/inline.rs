//! MRTR rounds of an inline call: the journal travels to the client and back
//! in `requestState`, sealed (HMAC, with a TTL) by rmcp's `RequestStateCodec`
//! and bound to the caller, the tool and its arguments, so it cannot be
//! replayed for another call or forged.

use rmcp::{
    ErrorData as McpError,
    model::{RequestStateCodec, SealOptions},
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

use crate::{journal::JournalEntry, tool::JsonObject};

/// What an MRTR `requestState` carries between rounds of an inline call.
#[derive(Serialize, Deserialize)]
struct InlineState {
    journal: Vec<JournalEntry>,
}

/// Binds a `requestState` to the caller, the tool and its arguments.
pub(super) fn state_binding(principal: Option<&str>, tool: &str, args: &JsonObject) -> Vec<u8> {
    let mut ad = principal.unwrap_or_default().as_bytes().to_vec();
    ad.push(0);
    ad.extend(tool.as_bytes());
    ad.push(0);
    canonical(&Value::Object(args.clone()), &mut ad);
    ad
}

/// Writes `v` as JSON with object keys sorted at every level, so that the
/// binding does not depend on the order a client sends keys in (serde_json
/// keeps insertion order when a crate in the build enables `preserve_order`).
fn canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push(b'{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical(&Value::String(k.clone()), out);
                out.push(b':');
                canonical(&map[k], out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical(item, out);
            }
            out.push(b']');
        }
        scalar => out.extend(serde_json::to_vec(scalar).unwrap_or_default()),
    }
}

/// Opens a `requestState` the server sealed for this binding.
pub(super) fn open(
    codec: &RequestStateCodec,
    sealed: &str,
    binding: &[u8],
) -> Result<Vec<JournalEntry>, McpError> {
    codec
        .open_json_with::<InlineState>(sealed, binding)
        .map(|state| state.journal)
        .map_err(|e| {
            McpError::invalid_params(
                format!(
                    "invalid requestState (it must come back exactly as the server sent it): {e}"
                ),
                None,
            )
        })
}

/// Seals `journal` for the next round.
pub(super) fn seal(
    codec: &RequestStateCodec,
    journal: Vec<JournalEntry>,
    binding: &[u8],
    ttl: Duration,
) -> Result<String, McpError> {
    codec
        .seal_json_with(
            &InlineState { journal },
            &SealOptions::new().associated_data(binding).ttl(ttl),
        )
        .map_err(|e| McpError::internal_error(e.to_string(), None))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::state_binding;

    #[test]
    fn binding_ignores_key_order_but_not_values_tools_or_principals() {
        let a = json!({"b": 1, "a": {"y": [1, {"q": 2, "p": 3}], "x": "s"}});
        let b = json!({"a": {"x": "s", "y": [1, {"p": 3, "q": 2}]}, "b": 1});
        let (a, b) = (a.as_object().unwrap(), b.as_object().unwrap());
        assert_eq!(state_binding(None, "t", a), state_binding(None, "t", b));
        assert_ne!(state_binding(None, "t", a), state_binding(None, "u", a));
        assert_ne!(
            state_binding(Some("alice"), "t", a),
            state_binding(Some("bob"), "t", a)
        );
        let c = json!({"b": 2, "a": {"x": "s", "y": [1, {"p": 3, "q": 2}]}});
        assert_ne!(
            state_binding(None, "t", a),
            state_binding(None, "t", c.as_object().unwrap())
        );
    }
}
