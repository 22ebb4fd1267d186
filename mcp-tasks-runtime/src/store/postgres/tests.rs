//! Tests of the Postgres store's own queries against a real server: the
//! behaviours every store shares are in the store contract suite
//! (`tests/postgres_contract.rs`), which finds the server the same way.

use tokio_postgres::NoTls;

use super::{PostgresStore, rows};
use crate::store::{
    Store, TaskRecord,
    testing::{PostgresSchema, postgres_server_or_skip},
};

/// With 20,000 tasks asleep on timers, the scan for work reads the due
/// tasks off `tasks_due` (with the statistics of its expression, once
/// analyzed), not the whole table: its cost stays that of the due tasks
/// however many sleep.
#[tokio::test]
async fn the_scan_for_work_reads_only_the_due_tasks() {
    let Some(url) = postgres_server_or_skip("the_scan_for_work_reads_only_the_due_tasks").await
    else {
        return;
    };
    let schema = PostgresSchema::new(&url, "mcp_tasks_test");
    let store = PostgresStore::builder(schema.url())
        .schema(schema.name())
        .connect()
        .await
        .unwrap();
    let now = 1_700_000_000_000;
    let mut asleep = TaskRecord::new("asleep", "tool", now);
    asleep.wake_at_ms = Some(now + 86_400_000);
    store.create(asleep).await.unwrap();

    let (client, connection) = tokio_postgres::connect(&url, NoTls).await.unwrap();
    tokio::spawn(connection);
    let s = schema.name();
    client
        .batch_execute(&format!(
            "INSERT INTO {s}.tasks SELECT (jsonb_populate_record(t, \
             jsonb_build_object('id', 'asleep' || n))).* \
             FROM {s}.tasks t, generate_series(1, 20000) n WHERE t.id = 'asleep'; \
             ANALYZE {s}.tasks"
        ))
        .await
        .unwrap();
    assert!(store.claimable(now + 1, 256).await.unwrap().is_empty());

    let query = rows::SELECT_CLAIMABLE
        .replace("$1", &(now + 1).to_string())
        .replace("$2", "256");
    client
        .batch_execute(&format!("SET search_path TO {s}"))
        .await
        .unwrap();
    let plan: Vec<String> = client
        .query(&format!("EXPLAIN {query}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(
        plan.contains("Index Scan using tasks_due")
            || plan.contains("Index Only Scan using tasks_due"),
        "{plan}"
    );
    assert!(!plan.contains("Seq Scan"), "{plan}");
    drop(store);
}
