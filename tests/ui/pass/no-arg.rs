//! A tool without parameters takes an empty object.

use mcp_tasks_runtime::task_tool;

#[task_tool]
async fn now() -> String {
    "12:00".into()
}

fn main() {
    assert_eq!(
        serde_json::Value::Object(now_tool().input_schema()),
        serde_json::json!({"type": "object", "additionalProperties": false})
    );
}
