//! A raw `CallToolResult` is passed through as the tool's result.

use mcp_tasks_runtime::{ToolError, mcp::CallToolResult, task_tool};

#[task_tool]
async fn raw() -> Result<CallToolResult, ToolError> {
    Ok(CallToolResult::structured(serde_json::json!({"ok": true})))
}

#[task_tool]
async fn raw_plain() -> CallToolResult {
    CallToolResult::success(vec![rmcp::model::ContentBlock::text("done")])
}

fn main() {
    assert_eq!(raw_tool().output_schema(), None);
    assert_eq!(raw_plain_tool().output_schema(), None);
}
