//! Rows: the SQL statements, and binding a [`TaskRecord`] and its
//! [`JournalEntry`]s to them.
//!
//! The columns and their encoding are the SQLite store's and live in
//! [`sql`](crate::store::sql): JSON fields are text, times and counts are
//! `bigint` milliseconds, and a row that cannot be read back is an error
//! naming the task and the column. Here, tokio-postgres rows are taught to
//! hand out those columns ([`SqlRow`]). Every function takes a connection or
//! a transaction (deadpool's [`GenericClient`]) and prepares its statement
//! through the connection's statement cache.

use deadpool_postgres::GenericClient;
use tokio_postgres::{Error, Row, error::SqlState, types::ToSql};

use crate::{
    error::Result,
    journal::JournalEntry,
    store::{
        Appended, StoreError, TaskRecord,
        error::Context,
        sql::{self, SqlRow, StateColumns, TaskColumns, journal_columns, task_columns},
    },
};

const INSERT_TASK: &str = concat!(
    "INSERT INTO tasks (",
    task_columns!(),
    ", expires_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, \
     $15, $16, $17, $18, $19, $20, $21, $22) ON CONFLICT (id) DO NOTHING"
);

/// The write-back of the columns a task's state changes, `$1` its id: one
/// text for [`UPDATE_STATE`] and [`UPDATE_STATE_AND_NOTIFY`].
macro_rules! update_state {
    () => {
        "UPDATE tasks SET status = $2, status_message = $3, updated_at_ms = $4, pending = $5, \
         wake_at_ms = $6, cancel_requested = $7, result = $8, error = $9, version = $10, \
         lease_owner = $11, lease_expires_at_ms = $12, fence = $13 WHERE id = $1"
    };
}

const UPDATE_STATE: &str = update_state!();

/// [`UPDATE_STATE`], and the feed's notice (`$14` the channel, `$15` the
/// payload) in the same statement: it is sent when the transaction commits.
const UPDATE_STATE_AND_NOTIFY: &str = concat!(
    "WITH changed AS (",
    update_state!(),
    " RETURNING 1) SELECT pg_notify($14, $15) FROM changed"
);

const SELECT_TASK: &str = concat!("SELECT ", task_columns!(), " FROM tasks WHERE id = $1");

/// The row lock that makes a read-modify-write of a task atomic.
const SELECT_TASK_FOR_UPDATE: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM tasks WHERE id = $1 FOR UPDATE"
);

/// A claim's read: the row, unless another transaction has it locked.
const SELECT_TASK_SKIP_LOCKED: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM tasks WHERE id = $1 FOR UPDATE SKIP LOCKED"
);

/// `tasks/list`'s query; it reads the `tasks_by_principal` index.
const SELECT_PAGE: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM tasks WHERE principal IS NOT DISTINCT FROM $1 AND (created_at_ms, id) > ($2, $3) \
     ORDER BY created_at_ms, id LIMIT $4"
);

/// `Store::claimable`'s query: the tasks due by `$1` (no wake time after
/// it, no lease past it), read off the `tasks_due` index, whose expression
/// this one repeats exactly; the oldest first.
pub(super) const SELECT_CLAIMABLE: &str = "SELECT id FROM tasks WHERE status = 'working' \
    AND GREATEST(COALESCE(wake_at_ms, 0), COALESCE(lease_expires_at_ms, 0)) <= $1 \
    ORDER BY created_at_ms, id LIMIT $2";

/// `Store::overdue`'s query; it reads the `tasks_deadlines` index.
const SELECT_OVERDUE: &str = "SELECT id FROM tasks WHERE status = 'input_required' \
    AND wake_at_ms IS NOT NULL AND wake_at_ms <= $1 ORDER BY wake_at_ms, id LIMIT $2";

/// Extends the live leases of `$1` (as of `$2`) to `$3`, taking their rows
/// in id order, as the writer's batches take theirs (`batch::transaction::LOCK_ROWS`):
/// an `UPDATE` alone locks them in the order it finds them, and could wait
/// for a batch's row while holding one the batch wants next.
const RENEW: &str = "UPDATE tasks SET lease_expires_at_ms = GREATEST(tasks.lease_expires_at_ms, $3) \
    FROM (SELECT id FROM tasks WHERE lease_owner = $1 AND lease_expires_at_ms > $2 \
    ORDER BY id FOR NO KEY UPDATE) AS held WHERE tasks.id = held.id \
    RETURNING tasks.id, tasks.version";

