use std::sync::Arc;

use mcp_tasks_runtime::task_tool;

struct DbPool;

#[task_tool]
async fn count_rows(db: Arc<DbPool>, table: String) -> String {
    let _ = db;
    table
}

fn main() {}
