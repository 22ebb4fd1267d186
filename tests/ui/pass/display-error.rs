//! Any `Display` error type is a tool error.

use std::fmt;

use mcp_tasks_runtime::{task_tool, tool::RpcError};

#[derive(Debug)]
enum DeployError {
    Quota,
}

impl fmt::Display for DeployError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Quota => f.write_str("quota exceeded"),
        }
    }
}

#[task_tool]
async fn deploy() -> Result<String, DeployError> {
    Err(DeployError::Quota)
}

#[task_tool]
async fn stringly() -> Result<String, String> {
    Err("nope".into())
}

#[task_tool]
async fn protocol() -> Result<String, RpcError> {
    Err(RpcError::internal("broken"))
}

fn main() {
    let _ = (deploy_tool(), stringly_tool(), protocol_tool());
}
