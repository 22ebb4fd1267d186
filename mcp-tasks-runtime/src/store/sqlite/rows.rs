//! Rows: the SQL statements, and binding a [`TaskRecord`] and its
//! [`JournalEntry`]s to them.
//!
//! The columns and their encoding are shared with the Postgres store and
//! live in [`sql`](crate::store::sql): scalars are columns of their own, the
//! structured fields are JSON text, and a row that cannot be read back is an
//! error naming the task and the column, never a panic. Here, rusqlite's
//! rows are taught to hand out those columns ([`SqlRow`]).

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::{
    error::Result,
    journal::JournalEntry,
    store::{
        Appended, StoreError, TaskRecord, TaskStatus,
        error::Context,
        sql::{self, SqlRow, StateColumns, TaskColumns, journal_columns, task_columns},
    },
};

/// One of [`UPDATE_STATE`]'s statements: the columns every update writes,
/// with the indexed ones given.
macro_rules! update_state_sql {
    ($status:literal, $wake:literal, $owner:literal) => {
        concat!(
            "UPDATE tasks SET ",
            $status,
            $wake,
            $owner,
            "status_message = ?3, updated_at_ms = ?4, pending = ?5, cancel_requested = ?7, \
             result = ?8, error = ?9, version = ?10, lease_expires_at_ms = ?12, fence = ?13 \
             WHERE id = ?1"
        )
    };
}

/// Startup recovery's query; it scans the `tasks_unfinished_by_principal`
/// index, whose condition is the query's.
pub(super) const SELECT_UNFINISHED: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM tasks WHERE status IN ('working', 'input_required')"
);

/// The expiry sweep; it reads the `tasks_by_expiry` index, and the cascade
/// deletes the journals.
pub(super) const DELETE_EXPIRED: &str = "DELETE FROM tasks WHERE id IN (SELECT id FROM tasks \
     WHERE expires_at_ms <= ?1 ORDER BY expires_at_ms LIMIT ?2) RETURNING id";

/// The earliest deadline; it reads the `tasks_by_expiry` index.
pub(super) const SELECT_NEXT_EXPIRY: &str =
    "SELECT min(expires_at_ms) FROM tasks WHERE expires_at_ms IS NOT NULL";

/// `tasks/list`'s query: a principal's tasks after a cursor, oldest first;
/// it reads the `tasks_by_principal` index.
pub(super) const SELECT_PAGE: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM tasks WHERE principal IS ?1 AND (created_at_ms, id) > (?2, ?3) \
     ORDER BY created_at_ms, id LIMIT ?4"
);

/// Every task that is not terminal.
pub(super) fn select_unfinished(c: &Connection) -> Result<Vec<TaskRecord>> {
    select_tasks(c, SELECT_UNFINISHED, [], || {
        "could not read the unfinished tasks".to_owned()
    })
}

/// The admin page's query: every task after a cursor, oldest first.
const SELECT_EVERY_PAGE: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM tasks WHERE (created_at_ms, id) > (?1, ?2) ORDER BY created_at_ms, id LIMIT ?3"
);

/// A page of tasks after `after` (`(created_at_ms, id)`): `principal`'s,
/// or every task's when it is `None`.
pub(super) fn select_page(
    c: &Connection,
    principal: Option<Option<&str>>,
    after: (i64, &str),
    limit: usize,
) -> Result<Vec<TaskRecord>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let what = || "could not list the tasks".to_owned();
    match principal {
        Some(p) => select_tasks(c, SELECT_PAGE, params![p, after.0, after.1, limit], what),
        None => select_tasks(c, SELECT_EVERY_PAGE, params![after.0, after.1, limit], what),
    }
}

/// The tasks `sql` selects (its columns are [`task_columns`]).
fn select_tasks(
    c: &Connection,
    sql: &str,
    args: impl rusqlite::Params,
    what: impl Fn() -> String,
) -> Result<Vec<TaskRecord>> {
    let mut stmt = c.prepare_cached(sql).context(&what)?;
    let mut rows = stmt.query(args).context(&what)?;
    let mut tasks = Vec::new();
    while let Some(row) = rows.next().context(&what)? {
        tasks.push(sql::decode_task(row)?);
    }
    Ok(tasks)
}

