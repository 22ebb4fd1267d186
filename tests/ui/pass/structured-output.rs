//! A `Serialize + JsonSchema` struct is structured content with an output schema.

use mcp_tasks_runtime::{ToolError, task_tool};
use schemars::JsonSchema;
use serde::Serialize;

#[derive(Serialize, JsonSchema)]
struct Report {
    total: u32,
}

#[task_tool]
async fn report() -> Result<Report, ToolError> {
    Ok(Report { total: 3 })
}

#[task_tool]
async fn plain_report() -> Report {
    Report { total: 3 }
}

fn main() {
    let schema = report_tool().output_schema().expect("an output schema");
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], serde_json::json!(["total"]));
    assert!(plain_report_tool().output_schema().is_some());
}
