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
//!
//! A store connected read-only ([`readable`]) reads the recorded version
//! and nothing else: no lock, no `CREATE`, no migration.

use deadpool_postgres::{GenericClient, Object, Transaction};

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
pub(super) const LATEST: u32 = MIGRATIONS.len() as u32;

/// The oldest schema version the reads of this build work on as it is:
/// 0004 added the last column they read (`tool_version`); 0005 changed
/// only an index and statistics.
pub(super) const READABLE_FROM: u32 = 4;

/// The newest schema version this build knows.
pub(super) fn latest() -> i64 {
    i64::from(LATEST)
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
/// database in messages. Returns the version it found (0: a new schema).
pub(super) async fn migrate(client: &mut Object, target: &str, schema: &str) -> Result<u32> {
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
            Ok(u32::try_from(from).unwrap_or(u32::MAX))
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
        return Err(too_new(target, schema, from).into());
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

/// A schema newer than this build knows: refused, whether the store would
/// write or only read.
fn too_new(target: &str, schema: &str, version: i64) -> StoreError {
    StoreError::new(format!(
        "Postgres store at {target}: schema {schema} has version {version}, but this build \
         knows versions up to {LATEST}; use the newer build that wrote it"
    ))
}

/// For a store connected read-only: reads the schema's recorded version,
/// and checks that this build reads it as it is. Takes no lock and creates
/// nothing (the connection's transactions are read-only anyway).
pub(super) async fn readable(
    client: &impl GenericClient,
    target: &str,
    schema: &str,
) -> Result<u32> {
    let fail = |what: &str| format!("Postgres store at {target}: could not {what}");
    // The name was checked by `check_name`: it needs no quoting.
    let table = format!("{schema}.mcp_tasks_schema_version");
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .and_then(|row| row.try_get(0))
        .context(|| fail("look for the schema version"))?;
    if !exists {
        return Err(StoreError::new(format!(
            "Postgres store at {target}: schema {schema} holds no tasks store (no \
             mcp_tasks_schema_version table; this build's schema version is {LATEST}): \
             nothing to read"
        ))
        .into());
    }
    let version: i64 = client
        .query_one(
            &format!("SELECT coalesce(max(version), 0)::bigint FROM {table}"),
            &[],
        )
        .await
        .and_then(|row| row.try_get(0))
        .context(|| fail("read the schema version"))?;
    match u32::try_from(version) {
        Ok(v) if (READABLE_FROM..=LATEST).contains(&v) => Ok(v),
        Ok(v) if v < READABLE_FROM => Err(StoreError::new(format!(
            "Postgres store at {target}: schema {schema} has version {v}, and this build \
             (schema version {LATEST}) reads versions {READABLE_FROM} to {LATEST} without \
             migrating: migrate it first with this build (`tasks --store URL --pg-schema \
             {schema} migrate`, or start a server of this build on it); builds older than \
             this one then refuse it"
        ))
        .into()),
        _ => Err(too_new(target, schema, version).into()),
    }
}

/// For a store connected to write without migrating: checks that the
/// schema has this build's version. Takes no lock and creates nothing.
pub(super) async fn current(
    client: &impl GenericClient,
    target: &str,
    schema: &str,
) -> Result<u32> {
    let found = readable(client, target, schema).await?;
    if found < LATEST {
        return Err(StoreError::new(format!(
            "Postgres store at {target}: schema {schema} has version {found}, older than this \
             build's ({LATEST}), and it was connected to write without migrating: migrate it \
             first with this build (`tasks --store URL --pg-schema {schema} migrate`, or start \
             a server of this build on it); builds older than this one then refuse it"
        ))
        .into());
    }
    Ok(found)
}
