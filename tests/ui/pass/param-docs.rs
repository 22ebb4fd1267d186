//! Parameter doc comments become argument descriptions; `mut` parameters and
//! raw identifiers keep working; the fn stays callable as written.

use mcp_tasks_runtime::task_tool;

/// Repeats a word.
///
/// Returns it `times` times.
#[task_tool]
pub async fn repeat(
    /// The word.
    word: String,
    /// How often (default 2).
    mut times: Option<usize>,
    r#type: Option<String>,
) -> String {
    let n = times.take().unwrap_or(2);
    let _ = r#type;
    word.repeat(n)
}

#[task_tool]
async fn r#match() {}

fn main() {
    let d = repeat_tool();
    assert_eq!(
        d.description(),
        Some("Repeats a word.\n\nReturns it `times` times.")
    );
    let schema = d.input_schema();
    assert_eq!(schema["properties"]["word"]["description"], "The word.");
    assert_eq!(
        schema["properties"]["times"]["description"],
        "How often (default 2)."
    );
    assert!(schema["properties"].get("type").is_some());
    assert_eq!(schema["required"], serde_json::json!(["word"]));
    assert_eq!(match_tool().name(), "match");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert_eq!(rt.block_on(repeat("ab".into(), Some(3), None)), "ababab");
}
