use mcp_tasks_runtime::task_tool;

#[derive(Debug)]
struct Oops;

#[task_tool]
async fn fragile() -> Result<String, Oops> {
    Err(Oops)
}

mod errors {
    pub type Result<T> = std::result::Result<T, super::Oops>;
}

#[task_tool]
async fn fragile_alias() -> errors::Result<String> {
    Err(Oops)
}

fn main() {}
