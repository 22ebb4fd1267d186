//! The admin page's reads: summaries of the tasks a filter keeps, a page
//! at a time, and their counts per status, each one query of the columns
//! shown.

use deadpool_postgres::GenericClient;

use super::rows::query;
use crate::{
    error::Result,
    store::{TaskCounts, TaskStatus, TaskSummary, error::Context, sql},
};

/// What the admin page's filters keep: `$1` whether to match the
/// principal, `$2` the principal, `$3` the tool (NULL: any), `$4` the
/// statuses (empty: any).
macro_rules! summary_filter {
    () => {
        "($1 = false OR principal IS NOT DISTINCT FROM $2) AND ($3::text IS NULL OR tool = $3) \
         AND (cardinality($4::text[]) = 0 OR status = ANY($4))"
    };
}

/// A page of summaries after `($5, $6)`, oldest first.
const SELECT_SUMMARIES_AFTER: &str = concat!(
    "SELECT ",
    sql::summary_columns!(),
    " FROM tasks WHERE ",
    summary_filter!(),
    " AND (created_at_ms, id) > ($5, $6) ORDER BY created_at_ms, id LIMIT $7"
);

/// A page of summaries before `($5, $6)`, newest first.
const SELECT_SUMMARIES_BEFORE: &str = concat!(
    "SELECT ",
    sql::summary_columns!(),
    " FROM tasks WHERE ",
    summary_filter!(),
    " AND (created_at_ms, id) < ($5, $6) ORDER BY created_at_ms DESC, id DESC LIMIT $7"
);

/// The tasks the filter keeps, per status and asleep or not.
const COUNT_TASKS: &str = concat!(
    "SELECT status, wake_at_ms IS NOT NULL, count(*) FROM tasks WHERE ",
    summary_filter!(),
    " GROUP BY 1, 2"
);

/// A page of the summaries `filter` keeps, from `at` (backwards when
/// `before`), oldest first.
pub(super) async fn select_summaries(
    c: &impl GenericClient,
    filter: &sql::FilterParams,
    at: (i64, &str),
    before: bool,
    limit: usize,
) -> Result<Vec<TaskSummary>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let sql = if before {
        SELECT_SUMMARIES_BEFORE
    } else {
        SELECT_SUMMARIES_AFTER
    };
    let rows = query(
        c,
        sql,
        &[
            &filter.by_principal,
            &filter.principal,
            &filter.tool,
            &filter.statuses,
            &at.0,
            &at.1,
            &limit,
        ],
    )
    .await
    .context(|| "could not list the tasks")?;
    let mut page = rows
        .iter()
        .map(sql::decode_summary)
        .collect::<Result<Vec<_>>>()?;
    if before {
        page.reverse();
    }
    Ok(page)
}

/// How many tasks `filter` keeps, per status.
pub(super) async fn count_tasks(
    c: &impl GenericClient,
    filter: &sql::FilterParams,
) -> Result<TaskCounts> {
    let what = || "could not count the tasks".to_owned();
    let rows = query(
        c,
        COUNT_TASKS,
        &[
            &filter.by_principal,
            &filter.principal,
            &filter.tool,
            &filter.statuses,
        ],
    )
    .await
    .context(what)?;
    let mut counts = TaskCounts::default();
    for row in &rows {
        let status: String = row.try_get(0).context(what)?;
        let waking: bool = row.try_get(1).context(what)?;
        let n: i64 = row.try_get(2).context(what)?;
        if let Some(status) = TaskStatus::parse(&status) {
            counts.add(status, waking, usize::try_from(n).unwrap_or(0));
        }
    }
    Ok(counts)
}
