//! What the SQL stores share: the task columns, and how a [`TaskRecord`]
//! and its [`JournalEntry`]s are encoded into columns and decoded back.
//!
//! The SQLite and Postgres stores keep the same columns. Scalars are columns
//! of their own, times and counts are 64-bit integers (milliseconds that do
//! not fit are stored as `i64::MAX`, which [`TaskRecord::expires_at_ms`]
//! already treats as "never"), and the structured fields (arguments,
//! capabilities, outstanding requests, result, error, journal values) are
//! JSON text written by serde_json. Each store binds the encoded values with
//! its own driver and reads rows through [`SqlRow`]; decoding is written
//! once, here. A row that cannot be read back is an error naming the store,
//! the task and the column, never a panic.

use std::error::Error as StdError;

use serde::{Serialize, de::DeserializeOwned};

use crate::{
    error::Result,
    journal::{JournalEntry, StepKind},
    store::{
        Lease, PageFrom, StoreError, TaskFilter, TaskRecord, TaskStatus, TaskSummary,
        error::Context,
    },
};

/// The `tasks` columns in the order [`decode_task`] reads them.
macro_rules! task_columns {
    () => {
        "id, tool, arguments, client_capabilities, principal, status, status_message, \
         created_at_ms, updated_at_ms, ttl_ms, poll_interval_ms, pending, wake_at_ms, \
         cancel_requested, result, error, version, lease_owner, lease_expires_at_ms, fence, \
         tool_version"
    };
}
pub(crate) use task_columns;

/// The `tasks` columns a list shows, in the order [`decode_summary`] reads
/// them: no arguments, result or questions.
macro_rules! summary_columns {
    () => {
        "id, tool, principal, status, status_message, created_at_ms, updated_at_ms, \
         wake_at_ms, cancel_requested"
    };
}
pub(crate) use summary_columns;

/// A [`TaskFilter`] as the SQL stores bind it: whether to match the
/// principal and which, the tool, and the statuses' names (none: any).
pub(crate) struct FilterParams {
    pub(crate) by_principal: bool,
    pub(crate) principal: Option<String>,
    pub(crate) tool: Option<String>,
    pub(crate) statuses: Vec<&'static str>,
}

impl FilterParams {
    pub(crate) fn of(filter: &TaskFilter) -> Self {
        Self {
            by_principal: filter.principal.is_some(),
            principal: filter.principal.clone().flatten(),
            tool: filter.tool.clone(),
            statuses: filter.statuses.iter().map(|s| s.as_str()).collect(),
        }
    }
}

/// A page's bounds as the SQL stores bind them: the cursor (the very
/// start when there is none) and whether the page runs backwards from it.
pub(crate) fn page_bounds(from: Option<&PageFrom>) -> ((i64, String), bool) {
    match from {
        None => ((i64::MIN, String::new()), false),
        Some(PageFrom::After(c)) => ((c.created_at_ms, c.id.clone()), false),
        Some(PageFrom::Before(c)) => ((c.created_at_ms, c.id.clone()), true),
    }
}

/// Decodes a row of [`summary_columns!`]; its errors are
/// [unreadable](StoreError::is_unreadable).
pub(crate) fn decode_summary<R: SqlRow>(row: &R) -> Result<TaskSummary> {
    decode_summary_row(row).map_err(unreadable)
}

fn decode_summary_row<R: SqlRow>(row: &R) -> Result<TaskSummary> {
    let col = Columns::of(row)?;
    Ok(TaskSummary {
        tool: col.required(1, "tool")?,
        principal: col.get(R::text, 2, "principal")?,
        status: col.status(3)?,
        status_message: col.get(R::text, 4, "status_message")?,
        created_at_ms: col.required_int(5, "created_at_ms")?,
        updated_at_ms: col.required_int(6, "updated_at_ms")?,
        wake_at_ms: col.get(R::int, 7, "wake_at_ms")?,
        cancel_requested: col.get(R::flag, 8, "cancel_requested")?,
        id: col.id,
    })
}

