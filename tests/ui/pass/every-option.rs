//! Every option at once.

use std::time::Duration;

use mcp_tasks_runtime::{task_tool, tool::{Annotations, TaskPolicy}};

/// Ignored: `description` wins.
#[task_tool(
    name = "deploy.v2-beta_1",
    description = "Deploys a service.",
    title = "Deploy",
    task = required,
    ttl = "1h30m",
    poll_interval = "500ms",
    read_only = false,
    destructive,
    idempotent = true,
    open_world,
    crate = mcp_tasks_runtime,
)]
async fn deploy(service: String) -> String {
    service
}

#[task_tool(task = "forbidden", ttl = "1d", poll_interval = "1m 30s")]
async fn quick() {}

#[task_tool(task = optional)]
async fn either() {}

fn main() {
    let d = deploy_tool();
    assert_eq!(d.name(), "deploy.v2-beta_1");
    assert_eq!(d.description(), Some("Deploys a service."));
    assert_eq!(d.title(), Some("Deploy"));
    assert_eq!(d.policy(), TaskPolicy::Required);
    assert_eq!(d.ttl(), Some(Duration::from_secs(90 * 60)));
    assert_eq!(d.poll_interval(), Some(Duration::from_millis(500)));
    assert_eq!(
        d.annotations(),
        Annotations {
            read_only: Some(false),
            destructive: Some(true),
            idempotent: Some(true),
            open_world: Some(true),
        }
    );
    let q = quick_tool();
    assert_eq!(q.policy(), TaskPolicy::Forbidden);
    assert_eq!(q.ttl(), Some(Duration::from_secs(86_400)));
    assert_eq!(q.poll_interval(), Some(Duration::from_secs(90)));
    assert_eq!(either_tool().policy(), TaskPolicy::Optional);
}
