//! Checkpoint closures infer their types: `?` on any error inside, `Ok(v)`
//! without a turbofish, helpers returning other error types, and `?` on
//! std errors in the fn.

use mcp_tasks_runtime::{ToolError, checkpoint, durable, task_tool};

#[derive(Debug)]
struct ApiError;

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the API said no")
    }
}

impl std::error::Error for ApiError {}

async fn call_api(n: u32) -> Result<u32, ApiError> {
    Ok(n + 1)
}

async fn helper(n: u32) -> Result<u32, ToolError> {
    Ok(n * 2)
}

#[task_tool]
async fn pipeline(input: String) -> Result<u32, ToolError> {
    let parsed = checkpoint("parse", || async {
        let n: u32 = input.trim().parse()?;
        Ok(n)
    })
    .await?;
    let called = checkpoint("call", || async { Ok(call_api(parsed).await?) }).await?;
    let doubled = checkpoint("double", || helper(called)).await?;
    let port: u16 = "8080".parse()?;
    let counted: u64 = durable::step("count", || async { 3 }).await;
    Ok(doubled + u32::from(port) + counted as u32)
}

fn main() {
    let _ = pipeline_tool();
}
