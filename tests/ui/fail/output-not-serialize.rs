use mcp_tasks_runtime::{ToolError, task_tool};

struct Report {
    total: u32,
}

#[task_tool]
async fn report() -> Result<Report, ToolError> {
    Ok(Report { total: 1 })
}

fn main() {}