const RELEASE: &str = concat!(
    "UPDATE tasks SET lease_owner = NULL, lease_expires_at_ms = NULL WHERE lease_owner = $1 \
     RETURNING ",
    task_columns!()
);

/// A run's journal write, in one statement (so in one round trip, committed
/// on its own): the task's row is read and locked `FOR SHARE` (its fence
/// cannot move, nor the task go, until the statement commits), and the entry
/// is written only if the fence is the run's and the position is free. The
/// answer: the task's fence (`NULL` if it is gone), and whether it wrote.
const APPEND_FENCED: &str = "WITH task AS (SELECT fence FROM tasks WHERE id = $1 FOR SHARE), \
    added AS (INSERT INTO journal (task_id, position, kind, name, value) \
    SELECT $1, $2, $3, $4, $5 FROM task WHERE task.fence = $6 \
    ON CONFLICT (task_id, position) DO NOTHING RETURNING 1) \
    SELECT (SELECT fence FROM task), EXISTS (SELECT 1 FROM added)";

/// Startup recovery's query. Its predicate is the one of the
/// `tasks_unfinished` partial index, which also hands out the rows in id
/// order.
pub(super) const SELECT_UNFINISHED: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM tasks WHERE status IN ('working', 'input_required') ORDER BY id"
);

/// Journals an entry unless its position is taken (the first entry is kept)
/// or the task is gone.
const INSERT_ENTRY: &str = "INSERT INTO journal (task_id, position, kind, name, value) \
    SELECT $1, $2, $3, $4, $5 WHERE EXISTS (SELECT 1 FROM tasks WHERE id = $1) \
    ON CONFLICT (task_id, position) DO NOTHING";

const SELECT_JOURNAL: &str = concat!(
    "SELECT ",
    journal_columns!(),
    " FROM journal WHERE task_id = $1 ORDER BY position"
);

/// The expiry sweep; it reads the `tasks_by_expiry` index, and the cascade
/// deletes the journals.
/// At most `$2` of them, the earliest first; rows another transaction holds
/// (another instance's sweep) are left to it.
const DELETE_EXPIRED: &str = "DELETE FROM tasks WHERE id IN (SELECT id FROM tasks \
     WHERE expires_at_ms <= $1 ORDER BY expires_at_ms LIMIT $2 FOR UPDATE SKIP LOCKED) \
     RETURNING id";

/// The earliest deadline; it reads the `tasks_by_expiry` index.
const SELECT_NEXT_EXPIRY: &str =
    "SELECT min(expires_at_ms) FROM tasks WHERE expires_at_ms IS NOT NULL";

/// The tokio-postgres view of a row, for the shared decoders in
/// [`sql`](crate::store::sql).
impl SqlRow for Row {
    type Error = Error;

    const STORE: &'static str = "Postgres";

    fn text(&self, i: usize) -> Result<Option<String>, Self::Error> {
        self.try_get(i)
    }

    fn int(&self, i: usize) -> Result<Option<i64>, Self::Error> {
        self.try_get(i)
    }

    fn flag(&self, i: usize) -> Result<bool, Self::Error> {
        self.try_get(i)
    }
}

