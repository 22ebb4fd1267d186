use mcp_tasks_runtime::{durable::step, task_tool};

/// Serializes, but cannot be read back from the journal.
#[derive(serde::Serialize)]
struct Report {
    lines: u32,
}

#[task_tool]
async fn report() -> String {
    let report = step("count", || async { Report { lines: 3 } }).await;
    report.lines.to_string()
}

fn main() {}