/// The `journal` columns in the order [`decode_entry`] reads them.
macro_rules! journal_columns {
    () => {
        "position, kind, name, value"
    };
}
pub(crate) use journal_columns;

/// The columns that [`TaskRecord::apply`] and [`TaskRecord::answer`]
/// change, encoded: what an update binds besides the plain fields
/// (`status_message`, `updated_at_ms`, `wake_at_ms`, `cancel_requested`).
#[derive(Debug)]
pub(crate) struct StateColumns {
    pub(crate) status: &'static str,
    pub(crate) pending: String,
    pub(crate) result: Option<String>,
    pub(crate) error: Option<String>,
    pub(crate) version: i64,
    pub(crate) lease_owner: Option<String>,
    pub(crate) lease_expires_at_ms: Option<i64>,
    pub(crate) fence: i64,
}

impl StateColumns {
    pub(crate) fn encode(t: &TaskRecord) -> Result<Self, StoreError> {
        let id = &t.id;
        Ok(Self {
            status: t.status.as_str(),
            pending: to_json(id, "pending", &t.pending)?,
            result: t
                .result
                .as_ref()
                .map(|r| to_json(id, "result", r))
                .transpose()?,
            error: t
                .error
                .as_ref()
                .map(|e| to_json(id, "error", e))
                .transpose()?,
            version: clamp(t.version),
            lease_owner: t.lease.as_ref().map(|l| l.owner.clone()),
            lease_expires_at_ms: t.lease.as_ref().map(|l| l.expires_at_ms),
            fence: clamp(t.fence),
        })
    }
}

/// Every encoded column of a new task besides the plain fields (`id`,
/// `tool`, `principal`, `status_message`, the times, `wake_at_ms`,
/// `cancel_requested`), including the derived `expires_at_ms`.
#[derive(Debug)]
pub(crate) struct TaskColumns {
    pub(crate) arguments: String,
    pub(crate) client_capabilities: String,
    pub(crate) ttl_ms: Option<i64>,
    pub(crate) poll_interval_ms: Option<i64>,
    pub(crate) expires_at_ms: Option<i64>,
    pub(crate) tool_version: i64,
    pub(crate) state: StateColumns,
}

impl TaskColumns {
    pub(crate) fn encode(t: &TaskRecord) -> Result<Self, StoreError> {
        let id = &t.id;
        Ok(Self {
            arguments: to_json(id, "arguments", &t.arguments)?,
            client_capabilities: to_json(id, "client_capabilities", &t.client_capabilities)?,
            ttl_ms: t.ttl_ms.map(clamp),
            poll_interval_ms: t.poll_interval_ms.map(clamp),
            expires_at_ms: t.expires_at_ms(),
            tool_version: i64::from(t.tool_version),
            state: StateColumns::encode(t)?,
        })
    }
}

/// JSON text for a column (a journal value, or one of a task's structured
/// fields). Encoding a `serde_json` value cannot fail, but the error is
/// still reported rather than unwrapped.
pub(crate) fn to_json(id: &str, what: &str, value: &impl Serialize) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .context(|| format!("could not encode the {what} of task {id} as JSON"))
}

/// A count of milliseconds (or changes) as a SQL integer: values beyond
/// `i64::MAX` (292 million years) are stored as `i64::MAX`.
pub(crate) fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// One result row, as a SQL store's driver hands it out. Column indexes
/// count from 0.
pub(crate) trait SqlRow {
    /// The driver's error, kept as the decoding error's source.
    type Error: StdError + Send + Sync + 'static;

    /// The store's name in messages: `SQLite`, `Postgres`.
    const STORE: &'static str;

    /// A text column; NULL is `None`.
    fn text(&self, i: usize) -> Result<Option<String>, Self::Error>;

    /// An integer column; NULL is `None`.
    fn int(&self, i: usize) -> Result<Option<i64>, Self::Error>;

    /// A boolean column.
    fn flag(&self, i: usize) -> Result<bool, Self::Error>;
}