/// Runs `sql` with `params` and returns every row.
pub(super) async fn query(
    c: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, Error> {
    let stmt = c.prepare_cached(sql).await?;
    c.query(&stmt, params).await
}

/// Runs `sql` with `params` and returns how many rows it changed.
pub(super) async fn execute(
    c: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64, Error> {
    let stmt = c.prepare_cached(sql).await?;
    c.execute(&stmt, params).await
}

/// Inserts a new task; fails, naming it, if the id is taken.
pub(super) async fn insert_task(c: &impl GenericClient, t: &TaskRecord) -> Result<()> {
    let id = &t.id;
    let cols = TaskColumns::encode(t)?;
    let inserted = execute(
        c,
        INSERT_TASK,
        &[
            id,
            &t.tool,
            &cols.arguments,
            &cols.client_capabilities,
            &t.principal,
            &cols.state.status,
            &t.status_message,
            &t.created_at_ms,
            &t.updated_at_ms,
            &cols.ttl_ms,
            &cols.poll_interval_ms,
            &cols.state.pending,
            &t.wake_at_ms,
            &t.cancel_requested,
            &cols.state.result,
            &cols.state.error,
            &cols.state.version,
            &cols.state.lease_owner,
            &cols.state.lease_expires_at_ms,
            &cols.state.fence,
            &cols.tool_version,
            &cols.expires_at_ms,
        ],
    )
    .await
    .context(|| format!("could not create task {id}"))?;
    if inserted == 0 {
        return Err(
            StoreError::new(format!("could not create task {id}: it already exists")).into(),
        );
    }
    Ok(())
}

/// Writes the columns that [`TaskRecord::apply`] and [`TaskRecord::answer`]
/// change; the rest of a task never changes after `create`.
pub(super) async fn update_state(c: &impl GenericClient, t: &TaskRecord) -> Result<()> {
    write_state(c, t, None).await
}

/// [`update_state`], and notifies `channel` with `payload` in the same
/// statement (sent when the transaction commits).
pub(super) async fn update_state_and_notify(
    c: &impl GenericClient,
    t: &TaskRecord,
    channel: &str,
    payload: &str,
) -> Result<()> {
    write_state(c, t, Some((channel, payload))).await
}

async fn write_state(
    c: &impl GenericClient,
    t: &TaskRecord,
    notice: Option<(&str, &str)>,
) -> Result<()> {
    let id = &t.id;
    let state = StateColumns::encode(t)?;
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![
        id,
        &state.status,
        &t.status_message,
        &t.updated_at_ms,
        &state.pending,
        &t.wake_at_ms,
        &t.cancel_requested,
        &state.result,
        &state.error,
        &state.version,
        &state.lease_owner,
        &state.lease_expires_at_ms,
        &state.fence,
    ];
    let sql = match &notice {
        None => UPDATE_STATE,
        Some((channel, payload)) => {
            params.extend([channel as &(dyn ToSql + Sync), payload]);
            UPDATE_STATE_AND_NOTIFY
        }
    };
    execute(c, sql, &params)
        .await
        .context(|| format!("could not update task {id}"))?;
    Ok(())
}

/// How a read treats the row's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lock {
    /// A plain read.
    None,
    /// Locks the row until the transaction ends, waiting for other lockers.
    Wait,
    /// Locks the row, or reads nothing if another transaction holds it:
    /// claims never wait for each other.
    SkipLocked,
}

/// Reads a task, locking its row as `lock` says.
pub(super) async fn select_task(
    c: &impl GenericClient,
    id: &str,
    lock: Lock,
) -> Result<Option<TaskRecord>> {
    let sql = match lock {
        Lock::None => SELECT_TASK,
        Lock::Wait => SELECT_TASK_FOR_UPDATE,
        Lock::SkipLocked => SELECT_TASK_SKIP_LOCKED,
    };
    let rows = query(c, sql, &[&id])
        .await
        .context(|| format!("could not read task {id}"))?;
    rows.first().map(sql::decode_task).transpose()
}

/// Every task that is not terminal, in id order.
pub(super) async fn select_unfinished(c: &impl GenericClient) -> Result<Vec<TaskRecord>> {
    let rows = query(c, SELECT_UNFINISHED, &[])
        .await
        .context(|| "could not read the unfinished tasks")?;
    rows.iter().map(sql::decode_task).collect()
}

/// Journals `e` unless its position is taken (the first entry is kept) or
/// the task is gone (as in [`MemoryStore`](crate::store::MemoryStore)),
/// also when it is deleted while the entry is being written; returns
/// whether it wrote.
pub(super) async fn insert_entry(
    c: &impl GenericClient,
    id: &str,
    e: &JournalEntry,
) -> Result<bool> {
    let position = e.position;
    let value = sql::to_json(id, "journal value", &e.value)?;
    let params: [&(dyn ToSql + Sync); 5] =
        [&id, &i64::from(position), &e.kind.as_str(), &e.name, &value];
    match execute(c, INSERT_ENTRY, &params).await {
        Err(e) if e.code() == Some(&SqlState::FOREIGN_KEY_VIOLATION) => Ok(false),
        other => Ok(other
            .context(|| format!("could not journal position {position} of task {id}"))?
            > 0),
    }
}

/// Journals `e` for a run holding `fence`, in one statement of its own
/// (not in a transaction: it commits before it returns): `Fenced` when the
/// task's fence moved on or the task is gone, `Kept` with the stored entry
/// when the position is taken.
pub(super) async fn append_fenced(
    c: &impl GenericClient,
    id: &str,
    e: &JournalEntry,
    fence: u64,
) -> Result<Appended> {
    let what = || format!("could not journal position {} of task {id}", e.position);
    let value = sql::to_json(id, "journal value", &e.value)?;
    let params: [&(dyn ToSql + Sync); 6] = [
        &id,
        &i64::from(e.position),
        &e.kind.as_str(),
        &e.name,
        &value,
        &sql::clamp(fence),
    ];
    let rows = query(c, APPEND_FENCED, &params).await.context(what)?;
    let row = rows.first().ok_or_else(|| StoreError::new(what()))?;
    let (current, wrote): (Option<i64>, bool) =
        (row.try_get(0).context(what)?, row.try_get(1).context(what)?);
    if current != Some(sql::clamp(fence)) {
        return Ok(Appended::Fenced);
    }
    if wrote {
        return Ok(Appended::Recorded);
    }
    // The position was taken, and entries never change once written.
    let kept = select_journal(c, id)
        .await?
        .into_iter()
        .find(|k| k.position == e.position)
        .ok_or_else(|| StoreError::new(what()))?;
    Ok(Appended::Kept(kept))
}

/// A page of `principal`'s tasks after `after`.
pub(super) async fn select_page(
    c: &impl GenericClient,
    principal: Option<&str>,
    after: (i64, &str),
    limit: usize,
) -> Result<Vec<TaskRecord>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = query(c, SELECT_PAGE, &[&principal, &after.0, &after.1, &limit])
        .await
        .context(|| "could not list the tasks")?;
    rows.iter().map(sql::decode_task).collect()
}

