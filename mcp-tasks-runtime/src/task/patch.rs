//! [`patched`]: a journaled marker that lets a tool's new code tell the
//! tasks it starts from the tasks an older version started.

use serde_json::Value;

use super::{scope::marker_slot, steps::recorded};
use crate::journal::StepKind;

/// Whether this run takes the new code path named `name`: `true` for a task
/// that reaches this point on the new code, `false` for a task whose
/// journal was recorded by code without it. Deterministic: a task gets the
/// same answer on every replay.
///
/// When a deploy changes the steps a tool's fn takes, tasks already under
/// way replay their journal through the new code, and a different step at a
/// recorded position would fail them as non-deterministic. Put the change
/// behind `patched` (and raise the tool's
/// [`version`](crate::tool::ToolDescriptor::with_version)):
///
/// - live (the journal holds nothing at this position: a new task, or an
///   old one past the end of its journal) it journals a marker named `name`
///   at the next position and returns `true`;
/// - replaying, with this marker at the position, it returns `true` again;
/// - replaying, with another step at the position (a journal recorded
///   before the marker existed), it returns `false` and takes no position:
///   the old code's steps replay where they were recorded.
///
/// So call it *before* the first step that differs, and early enough that
/// the tasks you want kept on the old path have already recorded a step
/// there: a task whose journal ends before this point takes the new path,
/// which is safe, since nothing it recorded comes after it. Outside a task
/// (a plain test of the fn) it returns `true`. Inside a
/// [`checkpoint`](crate::checkpoint)'s closure it returns `true` and
/// journals nothing: the closure runs only live, on the new code, and its
/// checkpoint's value covers what it did.
///
/// It is async because the marker, like every step, is journaled durably
/// before the fn goes on.
///
/// Remove a `patched` call (and its old branch) only when no unfinished
/// task can replay through it: raise the tool's version again and its
/// [`replays_from`](crate::tool::ToolDescriptor::with_replays_from) to that
/// version, and the engine fails, at startup, the unfinished tasks recorded
/// by older versions, with a reason naming them, rather than replaying them
/// into a non-determinism failure. A second change at the same place gets a
/// marker of its own name (`durable::patched("report-v3")`); a task whose journal holds
/// another marker there takes the `false` branch.
///
/// ```
/// use mcp_tasks_runtime::{ToolError, ask_user, checkpoint, durable, task_tool};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema, mcp_tasks_runtime::Elicit)]
/// struct Approval {
///     approved: bool,
/// }
///
/// /// Version 2 sends the report as HTML; tasks started by version 1 finish
/// /// as they began, in plain text.
/// #[task_tool(version = 2)]
/// async fn report(team: String) -> Result<String, ToolError> {
///     // Before the first step: a task of version 1 recorded its question
///     // here, so it replays `false` and keeps the old path.
///     let html = durable::patched("html-report").await;
///     let approval: Approval = ask_user(format!("Send the report to {team}?")).await?;
///     if !approval.approved {
///         return Ok("not sent".into());
///     }
///     if html {
///         checkpoint("send-html", || async { Ok(format!("<p>sent to {team}</p>")) }).await
///     } else {
///         checkpoint("send", || async { Ok(format!("sent to {team}")) }).await
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// assert_eq!(report_tool().version(), 2);
/// // Outside a task, the new path.
/// assert!(durable::patched("html-report").await);
/// # }
/// ```
pub async fn patched(name: impl Into<String>) -> bool {
    let name = name.into();
    match marker_slot(name.clone()) {
        Some(slot) => {
            // The marker's value is `true`; what matters is that it is there.
            let _: Value = recorded(slot, StepKind::Patch, &name, "a `patched` marker", || {
                Value::Bool(true)
            })
            .await;
            true
        }
        None => false,
    }
}