/// Deletes the tasks expired by `now_ms`; returns their ids.
pub(super) fn delete_expired(c: &Connection, now_ms: i64, limit: usize) -> Result<Vec<String>> {
    let what = || "could not delete the expired tasks".to_owned();
    let mut stmt = c.prepare_cached(DELETE_EXPIRED).context(what)?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    Ok(stmt
        .query_map(params![now_ms, limit], |row| row.get::<_, String>(0))
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
             ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22) ON CONFLICT (id) DO NOTHING"
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
                cols.state.lease_owner,
                cols.state.lease_expires_at_ms,
                cols.state.fence,
                cols.tool_version,
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

/// What a task's indexes read among the columns an update may change:
/// taken before a change, so that [`update_state`] writes those columns only
/// when the change touched them.
#[derive(Debug)]
pub(super) struct Indexed {
    status: TaskStatus,
    wake_at_ms: Option<i64>,
    lease_owner: Option<String>,
}

impl Indexed {
    /// The indexed columns of `t` as they are now.
    pub(super) fn of(t: &TaskRecord) -> Self {
        Self {
            status: t.status,
            wake_at_ms: t.wake_at_ms,
            lease_owner: t.lease.as_ref().map(|l| l.owner.clone()),
        }
    }
}

/// Writes the columns that [`TaskRecord::apply`] and [`TaskRecord::answer`] change; the
/// rest of a task never changes after `create`.
///
/// `status`, `wake_at_ms` and `lease_owner` are written only when they differ
/// from `was` (the row as it was read): SQLite rewrites an index entry for
/// every index whose columns an `UPDATE` sets, changed or not, and each
/// rewritten index page is one more page written to the WAL by the commit.
/// A durable sleep keeps its task `working`, so its update leaves the
/// indexes on `status` alone.
pub(super) fn update_state(c: &Connection, was: &Indexed, t: &TaskRecord) -> Result<()> {
    let id = &t.id;
    let state = StateColumns::encode(t)?;
    let status = was.status != t.status;
    let wake = was.wake_at_ms != t.wake_at_ms;
    let owner = was.lease_owner.as_deref() != t.lease.as_ref().map(|l| l.owner.as_str());
    let sql =
        UPDATE_STATE[usize::from(status) | (usize::from(wake) << 1) | (usize::from(owner) << 2)];
    c.prepare_cached(sql)
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
                state.lease_owner,
                state.lease_expires_at_ms,
                state.fence,
            ])
        })
        .context(|| format!("could not update task {id}"))?;
    Ok(())
}

/// [`update_state`]'s statements, by which of `status` (bit 0), `wake_at_ms`
/// (bit 1) and `lease_owner` (bit 2) they write. Every one binds the same 13
/// parameters; SQLite accepts a statement that leaves some of them unused.
const UPDATE_STATE: [&str; 8] = [
    update_state_sql!("", "", ""),
    update_state_sql!("status = ?2, ", "", ""),
    update_state_sql!("", "wake_at_ms = ?6, ", ""),
    update_state_sql!("status = ?2, ", "wake_at_ms = ?6, ", ""),
    update_state_sql!("", "", "lease_owner = ?11, "),
    update_state_sql!("status = ?2, ", "", "lease_owner = ?11, "),
    update_state_sql!("", "wake_at_ms = ?6, ", "lease_owner = ?11, "),
    update_state_sql!("status = ?2, ", "wake_at_ms = ?6, ", "lease_owner = ?11, "),
];