/// The admin page's query: every task after a cursor, oldest first.
const SELECT_EVERY_PAGE: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM tasks WHERE (created_at_ms, id) > ($1, $2) ORDER BY created_at_ms, id LIMIT $3"
);

/// A page of every task after `after`.
pub(super) async fn select_every_page(
    c: &impl GenericClient,
    after: (i64, &str),
    limit: usize,
) -> Result<Vec<TaskRecord>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = query(c, SELECT_EVERY_PAGE, &[&after.0, &after.1, &limit])
        .await
        .context(|| "could not list the tasks")?;
    rows.iter().map(sql::decode_task).collect()
}

/// The versions of the tasks `ids` that exist.
pub(super) async fn select_versions(
    c: &impl GenericClient,
    ids: &[String],
) -> Result<Vec<(String, u64)>> {
    let what = || format!("could not read the versions of {} tasks", ids.len());
    let rows = query(
        c,
        "SELECT id, version FROM tasks WHERE id = ANY($1)",
        &[&ids],
    )
    .await
    .context(what)?;
    Ok(rows
        .iter()
        .map(|r| {
            let version: i64 = r.try_get(1)?;
            Ok((r.try_get(0)?, u64::try_from(version).unwrap_or(0)))
        })
        .collect::<Result<_, Error>>()
        .context(what)?)
}

/// The tasks `ids` that exist and are unfinished.
pub(super) async fn select_unfinished_among(
    c: &impl GenericClient,
    ids: &[String],
) -> Result<Vec<String>> {
    let what = || format!("could not read which of {} tasks are unfinished", ids.len());
    let rows = query(
        c,
        "SELECT id FROM tasks WHERE id = ANY($1) AND status IN ('working', 'input_required')",
        &[&ids],
    )
    .await
    .context(what)?;
    Ok(rows
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, Error>>()
        .context(what)?)
}

/// Up to `limit` claimable task ids.
pub(super) async fn select_claimable(
    c: &impl GenericClient,
    now_ms: i64,
    limit: usize,
) -> Result<Vec<String>> {
    select_ids(c, SELECT_CLAIMABLE, now_ms, limit, "the claimable tasks").await
}

/// Up to `limit` ids of parked tasks with a question past its deadline.
pub(super) async fn select_overdue(
    c: &impl GenericClient,
    now_ms: i64,
    limit: usize,
) -> Result<Vec<String>> {
    let which = "the tasks with questions past their deadline";
    select_ids(c, SELECT_OVERDUE, now_ms, limit, which).await
}

