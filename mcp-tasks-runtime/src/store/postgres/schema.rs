//! The schema: where the tables live, and the migrations that create and
//! upgrade them.
//!
//! The tables live in one Postgres schema (`public` unless the builder names
//! another), which every connection of the pool puts first on its
//! `search_path`, so the SQL names tables without a schema. The numbered
//! files in `store/postgres/migrations/` are applied in order, all in one
//! transaction, and each applied step is recorded as a row of
//! `mcp_tasks_schema_version`. The transaction first takes a
//! transaction-scoped advisory lock keyed on the schema name, so processes
//! that start together migrate one after the other: the first applies the
//! steps, the others wait for it, then find nothing left to do. A schema
//! whose recorded version is newer than this build knows is refused.

use deadpool_postgres::{Object, Transaction};

use crate::{
    error::Result,
    store::{StoreError, error::Context},
};

/// The schema, one step per file, in order. Step `n` (from 1) takes the
/// schema from version `n - 1` to version `n`.
const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_tasks_and_journal.sql",
        include_str!("migrations/0001_tasks_and_journal.sql"),
    ),
    (
        "0002_question_deadlines.sql",
        include_str!("migrations/0002_question_deadlines.sql"),
    ),
    (
        "0003_spent_states.sql",
        include_str!("migrations/0003_spent_states.sql"),
    ),
    (
        "0004_tool_version.sql",
        include_str!("migrations/0004_tool_version.sql"),
    ),
    (
        "0005_claimable_by_due_time.sql",
        include_str!("migrations/0005_claimable_by_due_time.sql"),
    ),
];

/// The first key of the migration lock (`pg_advisory_xact_lock(int, int)`);
/// the second is a hash of the schema name. Spells "mcpt".
const MIGRATION_LOCK: i32 = 0x6d63_7074;

/// The newest schema version this build knows.
pub(super) fn latest() -> i64 {
    MIGRATIONS.len() as i64
}

/// Checks that `name` can name the store's schema: a plain lower-case SQL
/// identifier (letters, digits and `_`, not starting with a digit or `pg_`,
/// at most 63 bytes), so it needs no quoting anywhere.
pub(super) fn check_name(name: &str) -> Result<(), StoreError> {
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    let starts_well = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_');
    if plain && starts_well && name.len() <= 63 && !name.starts_with("pg_") {
        return Ok(());
    }
    Err(StoreError::new(format!(
        "Postgres store: {name:?} cannot name its schema: use lower-case letters, digits and \
         `_`, at most 63 bytes, not starting with a digit or `pg_`"
    )))
}

/// Creates the schema if needed and applies the migrations it has not seen
/// yet, in one transaction under the migration lock. `target` names the
/// database in messages.
pub(super) async fn migrate(client: &mut Object, target: &str, schema: &str) -> Result<()> {
    let fail = |what: &str| format!("Postgres store at {target}: could not {what}");
    let tx = client
        .transaction()
        .await
        .context(|| fail("begin the migration"))?;
    match apply(&tx, target, schema).await {
        Ok(from) => {
            tx.commit().await.context(|| fail("commit the schema"))?;
            if from < MIGRATIONS.len() {
                tracing::info!(store = %target, schema, from, to = latest(), "Postgres schema migrated");
            }
            Ok(())
        }
        Err(e) => {
            // Release the lock now, not whenever the connection is closed:
            // other processes may be waiting for it.
            let _ = tx.rollback().await;
            Err(e)
        }
    }
}

/// The body of the migration transaction: lock, create the schema and the
/// version table, apply the missing steps. Returns the version it found.
async fn apply(tx: &Transaction<'_>, target: &str, schema: &str) -> Result<usize> {
    let fail = |what: &str| format!("Postgres store at {target}: could not {what}");
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, hashtext($2))",
        &[&MIGRATION_LOCK, &schema],
    )
    .await
    .context(|| fail("lock the schema"))?;
    // The name was checked by `check_name`: it needs no quoting.
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         SET LOCAL search_path TO {schema};
         CREATE TABLE IF NOT EXISTS mcp_tasks_schema_version (
             version    integer     NOT NULL PRIMARY KEY,
             name       text        NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now()
         );"
    ))
    .await
    .context(|| fail(&format!("create the schema {schema}")))?;
    let from: i64 = tx
        .query_one(
            "SELECT coalesce(max(version), 0)::bigint FROM mcp_tasks_schema_version",
            &[],
        )
        .await
        .and_then(|row| row.try_get(0))
        .context(|| fail("read the schema version"))?;
    let Some(from) = usize::try_from(from)
        .ok()
        .filter(|v| *v <= MIGRATIONS.len())
    else {
        return Err(StoreError::new(format!(
            "Postgres store at {target}: schema {schema} has version {from}, but this build \
             knows versions up to {}; use the newer build that wrote it",
            latest()
        ))
        .into());
    };
    for (step, (name, sql)) in MIGRATIONS.iter().enumerate().skip(from) {
        let version = i32::try_from(step + 1).unwrap_or(i32::MAX);
        tx.batch_execute(sql)
            .await
            .context(|| fail(&format!("apply migration {name}")))?;
        tx.execute(
            "INSERT INTO mcp_tasks_schema_version (version, name) VALUES ($1, $2)",
            &[&version, name],
        )
        .await
        .context(|| fail(&format!("record migration {name}")))?;
    }
    Ok(from)
}
