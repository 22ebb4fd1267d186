//! Rows: the SQL statements, and binding a [`TaskRecord`] and its
//! [`JournalEntry`]s to them.
//!
//! The columns and their encoding are shared with the Postgres store and
//! live in [`sql`](crate::store::sql): scalars are columns of their own, the
//! structured fields are JSON text, and a row that cannot be read back is an
//! error naming the task and the column, never a panic. Here, rusqlite's
//! rows are taught to hand out those columns ([`SqlRow`]).

use rusqlite::{Connection, Row, params};

use crate::{
    error::Result,
    journal::JournalEntry,
    store::{
        StoreError, TaskRecord,
        error::Context,
        sql::{self, SqlRow, StateColumns, TaskColumns, journal_columns, task_columns},
    },
};

/// Startup recovery's query; it reads the `tasks_unfinished` index.
pub(super) const SELECT_UNFINISHED: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM tasks WHERE status IN ('working', 'input_required')"
);

/// The expiry sweep; it reads the `tasks_by_expiry` index, and the cascade
/// deletes the journals.
pub(super) const DELETE_EXPIRED: &str = "DELETE FROM tasks WHERE expires_at_ms <= ?1 RETURNING id";

/// The earliest deadline; it reads the `tasks_by_expiry` index.
pub(super) const SELECT_NEXT_EXPIRY: &str =
    "SELECT min(expires_at_ms) FROM tasks WHERE expires_at_ms IS NOT NULL";

/// Every task that is not terminal.
pub(super) fn select_unfinished(c: &Connection) -> Result<Vec<TaskRecord>> {
    let what = || "could not read the unfinished tasks".to_owned();
    let mut stmt = c.prepare_cached(SELECT_UNFINISHED).context(what)?;
    let mut rows = stmt.query([]).context(what)?;
    let mut tasks = Vec::new();
    while let Some(row) = rows.next().context(what)? {
        tasks.push(sql::decode_task(row)?);
    }
    Ok(tasks)
}

/// Deletes the tasks expired by `now_ms`; returns their ids.
pub(super) fn delete_expired(c: &Connection, now_ms: i64) -> Result<Vec<String>> {
    let what = || "could not delete the expired tasks".to_owned();
    let mut stmt = c.prepare_cached(DELETE_EXPIRED).context(what)?;
    Ok(stmt
        .query_map([now_ms], |row| row.get::<_, String>(0))
        .and_then(Iterator::collect)
        .context(what)?)
}

/// The earliest expiry, if any task has one.
pub(super) fn select_next_expiry(c: &Connection) -> Result<Option<i64>> {
    Ok(c.prepare_cached(SELECT_NEXT_EXPIRY)
        .and_then(|mut s| s.query_row([], |row| row.get(0)))
        .context(|| "could not read the next expiry")?)
}

pub(super) fn insert_task(c: &Connection, t: &TaskRecord) -> Result<()> {
    let id = &t.id;
    let cols = TaskColumns::encode(t)?;
    let inserted = c
        .prepare_cached(concat!(
            "INSERT INTO tasks (",
            task_columns!(),
            ", expires_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, \
             ?14, ?15, ?16, ?17, ?18) ON CONFLICT (id) DO NOTHING"
        ))
        .and_then(|mut s| {
            s.execute(params![
                id,
                t.tool,
                cols.arguments,
                cols.client_capabilities,
                t.principal,
                cols.state.status,
                t.status_message,
                t.created_at_ms,
                t.updated_at_ms,
                cols.ttl_ms,
                cols.poll_interval_ms,
                cols.state.pending,
                t.wake_at_ms,
                t.cancel_requested,
                cols.state.result,
                cols.state.error,
                cols.state.version,
                cols.expires_at_ms,
            ])
        })
        .context(|| format!("could not create task {id}"))?;
    if inserted == 0 {
        return Err(
            StoreError::new(format!("could not create task {id}: it already exists")).into(),
        );
    }
    Ok(())
}

/// Writes the columns that [`TaskRecord::apply`] and [`TaskRecord::answer`] change; the
/// rest of a task never changes after `create`.
pub(super) fn update_state(c: &Connection, t: &TaskRecord) -> Result<()> {
    let id = &t.id;
    let state = StateColumns::encode(t)?;
    c.prepare_cached(
        "UPDATE tasks SET status = ?2, status_message = ?3, updated_at_ms = ?4, pending = ?5, \
         wake_at_ms = ?6, cancel_requested = ?7, result = ?8, error = ?9, version = ?10 \
         WHERE id = ?1",
    )
    .and_then(|mut s| {
        s.execute(params![
            id,
            state.status,
            t.status_message,
            t.updated_at_ms,
            state.pending,
            t.wake_at_ms,
            t.cancel_requested,
            state.result,
            state.error,
            state.version,
        ])
    })
    .context(|| format!("could not update task {id}"))?;
    Ok(())
}

pub(super) fn select_task(c: &Connection, id: &str) -> Result<Option<TaskRecord>> {
    let what = || format!("could not read task {id}");
    let mut stmt = c
        .prepare_cached(concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE id = ?1"
        ))
        .context(what)?;
    let mut rows = stmt.query([id]).context(what)?;
    match rows.next().context(what)? {
        Some(row) => sql::decode_task(row).map(Some),
        None => Ok(None),
    }
}

/// The SQLite driver's view of a row, for the shared decoders in
/// [`sql`](crate::store::sql).
impl SqlRow for Row<'_> {
    type Error = rusqlite::Error;

    const STORE: &'static str = "SQLite";

    fn text(&self, i: usize) -> rusqlite::Result<Option<String>> {
        self.get(i)
    }

    fn int(&self, i: usize) -> rusqlite::Result<Option<i64>> {
        self.get(i)
    }

    fn flag(&self, i: usize) -> rusqlite::Result<bool> {
        self.get(i)
    }
}

/// Journals `e` unless its position is taken (the first entry is kept) or
/// the task is gone (as in [`MemoryStore`](crate::store::MemoryStore)).
pub(super) fn insert_entry(c: &Connection, id: &str, e: &JournalEntry) -> Result<()> {
    let position = e.position;
    let value = sql::to_json(id, "journal value", &e.value)?;
    c.prepare_cached(
        "INSERT INTO journal (task_id, position, kind, name, value) \
         SELECT ?1, ?2, ?3, ?4, ?5 WHERE EXISTS (SELECT 1 FROM tasks WHERE id = ?1) \
         ON CONFLICT (task_id, position) DO NOTHING",
    )
    .and_then(|mut s| s.execute(params![id, position, e.kind.as_str(), e.name, value,]))
    .context(|| format!("could not journal position {position} of task {id}"))?;
    Ok(())
}

pub(super) fn select_journal(c: &Connection, id: &str) -> Result<Vec<JournalEntry>> {
    let what = || format!("could not read the journal of task {id}");
    let mut stmt = c
        .prepare_cached(concat!(
            "SELECT ",
            journal_columns!(),
            " FROM journal WHERE task_id = ?1 ORDER BY position"
        ))
        .context(what)?;
    let mut rows = stmt.query([id]).context(what)?;
    let mut entries = Vec::new();
    while let Some(row) = rows.next().context(what)? {
        entries.push(sql::decode_entry(id, row)?);
    }
    Ok(entries)
}