/// Task `id`, if it exists. The id is the key: one step reads the row,
/// and none is spent looking for a second.
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
        Some(row) => Ok(Some(sql::decode_task(row)?)),
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
/// the task is gone (as in [`MemoryStore`](crate::store::MemoryStore));
/// returns whether it wrote.
pub(super) fn insert_entry(c: &Connection, id: &str, e: &JournalEntry) -> Result<bool> {
    let position = e.position;
    let value = sql::to_json(id, "journal value", &e.value)?;
    c.prepare_cached(
        "INSERT INTO journal (task_id, position, kind, name, value) \
         SELECT ?1, ?2, ?3, ?4, ?5 WHERE EXISTS (SELECT 1 FROM tasks WHERE id = ?1) \
         ON CONFLICT (task_id, position) DO NOTHING",
    )
    .and_then(|mut s| s.execute(params![id, position, e.kind.as_str(), e.name, value,]))
    .map(|n| n > 0)
    .context(|| format!("could not journal position {position} of task {id}"))
    .map_err(Into::into)
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

/// Journals `e` for a run holding `fence`: [`Appended::Fenced`] when the
/// task's fence has moved on (or the task is gone), [`Appended::Kept`] with
/// the stored entry when the position is taken.
pub(super) fn append_fenced(
    c: &Connection,
    id: &str,
    e: &JournalEntry,
    fence: u64,
) -> Result<Appended> {
    let what = || format!("could not journal position {} of task {id}", e.position);
    // One statement on the common path: the entry goes in only under the
    // task's current fence. (Writes are serialized, so nothing moves the
    // fence between the check and the insert.)
    let value = sql::to_json(id, "journal value", &e.value)?;
    let inserted = c
        .prepare_cached(
            "INSERT INTO journal (task_id, position, kind, name, value) \
             SELECT ?1, ?2, ?3, ?4, ?5 WHERE EXISTS \
             (SELECT 1 FROM tasks WHERE id = ?1 AND fence = ?6) \
             ON CONFLICT (task_id, position) DO NOTHING",
        )
        .and_then(|mut s| {
            s.execute(params![
                id,
                e.position,
                e.kind.as_str(),
                e.name,
                value,
                sql::clamp(fence)
            ])
        })
        .context(what)?;
    if inserted > 0 {
        return Ok(Appended::Recorded);
    }
    // Nothing written: a stale fence (or a task gone), or a taken position.
    let current: Option<i64> = c
        .prepare_cached("SELECT fence FROM tasks WHERE id = ?1")
        .and_then(|mut s| s.query_row([id], |row| row.get(0)).optional())
        .context(what)?;
    if current != Some(sql::clamp(fence)) {
        return Ok(Appended::Fenced);
    }
    let kept = select_journal(c, id)?
        .into_iter()
        .find(|k| k.position == e.position)
        .ok_or_else(|| StoreError::new(what()))?;
    Ok(Appended::Kept(kept))
}

/// Extends `owner`'s live leases; returns the tasks held.
pub(super) fn renew(
    c: &Connection,
    owner: &str,
    now_ms: i64,
    until_ms: i64,
) -> Result<Vec<(String, u64)>> {
    let what = || format!("could not renew the leases of {owner}");
    let mut stmt = c
        .prepare_cached(
            "UPDATE tasks SET lease_expires_at_ms = max(lease_expires_at_ms, ?3) \
             WHERE lease_owner = ?1 AND lease_expires_at_ms > ?2 RETURNING id, version",
        )
        .context(what)?;
    let held = stmt
        .query_map(params![owner, now_ms, until_ms], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
        })
        .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
        .context(what)?;
    Ok(held
        .into_iter()
        .map(|(id, v)| (id, u64::try_from(v).unwrap_or_default()))
        .collect())
}

/// Gives up `owner`'s leases.
pub(super) fn release(c: &Connection, owner: &str) -> Result<()> {
    c.prepare_cached(
        "UPDATE tasks SET lease_owner = NULL, lease_expires_at_ms = NULL WHERE lease_owner = ?1",
    )
    .and_then(|mut s| s.execute([owner]))
    .context(|| format!("could not release the leases of {owner}"))?;
    Ok(())
}

/// `Store::claimable`'s query: the tasks due by `?1` (no wake time after
/// it, no lease past it), read off the `tasks_due` index, whose expression
/// this one repeats exactly; the oldest first.
pub(super) const SELECT_CLAIMABLE: &str = "SELECT id FROM tasks WHERE status = 'working' \
     AND max(coalesce(wake_at_ms, 0), coalesce(lease_expires_at_ms, 0)) <= ?1 \
     ORDER BY created_at_ms, id LIMIT ?2";

/// Up to `limit` claimable task ids.
pub(super) fn select_claimable(c: &Connection, now_ms: i64, limit: usize) -> Result<Vec<String>> {
    select_ids(c, SELECT_CLAIMABLE, now_ms, limit, "the claimable tasks")
}