/// The ids `sql` selects given `$1 = now_ms` and `$2 = limit`; `which`
/// names them in the error.
async fn select_ids(
    c: &impl GenericClient,
    sql: &str,
    now_ms: i64,
    limit: usize,
    which: &str,
) -> Result<Vec<String>> {
    let what = || format!("could not read {which}");
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = query(c, sql, &[&now_ms, &limit]).await.context(what)?;
    Ok(rows
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<_, _>>()
        .context(what)?)
}

/// Extends `owner`'s live leases; returns the tasks held.
pub(super) async fn renew(
    c: &impl GenericClient,
    owner: &str,
    now_ms: i64,
    until_ms: i64,
) -> Result<Vec<(String, u64)>> {
    let what = || format!("could not renew the leases of {owner}");
    let rows = query(c, RENEW, &[&owner, &now_ms, &until_ms])
        .await
        .context(what)?;
    rows.iter()
        .map(|row| {
            let id: String = row.try_get(0)?;
            let version: i64 = row.try_get(1)?;
            Ok((id, u64::try_from(version).unwrap_or_default()))
        })
        .collect::<Result<_, Error>>()
        .context(what)
        .map_err(Into::into)
}

/// Gives up `owner`'s leases; returns the tasks it held.
pub(super) async fn release(c: &impl GenericClient, owner: &str) -> Result<Vec<TaskRecord>> {
    let rows = query(c, RELEASE, &[&owner])
        .await
        .context(|| format!("could not release the leases of {owner}"))?;
    rows.iter().map(sql::decode_task).collect()
}

/// Task `id`'s journal, by position.
pub(super) async fn select_journal(c: &impl GenericClient, id: &str) -> Result<Vec<JournalEntry>> {
    let rows = query(c, SELECT_JOURNAL, &[&id])
        .await
        .context(|| format!("could not read the journal of task {id}"))?;
    rows.iter().map(|row| sql::decode_entry(id, row)).collect()
}

/// Deletes the tasks expired by `now_ms`; returns their ids.
pub(super) async fn delete_expired(
    c: &impl GenericClient,
    now_ms: i64,
    limit: usize,
) -> Result<Vec<String>> {
    let what = || "could not delete the expired tasks";
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = query(c, DELETE_EXPIRED, &[&now_ms, &limit])
        .await
        .context(what)?;
    Ok(rows
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<_, _>>()
        .context(what)?)
}

/// The earliest expiry, if any task has one.
pub(super) async fn select_next_expiry(c: &impl GenericClient) -> Result<Option<i64>> {
    let what = || "could not read the next expiry";
    let rows = query(c, SELECT_NEXT_EXPIRY, &[]).await.context(what)?;
    Ok(rows
        .first()
        .map(|row| row.try_get(0))
        .transpose()
        .context(what)?
        .flatten())
}

/// Fails task `id`, whose row `e` says cannot be read, resetting its JSON
/// columns (see [`sql::set_aside`]).
pub(super) async fn set_aside(
    c: &impl GenericClient,
    id: &str,
    e: &crate::Error,
    now_ms: i64,
) -> Result<()> {
    let (reason, error) = sql::set_aside(id, e)?;
    execute(
        c,
        "UPDATE tasks SET status = 'failed', status_message = $2, error = $3, arguments = '{}', \
         client_capabilities = '{}', pending = '[]', result = NULL, wake_at_ms = NULL, \
         cancel_requested = false, lease_owner = NULL, lease_expires_at_ms = NULL, \
         updated_at_ms = $4 WHERE id = $1",
        &[&id, &reason, &error, &now_ms],
    )
    .await
    .context(|| format!("could not set task {id} aside"))?;
    Ok(())
}

/// How many unfinished tasks `principal` has.
pub(super) async fn count_unfinished(
    c: &impl GenericClient,
    principal: Option<&str>,
) -> Result<usize> {
    let rows = query(
        c,
        "SELECT count(*) FROM tasks WHERE principal IS NOT DISTINCT FROM $1 \
         AND status IN ('working', 'input_required')",
        &[&principal],
    )
    .await
    .context(|| "could not count the unfinished tasks".to_owned())?;
    let n: i64 = rows
        .first()
        .map(|r| r.try_get(0))
        .transpose()
        .context(|| "could not count the unfinished tasks".to_owned())?
        .unwrap_or(0);
    Ok(usize::try_from(n).unwrap_or(0))
}
