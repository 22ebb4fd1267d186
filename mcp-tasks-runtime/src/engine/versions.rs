//! Tool versions across a deploy: each task records the version of its tool
//! that created it ([`TaskRecord::tool_version`]), and a version of the code
//! replays the journals of the versions `replays_from ..= version` (see
//! [`ToolDescriptor::with_replays_from`]). A task outside that range is
//! never replayed here, so it never fails halfway on a history its code no
//! longer takes:
//!
//! - recorded by an *older* version than the code replays from: failed when
//!   the engine starts (every unfinished one), or when a run would claim it
//!   (one recorded later, by an old instance of a rolling deploy), with a
//!   reason naming the versions;
//! - recorded by a *newer* version than the code is (a rollback, or an old
//!   instance in a rolling deploy of a fleet sharing the store): left for an
//!   instance that serves it. A run that claims one gives its lease up at
//!   once, and the instance remembers the task so that it neither claims it
//!   again nor logs it twice: one claim per such task and instance, one
//!   `WARN` per tool and version.

use std::{
    collections::HashSet,
    sync::{Mutex, PoisonError},
};

use serde_json::json;

use super::Inner;
use crate::{
    error::{Result, RpcError},
    store::{TaskRecord, Transition},
    tool::ToolDescriptor,
};

/// How many tasks [`Unserved`] remembers; past it, it starts over (each
/// forgotten task costs one more claim and release, nothing else).
const REMEMBERED: usize = 10_000;

/// The tasks this instance leaves to another, recorded by a newer version
/// of their tool than it serves.
#[derive(Debug, Default)]
pub(super) struct Unserved {
    inner: Mutex<UnservedState>,
}

#[derive(Debug, Default)]
struct UnservedState {
    /// The tasks' ids.
    tasks: HashSet<String>,
    /// The (tool, version) pairs already logged.
    warned: HashSet<(String, u32)>,
}

impl Unserved {
    /// Whether task `id` is one this instance leaves alone.
    pub(super) fn skipped(&self, id: &str) -> bool {
        self.lock().tasks.contains(id)
    }

    /// Remembers `record` (recorded by a newer version than `served`) as a
    /// task to leave alone; the first task of each tool and version is
    /// logged at `WARN`.
    pub(super) fn leave(&self, record: &TaskRecord, served: &ToolDescriptor) {
        let mut s = self.lock();
        if s.tasks.len() >= REMEMBERED {
            s.tasks.clear();
        }
        s.tasks.insert(record.id.clone());
        let first = s.warned.insert((record.tool.clone(), record.tool_version));
        drop(s);
        if first {
            tracing::warn!(
                tool = %record.tool,
                recorded_version = record.tool_version,
                served = %served.served_versions(),
                "tasks recorded by version {} of `{}` are left for an instance that serves it; \
                 this one serves {}",
                record.tool_version,
                record.tool,
                served.served_versions(),
            );
        } else {
            tracing::debug!(
                task = %crate::id::task_ref(&record.id),
                tool = %record.tool,
                recorded_version = record.tool_version,
                "task left for an instance that serves its version"
            );
        }
    }

    /// Forgets every task left alone (the tools served changed: one of
    /// them may be served here now); each is claimed again once.
    pub(super) fn forget(&self) {
        self.lock().tasks.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, UnservedState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The error that fails a task recorded by a version of its tool older
/// than `served` replays from.
pub(super) fn too_old(record: &TaskRecord, served: &ToolDescriptor) -> RpcError {
    RpcError::internal(format!(
        "task recorded by version {} of `{}`; this server replays {}, so the task cannot \
         resume and was failed without replaying it",
        record.tool_version,
        record.tool,
        served.served_versions(),
    ))
    .with_data(json!({
        "tool": record.tool,
        "recordedVersion": record.tool_version,
        "replaysFrom": served.replays_from(),
        "version": served.version(),
    }))
}

/// At startup: fails every unfinished task recorded by a version of its
/// tool older than the code replays from.
pub(super) async fn fail_too_old(inner: &Inner) -> Result<()> {
    let tools = inner.tools.current();
    if tools.iter().all(|t| t.descriptor().replays_from() <= 1) {
        // Every tool replays every version: nothing can be too old.
        return Ok(());
    }
    for record in inner.store.unfinished().await? {
        let Some(tool) = tools.get(&record.tool) else {
            continue;
        };
        let served = tool.descriptor();
        if record.tool_version >= served.replays_from() {
            continue;
        }
        let error = too_old(&record, served);
        tracing::warn!(
            task = %crate::id::task_ref(&record.id),
            tool = %record.tool,
            recorded_version = record.tool_version,
            served = %served.served_versions(),
            "failing a task recorded by a version this server no longer replays"
        );
        inner
            .transition(&record.id, Transition::Fail(error), None)
            .await?;
    }
    Ok(())
}
