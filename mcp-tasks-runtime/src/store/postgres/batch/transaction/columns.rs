//! The arrays a batch binds: the columns of many tasks, entries or ends,
//! one array a column, each in the order of the statement that unnests it.

use tokio_postgres::types::ToSql;

use super::super::EndIn;
use crate::{
    journal::JournalEntry,
    store::{
        StoreError, TaskRecord, Transition,
        postgres::feed,
        sql::{self, StateColumns, TaskColumns},
    },
};

/// The columns a task's state changes, of many tasks, one array a column,
/// in the order of `rows::UPDATE_STATE`'s `$2` to `$13`.
#[derive(Default)]
pub(super) struct States {
    pub(super) status: Vec<&'static str>,
    pub(super) status_message: Vec<Option<String>>,
    pub(super) updated_at_ms: Vec<i64>,
    pub(super) pending: Vec<String>,
    pub(super) wake_at_ms: Vec<Option<i64>>,
    pub(super) cancel_requested: Vec<bool>,
    pub(super) result: Vec<Option<String>>,
    pub(super) error: Vec<Option<String>>,
    pub(super) version: Vec<i64>,
    pub(super) lease_owner: Vec<Option<String>>,
    pub(super) lease_expires_at_ms: Vec<Option<i64>>,
    pub(super) fence: Vec<i64>,
}

impl States {
    pub(super) fn push(&mut self, t: &TaskRecord, s: StateColumns) {
        self.status.push(s.status);
        self.status_message.push(t.status_message.clone());
        self.updated_at_ms.push(t.updated_at_ms);
        self.pending.push(s.pending);
        self.wake_at_ms.push(t.wake_at_ms);
        self.cancel_requested.push(t.cancel_requested);
        self.result.push(s.result);
        self.error.push(s.error);
        self.version.push(s.version);
        self.lease_owner.push(s.lease_owner);
        self.lease_expires_at_ms.push(s.lease_expires_at_ms);
        self.fence.push(s.fence);
    }

    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 12] {
        [
            &self.status,
            &self.status_message,
            &self.updated_at_ms,
            &self.pending,
            &self.wake_at_ms,
            &self.cancel_requested,
            &self.result,
            &self.error,
            &self.version,
            &self.lease_owner,
            &self.lease_expires_at_ms,
            &self.fence,
        ]
    }
}

/// The columns of many new tasks, one array a column, in the order of
/// [`INSERT_TASKS`](super::INSERT_TASKS).
#[derive(Default)]
pub(super) struct NewTasks {
    pub(super) id: Vec<String>,
    pub(super) tool: Vec<String>,
    pub(super) arguments: Vec<String>,
    pub(super) client_capabilities: Vec<String>,
    pub(super) principal: Vec<Option<String>>,
    pub(super) created_at_ms: Vec<i64>,
    pub(super) ttl_ms: Vec<Option<i64>>,
    pub(super) poll_interval_ms: Vec<Option<i64>>,
    pub(super) tool_version: Vec<i64>,
    pub(super) expires_at_ms: Vec<Option<i64>>,
    pub(super) states: States,
}

impl NewTasks {
    pub(super) fn push(&mut self, t: &TaskRecord) -> Result<(), StoreError> {
        let c = TaskColumns::encode(t)?;
        self.id.push(t.id.clone());
        self.tool.push(t.tool.clone());
        self.arguments.push(c.arguments);
        self.client_capabilities.push(c.client_capabilities);
        self.principal.push(t.principal.clone());
        self.created_at_ms.push(t.created_at_ms);
        self.ttl_ms.push(c.ttl_ms);
        self.poll_interval_ms.push(c.poll_interval_ms);
        self.tool_version.push(c.tool_version);
        self.expires_at_ms.push(c.expires_at_ms);
        self.states.push(t, c.state);
        Ok(())
    }

    pub(super) fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![
            &self.id,
            &self.tool,
            &self.arguments,
            &self.client_capabilities,
            &self.principal,
            &self.created_at_ms,
            &self.ttl_ms,
            &self.poll_interval_ms,
            &self.tool_version,
            &self.expires_at_ms,
        ];
        params.extend(self.states.params());
        params
    }
}