/// Decodes a row of [`task_columns!`]; its errors are
/// [unreadable](StoreError::is_unreadable).
pub(crate) fn decode_task<R: SqlRow>(row: &R) -> Result<TaskRecord> {
    decode_task_row(row).map_err(unreadable)
}

/// Marks a decoding error as one about unreadable data.
fn unreadable(e: crate::Error) -> crate::Error {
    match e {
        crate::Error::Store(e) => crate::Error::Store(e.unreadable()),
        other => other,
    }
}

fn decode_task_row<R: SqlRow>(row: &R) -> Result<TaskRecord> {
    let col = Columns::of(row)?;
    Ok(TaskRecord {
        tool: col.required(1, "tool")?,
        arguments: col.json(2, "arguments")?,
        client_capabilities: col.json(3, "client_capabilities")?,
        principal: col.get(R::text, 4, "principal")?,
        status: col.status(5)?,
        status_message: col.get(R::text, 6, "status_message")?,
        created_at_ms: col.required_int(7, "created_at_ms")?,
        updated_at_ms: col.required_int(8, "updated_at_ms")?,
        ttl_ms: col.unsigned(9, "ttl_ms")?,
        poll_interval_ms: col.unsigned(10, "poll_interval_ms")?,
        pending: col.json(11, "pending")?,
        wake_at_ms: col.get(R::int, 12, "wake_at_ms")?,
        cancel_requested: col.get(R::flag, 13, "cancel_requested")?,
        result: col.json(14, "result")?,
        error: col.json(15, "error")?,
        version: col.unsigned(16, "version")?.unwrap_or_default(),
        lease: match (
            col.get(R::text, 17, "lease_owner")?,
            col.get(R::int, 18, "lease_expires_at_ms")?,
        ) {
            (Some(owner), Some(expires_at_ms)) => Some(Lease {
                owner,
                expires_at_ms,
            }),
            _ => None,
        },
        fence: col.unsigned(19, "fence")?.unwrap_or_default(),
        tool_version: match col.unsigned(20, "tool_version")? {
            None => 1,
            Some(v) => u32::try_from(v)
                .map_err(|_| col.bad("tool_version", format!("out of range ({v})")))?,
        },
        id: col.id,
    })
}

/// Reads a task row's columns, naming the task when one is unreadable.
struct Columns<'a, R> {
    row: &'a R,
    id: String,
}

impl<'a, R: SqlRow> Columns<'a, R> {
    /// The row, its task's id read from its first column.
    fn of(row: &'a R) -> Result<Self> {
        let unreadable_id = || format!("a task in the {} store has an unreadable id", R::STORE);
        let id = row.text(0).context(unreadable_id)?;
        let id = id.ok_or_else(|| StoreError::new(unreadable_id()))?;
        Ok(Self { row, id })
    }

    fn unreadable(&self, column: &str) -> String {
        format!(
            "task {} in the {} store has an unreadable `{column}`",
            self.id,
            R::STORE
        )
    }

    fn status(&self, i: usize) -> Result<TaskStatus> {
        let status: String = self.required(i, "status")?;
        let parsed = TaskStatus::parse(&status);
        Ok(parsed.ok_or_else(|| self.bad("status", format!("unknown status {status:?}")))?)
    }

    /// The column holds a value of the right type that makes no sense.
    fn bad(&self, column: &str, why: String) -> StoreError {
        StoreError::new(format!("{}: {why}", self.unreadable(column)))
    }

    fn get<T>(
        &self,
        read: fn(&R, usize) -> Result<T, R::Error>,
        i: usize,
        column: &str,
    ) -> Result<T> {
        Ok(read(self.row, i).context(|| self.unreadable(column))?)
    }

    fn required(&self, i: usize, column: &str) -> Result<String> {
        self.get(R::text, i, column)?
            .ok_or_else(|| self.bad(column, "NULL".into()).into())
    }

    fn required_int(&self, i: usize, column: &str) -> Result<i64> {
        self.get(R::int, i, column)?
            .ok_or_else(|| self.bad(column, "NULL".into()).into())
    }

