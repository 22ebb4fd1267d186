use mcp_tasks_runtime::{State, task_tool};

struct Pool;

#[task_tool]
async fn ping(#[args] pool: State<Pool>) -> String {
    let _ = pool;
    "pong".into()
}

fn main() {}
