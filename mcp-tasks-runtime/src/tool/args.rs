//! Decoding a call's arguments, with errors that name the field.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::JsonObject;

/// Decodes `value`; on failure, `(path inside the value, problem)`, as
/// `serde_path_to_error` reports them (`.` is the root).
pub(crate) fn decode_at<T: DeserializeOwned>(value: Value) -> Result<T, (String, String)> {
    serde_path_to_error::deserialize(value)
        .map_err(|e| (e.path().to_string(), e.inner().to_string()))
}

/// The message for a bad parameter `name`: the problem at `name`, or at a
/// path inside it.
pub(crate) fn parameter_error(name: &str, (path, problem): (String, String)) -> String {
    if path == "." {
        format!("`{name}`: {problem}")
    } else {
        format!("`{name}.{path}`: {problem}")
    }
}

/// The message for a bad `#[args]` struct: the problem, naming the field.
pub(crate) fn struct_error((path, problem): (String, String)) -> String {
    if path == "." {
        problem
    } else {
        format!("`{path}`: {problem}")
    }
}

/// Checks the arguments of a tool that takes none, as its schema says.
pub(crate) fn no_args(arguments: &JsonObject) -> Result<(), String> {
    match arguments.keys().next() {
        None => Ok(()),
        Some(name) => Err(format!(
            "unexpected argument `{name}`: this tool takes no arguments"
        )),
    }
}
