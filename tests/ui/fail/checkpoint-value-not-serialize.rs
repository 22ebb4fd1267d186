use mcp_tasks_runtime::{ToolError, checkpoint, task_tool};

/// A connection: not something to journal.
struct Connection {
    port: u16,
}

#[task_tool]
async fn connect() -> Result<String, ToolError> {
    let conn = checkpoint("connect", || async { Ok(Connection { port: 5432 }) }).await?;
    Ok(conn.port.to_string())
}

fn main() {}