    /// A JSON column; `T = Option<_>` reads NULL as `None`.
    fn json<T: DeserializeOwned>(&self, i: usize, column: &str) -> Result<T> {
        let text = self.get(R::text, i, column)?;
        Ok(serde_json::from_str(text.as_deref().unwrap_or("null"))
            .context(|| self.unreadable(column))?)
    }

    fn unsigned(&self, i: usize, column: &str) -> Result<Option<u64>> {
        let ms = self.get(R::int, i, column)?;
        let ms = ms
            .map(|ms| u64::try_from(ms).map_err(|_| self.bad(column, format!("negative ({ms})"))));
        Ok(ms.transpose()?)
    }
}

/// Decodes a row of [`journal_columns!`] from the journal of task `id`; its
/// errors are [unreadable](StoreError::is_unreadable).
pub(crate) fn decode_entry<R: SqlRow>(id: &str, row: &R) -> Result<JournalEntry> {
    decode_entry_row(id, row).map_err(unreadable)
}

fn decode_entry_row<R: SqlRow>(id: &str, row: &R) -> Result<JournalEntry> {
    let unreadable = |what: &str| {
        format!(
            "task {id} in the {} store has an unreadable journal entry ({what})",
            R::STORE
        )
    };
    let position = row.int(0).context(|| unreadable("position"))?;
    let position = position
        .and_then(|p| u32::try_from(p).ok())
        .ok_or_else(|| {
            let shown = position.map_or_else(|| "NULL".to_owned(), |p| p.to_string());
            StoreError::new(format!("{}: {shown}", unreadable("position")))
        })?;
    let unreadable = |what: &str| unreadable(&format!("{what} at position {position}"));
    let text = |i: usize, what: &str| -> Result<String> {
        let text = row.text(i).context(|| unreadable(what))?;
        Ok(text.ok_or_else(|| StoreError::new(format!("{}: NULL", unreadable(what))))?)
    };
    let kind = text(1, "kind")?;
    let kind = StepKind::parse(&kind)
        .ok_or_else(|| StoreError::new(format!("{}: {kind:?}", unreadable("kind"))))?;
    let name = text(2, "name")?;
    let value = serde_json::from_str(&text(3, "value")?).context(|| unreadable("value"))?;
    Ok(JournalEntry {
        position,
        kind,
        name,
        value,
    })
}

/// A task whose row cannot be read is set aside rather than run (see
/// [`Store::claim`](crate::store::Store::claim)): it is failed with the
/// reason, and every JSON column is reset to a value that reads back, so the
/// task can still be shown. This gives the reason (its status message) and
/// the error, as JSON, for the row `e` says cannot be read.
pub(crate) fn set_aside(id: &str, e: &crate::Error) -> Result<(String, String), StoreError> {
    tracing::warn!(task = %crate::id::task_ref(id), error = %crate::id::Redacted(&e), "a task's stored data cannot be read; it is set aside, failed");
    let reason = format!("the task's stored data cannot be read: {e}");
    let error = to_json(
        id,
        "error",
        &crate::error::RpcError::internal(reason.clone()),
    )?;
    Ok((reason, error))
}

/// The schema versions a SQL store met when it opened (`SqliteStore` and
/// `PostgresStore`, `schema_versions()`): whether an open that migrates
/// moved the store on, or which version a read-only open is reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SchemaVersions {
    /// The store's version when it was opened (0: a store created by this
    /// open).
    pub found: u32,
    /// Its version now: [`latest`](Self::latest) after an open that
    /// migrates, [`found`](Self::found) after a read-only one.
    pub now: u32,
    /// The newest version this build knows.
    pub latest: u32,
}

impl SchemaVersions {
    /// A store opened read-only: it stays at the version it was found at.
    pub(crate) fn read_only(found: u32, latest: u32) -> Self {
        Self {
            found,
            now: found,
            latest,
        }
    }

    /// A store brought up to `latest` by its open.
    pub(crate) fn migrated(found: u32, latest: u32) -> Self {
        Self {
            found,
            now: latest,
            latest,
        }
    }
}
