//! Pages, filters and counts: how the stores hand out tasks many at a time.

use super::{TaskRecord, TaskStatus};

/// Where a page of [`Store::list`](super::Store::list) starts: just after this task. Tasks are
/// listed by creation time, then id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListCursor {
    /// The task's creation time, Unix milliseconds.
    pub created_at_ms: i64,
    /// The task's id.
    pub id: String,
}

/// Where a page of [`Store::summaries`](super::Store::summaries) starts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PageFrom {
    /// Just after this task: the next page.
    After(ListCursor),
    /// Just before this task: the previous page.
    Before(ListCursor),
}

/// Which tasks [`Store::summaries`](super::Store::summaries) and [`Store::count_tasks`](super::Store::count_tasks) cover; the
/// default covers every task.
///
/// ```
/// use mcp_tasks_runtime::store::{TaskFilter, TaskStatus};
///
/// // alice's parked tasks of one tool.
/// let filter = TaskFilter::default()
///     .principal(Some("alice"))
///     .tool("deploy")
///     .statuses([TaskStatus::InputRequired]);
/// assert_eq!(filter.statuses, [TaskStatus::InputRequired]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskFilter {
    /// `Some(Some(p))`: the tasks of `p`; `Some(None)`: those created
    /// without a principal; `None`: every caller's.
    pub principal: Option<Option<String>>,
    /// Only this tool's tasks.
    pub tool: Option<String>,
    /// Only tasks in one of these statuses; empty: any status.
    pub statuses: Vec<TaskStatus>,
}

impl TaskFilter {
    /// Only the tasks of `principal` (`None`: created without one).
    #[must_use]
    pub fn principal(mut self, principal: Option<&str>) -> Self {
        self.principal = Some(principal.map(str::to_owned));
        self
    }

    /// Only the tasks of `tool`.
    #[must_use]
    pub fn tool(mut self, tool: impl Into<String>) -> Self {
        self.tool = Some(tool.into());
        self
    }

    /// Only the tasks in one of `statuses`.
    #[must_use]
    pub fn statuses(mut self, statuses: impl IntoIterator<Item = TaskStatus>) -> Self {
        self.statuses = statuses.into_iter().collect();
        self
    }

    /// Whether the filter selects `task`.
    pub fn matches(&self, task: &TaskRecord) -> bool {
        self.principal
            .as_ref()
            .is_none_or(|p| p.as_deref() == task.principal.as_deref())
            && self.tool.as_ref().is_none_or(|t| *t == task.tool)
            && (self.statuses.is_empty() || self.statuses.contains(&task.status))
    }
}

/// A task as a list shows it: its row without the arguments, result,
/// error, questions and journal.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskSummary {
    /// The task's id.
    pub id: String,
    /// The tool it runs.
    pub tool: String,
    /// Who created it (`None`: created without a principal).
    pub principal: Option<String>,
    /// Its status.
    pub status: TaskStatus,
    /// Its status message.
    pub status_message: Option<String>,
    /// When it was created, Unix milliseconds.
    pub created_at_ms: i64,
    /// When it last changed, Unix milliseconds.
    pub updated_at_ms: i64,
    /// When its durable timer wakes it, if it sleeps on one.
    pub wake_at_ms: Option<i64>,
    /// Whether a cancel was requested.
    pub cancel_requested: bool,
}

impl TaskSummary {
    /// The summary of `task`.
    pub fn of(task: &TaskRecord) -> Self {
        Self {
            id: task.id.clone(),
            tool: task.tool.clone(),
            principal: task.principal.clone(),
            status: task.status,
            status_message: task.status_message.clone(),
            created_at_ms: task.created_at_ms,
            updated_at_ms: task.updated_at_ms,
            wake_at_ms: task.wake_at_ms,
            cancel_requested: task.cancel_requested,
        }
    }

    /// Whether it is `working` and asleep on a durable timer.
    pub fn is_asleep(&self) -> bool {
        self.status == TaskStatus::Working && self.wake_at_ms.is_some()
    }
}

/// What [`Store::count_tasks`](super::Store::count_tasks) counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskCounts {
    /// Tasks per status, in [`TaskStatus::ALL`]'s order.
    pub by_status: [usize; 5],
    /// The `working` tasks asleep on a durable timer (counted in
    /// `working` too).
    pub asleep: usize,
}

impl TaskCounts {
    /// How many tasks are in `status`.
    pub fn of(&self, status: TaskStatus) -> usize {
        TaskStatus::ALL
            .iter()
            .position(|s| *s == status)
            .map_or(0, |i| self.by_status[i])
    }

    /// Every task counted.
    pub fn total(&self) -> usize {
        self.by_status.iter().sum()
    }

    /// Counts `n` more tasks in `status`, `waking` when they have a timer.
    pub fn add(&mut self, status: TaskStatus, waking: bool, n: usize) {
        if let Some(i) = TaskStatus::ALL.iter().position(|s| *s == status) {
            self.by_status[i] += n;
        }
        if status == TaskStatus::Working && waking {
            self.asleep += n;
        }
    }
}

impl ListCursor {
    /// The cursor just after `task`.
    pub fn after(task: &TaskRecord) -> Self {
        Self {
            created_at_ms: task.created_at_ms,
            id: task.id.clone(),
        }
    }

    /// Whether `task` comes after the cursor.
    pub fn precedes(&self, task: &TaskRecord) -> bool {
        (task.created_at_ms, task.id.as_str()) > (self.created_at_ms, self.id.as_str())
    }

    /// Whether this cursor's task comes before `other`'s.
    pub fn precedes_cursor(&self, other: &Self) -> bool {
        (self.created_at_ms, self.id.as_str()) < (other.created_at_ms, other.id.as_str())
    }
}
