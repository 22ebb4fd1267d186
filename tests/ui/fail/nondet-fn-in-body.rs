use std::time::SystemTime;

use mcp_tasks_runtime::task_tool;

#[task_tool]
async fn stamp() -> String {
    fn now_secs() -> u64 {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    }
    now_secs().to_string()
}

fn main() {}
