//! The admin page's reads: summaries of the tasks a filter keeps, a page
//! at a time, and their counts per status, each one query of the columns
//! shown.

use rusqlite::{Connection, Row, ToSql, params_from_iter};

use crate::{
    error::Result,
    store::{TaskCounts, TaskStatus, TaskSummary, error::Context, sql},
};

/// What the admin page's filters keep: `?1` whether to match the principal,
/// `?2` the principal, `?3` the tool (NULL: any), `?4` the statuses as
/// `,a,b,` (empty: any).
macro_rules! summary_filter {
    () => {
        "(?1 = 0 OR principal IS ?2) AND (?3 IS NULL OR tool = ?3) \
         AND (?4 = '' OR instr(?4, ',' || status || ',') > 0)"
    };
}

/// A page of summaries on one side of `(?5, ?6)`, in `order`.
macro_rules! select_summaries {
    ($side:literal, $order:literal) => {
        concat!(
            "SELECT ",
            sql::summary_columns!(),
            " FROM tasks WHERE ",
            summary_filter!(),
            " AND (created_at_ms, id) ",
            $side,
            " (?5, ?6) ORDER BY ",
            $order,
            " LIMIT ?7"
        )
    };
}

/// A page of summaries after `(?5, ?6)`, oldest first.
const SELECT_SUMMARIES_AFTER: &str = select_summaries!(">", "created_at_ms, id");

/// A page of summaries before `(?5, ?6)`, newest first.
const SELECT_SUMMARIES_BEFORE: &str = select_summaries!("<", "created_at_ms DESC, id DESC");

/// The tasks the filter keeps, per status and asleep or not.
const COUNT_TASKS: &str = concat!(
    "SELECT status, wake_at_ms IS NOT NULL, count(*) FROM tasks WHERE ",
    summary_filter!(),
    " GROUP BY 1, 2"
);

/// The rows `sql` selects with `filter` bound to `?1` to `?4` (its
/// statuses as `,a,b,`, empty for any) and `more` after them, each read
/// with `read`.
fn select_filtered<T>(
    c: &Connection,
    sql: &str,
    filter: &sql::FilterParams,
    more: &[&dyn ToSql],
    what: impl Fn() -> String,
    read: impl Fn(&Row<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    let statuses = if filter.statuses.is_empty() {
        String::new()
    } else {
        format!(",{},", filter.statuses.join(","))
    };
    let bound: [&dyn ToSql; 4] = [
        &filter.by_principal,
        &filter.principal,
        &filter.tool,
        &statuses,
    ];
    let mut stmt = c.prepare_cached(sql).context(&what)?;
    let mut rows = stmt
        .query(params_from_iter(bound.iter().chain(more)))
        .context(&what)?;
    let mut read_rows = Vec::new();
    while let Some(row) = rows.next().context(&what)? {
        read_rows.push(read(row)?);
    }
    Ok(read_rows)
}

/// A page of the summaries `filter` keeps, from `at` (backwards when
/// `before`), oldest first.
pub(super) fn select_summaries(
    c: &Connection,
    filter: &sql::FilterParams,
    at: (i64, &str),
    before: bool,
    limit: usize,
) -> Result<Vec<TaskSummary>> {
    let what = || "could not list the tasks".to_owned();
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let sql = if before {
        SELECT_SUMMARIES_BEFORE
    } else {
        SELECT_SUMMARIES_AFTER
    };
    let more: [&dyn ToSql; 3] = [&at.0, &at.1, &limit];
    let mut page = select_filtered(c, sql, filter, &more, what, |row| sql::decode_summary(row))?;
    if before {
        page.reverse();
    }
    Ok(page)
}

/// How many tasks `filter` keeps, per status.
pub(super) fn count_tasks(c: &Connection, filter: &sql::FilterParams) -> Result<TaskCounts> {
    let what = || "could not count the tasks".to_owned();
    let read = |row: &Row<'_>| -> Result<(String, bool, i64)> {
        Ok((
            row.get(0).context(what)?,
            row.get(1).context(what)?,
            row.get(2).context(what)?,
        ))
    };
    let mut counts = TaskCounts::default();
    for (status, waking, n) in select_filtered(c, COUNT_TASKS, filter, &[], what, read)? {
        if let Some(status) = TaskStatus::parse(&status) {
            counts.add(status, waking, usize::try_from(n).unwrap_or(0));
        }
    }
    Ok(counts)
}
