//! Every field kind a form can hold, `Option`s of them, and skipped fields.

use mcp_tasks_runtime::Elicit;
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema, Elicit)]
#[allow(dead_code)]
struct Everything {
    /// A string.
    text: String,
    flag: bool,
    small: i8,
    count: u64,
    size: usize,
    ratio: f64,
    maybe_text: Option<String>,
    maybe_count: Option<u32>,
    #[serde(skip)]
    internal: Vec<Vec<u8>>,
    #[serde(rename = "renamed")]
    r#type: String,
}

fn main() {
    let schema = <Everything as Elicit>::requested_schema();
    let props = schema["properties"].as_object().expect("properties");
    assert!(props.contains_key("renamed"));
    assert!(!props.contains_key("internal"));
    assert_eq!(props["maybe_text"]["type"], "string");
    assert_eq!(props["ratio"]["type"], "number");
}
