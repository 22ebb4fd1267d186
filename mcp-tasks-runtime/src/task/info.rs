//! What a tool's code may read about the task it runs in: [`task_info`].

use std::time::SystemTime;

use crate::{clock::system_time as at, store::TaskRecord};

/// The task a tool fn runs in, as [`task_info`](crate::durable::task_info) shows it: read-only.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskInfo {
    /// The task's id; `None` for a call answered inline (no task exists).
    /// Where no authentication is configured the id is the only secret
    /// guarding the task: do not log it or show it to others.
    pub task_id: Option<String>,
    /// The tool's name.
    pub tool: String,
    /// Who called, when the transport knows (the MCP server's
    /// `TaskServerBuilder::principal` names callers).
    pub principal: Option<String>,
    /// When the task was created (for an inline call: when this round began).
    pub created_at: SystemTime,
    /// When the task expires (its TTL counts from creation); `None` for a
    /// task kept until deleted, and for an inline call.
    pub expires_at: Option<SystemTime>,
}

impl TaskInfo {
    pub(crate) fn of_task(record: &TaskRecord) -> Self {
        Self {
            task_id: Some(record.id.clone()),
            tool: record.tool.clone(),
            principal: record.principal.clone(),
            created_at: at(record.created_at_ms),
            expires_at: record.expires_at_ms().map(at),
        }
    }

    /// What the replay of an exported journal reads about its task.
    pub(crate) fn exported(export: &crate::replay::JournalExport) -> Self {
        Self {
            task_id: Some(export.task_id.clone()),
            tool: export.tool.clone(),
            principal: export.principal.clone(),
            created_at: at(export.created_at_ms),
            expires_at: None,
        }
    }

    pub(crate) fn inline(tool: &str, principal: Option<&str>) -> Self {
        Self {
            task_id: None,
            tool: tool.to_owned(),
            principal: principal.map(str::to_owned),
            created_at: SystemTime::now(),
            expires_at: None,
        }
    }
}
