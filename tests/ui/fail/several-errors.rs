//! Every mistake is reported in one build, each at its token.

use mcp_tasks_runtime::task_tool;
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(JsonSchema)]
struct NotDeserialize;

#[derive(Deserialize)]
struct NoSchema;

#[task_tool(name = "has space", ttl = "soon", task = sometimes, retries = 3, ttl = "1h")]
fn deploy<T>((_a, _b): (u32, u32), _target: &str) -> impl Sized {}

#[task_tool(poll_interval = "2")]
async fn ping(_first: NotDeserialize, _second: NoSchema) {}

fn main() {
    // The fns are still there, so using them adds nothing.
    let _ = (deploy::<u8>, deploy_tool, ping, ping_tool);
}