/// Journal entries, one array a column.
#[derive(Default)]
pub(super) struct Entries {
    pub(super) task_id: Vec<String>,
    pub(super) position: Vec<i64>,
    pub(super) kind: Vec<&'static str>,
    pub(super) name: Vec<String>,
    pub(super) value: Vec<String>,
}

impl Entries {
    /// Adds `e`, a journal entry of task `id` whose value is `value`.
    pub(super) fn push(&mut self, id: &str, e: &JournalEntry, value: String) {
        self.value.push(value);
        self.task_id.push(id.to_owned());
        self.position.push(i64::from(e.position));
        self.kind.push(e.kind.as_str());
        self.name.push(e.name.clone());
    }

    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 5] {
        [
            &self.task_id,
            &self.position,
            &self.kind,
            &self.name,
            &self.value,
        ]
    }
}

/// The columns of many changed tasks, one array a column, and each one's
/// notice.
#[derive(Default)]
pub(super) struct Changed {
    pub(super) id: Vec<String>,
    pub(super) states: States,
    pub(super) notice: Vec<String>,
}

impl Changed {
    pub(super) fn push(&mut self, t: &TaskRecord, now_ms: i64) -> Result<(), StoreError> {
        self.states.push(t, StateColumns::encode(t)?);
        self.id.push(t.id.clone());
        self.notice.push(feed::payload(t, now_ms));
        Ok(())
    }

    pub(super) fn params<'a>(&'a self, channel: &'a &'a str) -> Vec<&'a (dyn ToSql + Sync)> {
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&self.id];
        params.extend(self.states.params());
        params.extend([&self.notice as &(dyn ToSql + Sync), channel]);
        params
    }
}

/// The ends that finish their task with nothing to journal, one array a
/// column, in the order of [`FINISH_TASKS`](super::FINISH_TASKS)'s `$1` to `$8`.
#[derive(Default)]
pub(super) struct Finishes {
    pub(super) id: Vec<String>,
    pub(super) status: Vec<&'static str>,
    pub(super) status_message: Vec<Option<String>>,
    pub(super) pending: Vec<String>,
    pub(super) result: Vec<Option<String>>,
    pub(super) error: Vec<Option<String>>,
    pub(super) now_ms: Vec<i64>,
    pub(super) fence: Vec<i64>,
}

impl Finishes {
    /// Takes the end `input` in if it is a run's, finishing its task with
    /// nothing to journal; `false` if it is not (its row is read and locked
    /// first).
    pub(super) fn push(&mut self, input: &EndIn) -> Result<bool, StoreError> {
        let (id, staged, change, now_ms, fence) = input;
        let finishes = matches!(
            change,
            Transition::Complete(_) | Transition::Fail(_) | Transition::Cancel
        );
        let Some(fence) = fence.filter(|_| finishes && staged.is_empty()) else {
            return Ok(false);
        };
        // What the state machine makes of any task this change finishes:
        // the other columns it sets do not depend on the task.
        let mut done = TaskRecord::new(id.clone(), "", *now_ms);
        done.apply(change.clone(), *now_ms);
        let s = StateColumns::encode(&done)?;
        self.id.push(id.clone());
        self.status.push(s.status);
        self.status_message.push(done.status_message);
        self.pending.push(s.pending);
        self.result.push(s.result);
        self.error.push(s.error);
        self.now_ms.push(*now_ms);
        self.fence.push(sql::clamp(fence));
        Ok(true)
    }

    pub(super) fn params<'a>(&'a self, channel: &'a &'a str) -> [&'a (dyn ToSql + Sync); 9] {
        [
            &self.id,
            &self.status,
            &self.status_message,
            &self.pending,
            &self.result,
            &self.error,
            &self.now_ms,
            &self.fence,
            channel,
        ]
    }
}

/// The runs' journal writes, one array a column (the entries, and each
/// one's fence).
#[derive(Default)]
pub(super) struct Appends {
    pub(super) entries: Entries,
    pub(super) fence: Vec<i64>,
}