/// `Store::overdue`'s query; it reads the `tasks_deadlines` index.
pub(super) const SELECT_OVERDUE: &str = "SELECT id FROM tasks WHERE status = 'input_required' \
     AND wake_at_ms IS NOT NULL AND wake_at_ms <= ?1 ORDER BY wake_at_ms, id LIMIT ?2";

/// Up to `limit` ids of parked tasks with a question past its deadline.
pub(super) fn select_overdue(c: &Connection, now_ms: i64, limit: usize) -> Result<Vec<String>> {
    select_ids(
        c,
        SELECT_OVERDUE,
        now_ms,
        limit,
        "the tasks with questions past their deadline",
    )
}

/// The ids `sql` selects given `?1 = now_ms` and `?2 = limit`; `which`
/// names them in the error.
fn select_ids(
    c: &Connection,
    sql: &str,
    now_ms: i64,
    limit: usize,
    which: &str,
) -> Result<Vec<String>> {
    let what = || format!("could not read {which}");
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut stmt = c.prepare_cached(sql).context(what)?;
    Ok(stmt
        .query_map(params![now_ms, limit], |row| row.get::<_, String>(0))
        .and_then(Iterator::collect)
        .context(what)?)
}

/// `Store::versions`' query: the ids come as one JSON array.
pub(super) const SELECT_VERSIONS: &str =
    "SELECT id, version FROM tasks WHERE id IN (SELECT value FROM json_each(?1))";

/// The versions of the tasks `ids` that exist.
pub(super) fn select_versions(c: &Connection, ids: &[String]) -> Result<Vec<(String, u64)>> {
    let what = || format!("could not read the versions of {} tasks", ids.len());
    let ids =
        serde_json::to_string(ids).map_err(|e| StoreError::new(format!("{}: {e}", what())))?;
    let mut stmt = c.prepare_cached(SELECT_VERSIONS).context(what)?;
    Ok(stmt
        .query_map([ids], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
        })
        .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
        .context(what)?
        .into_iter()
        .map(|(id, version)| (id, u64::try_from(version).unwrap_or(0)))
        .collect())
}

/// The tasks `ids` that exist and are unfinished; the ids come as one JSON
/// array.
pub(super) fn select_unfinished_among(c: &Connection, ids: &[String]) -> Result<Vec<String>> {
    let what = || format!("could not read which of {} tasks are unfinished", ids.len());
    let ids =
        serde_json::to_string(ids).map_err(|e| StoreError::new(format!("{}: {e}", what())))?;
    let mut stmt = c
        .prepare_cached(
            "SELECT id FROM tasks WHERE id IN (SELECT value FROM json_each(?1)) \
             AND status IN ('working', 'input_required')",
        )
        .context(what)?;
    Ok(stmt
        .query_map([ids], |row| row.get::<_, String>(0))
        .and_then(Iterator::collect)
        .context(what)?)
}

/// Fails task `id`, whose row `e` says cannot be read, resetting its JSON
/// columns (see [`sql::set_aside`]).
pub(super) fn set_aside(c: &Connection, id: &str, e: &crate::Error, now_ms: i64) -> Result<()> {
    let (reason, error) = sql::set_aside(id, e)?;
    c.prepare_cached(
        "UPDATE tasks SET status = 'failed', status_message = ?2, error = ?3, arguments = '{}', \
         client_capabilities = '{}', pending = '[]', result = NULL, wake_at_ms = NULL, \
         cancel_requested = 0, lease_owner = NULL, lease_expires_at_ms = NULL, \
         updated_at_ms = ?4 WHERE id = ?1",
    )
    .and_then(|mut s| s.execute(params![id, reason, error, now_ms]))
    .context(|| format!("could not set task {id} aside"))?;
    Ok(())
}

/// How many unfinished tasks `principal` has.
pub(super) fn count_unfinished(c: &Connection, principal: Option<&str>) -> Result<usize> {
    let n: i64 = c
        .prepare_cached(
            "SELECT count(*) FROM tasks WHERE principal IS ?1 \
             AND status IN ('working', 'input_required')",
        )
        .and_then(|mut s| s.query_row(params![principal], |r| r.get(0)))
        .context(|| "could not count the unfinished tasks".to_owned())?;
    Ok(usize::try_from(n).unwrap_or(0))
}
