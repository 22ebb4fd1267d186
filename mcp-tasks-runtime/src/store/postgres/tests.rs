//! Tests of the Postgres store's own queries against a real server: the
//! behaviours every store shares are in the store contract suite
//! (`tests/postgres_contract.rs`), which finds the server the same way.

use tokio_postgres::NoTls;

use super::{PostgresStore, rows};
use crate::store::{
    Store, TaskRecord,
    testing::{PostgresSchema, postgres_server_or_skip},
};

/// The server's URL, a schema of the test's own, and a store on it; `None`
/// (the test skipped) without a server.
async fn store(test: &str) -> Option<(String, PostgresSchema, PostgresStore)> {
    let url = postgres_server_or_skip(test).await?;
    let schema = PostgresSchema::new(&url, "mcp_tasks_test");
    let store = PostgresStore::builder(schema.url())
        .schema(schema.name())
        .connect()
        .await
        .unwrap();
    Some((url, schema, store))
}

/// With 20,000 tasks asleep on timers, the scan for work reads the due
/// tasks off `tasks_due` (with the statistics of its expression, once
/// analyzed), not the whole table: its cost stays that of the due tasks
/// however many sleep.
#[tokio::test]
async fn the_scan_for_work_reads_only_the_due_tasks() {
    let Some((url, schema, store)) = store("the_scan_for_work_reads_only_the_due_tasks").await
    else {
        return;
    };
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

/// Creates, appends and ends sent at once share the writer's transaction,
/// and each gets its own outcome: a create whose id is taken fails, an
/// append and an end by a stale claim are refused, and the rest are
/// written; an item that cannot be written at all (a NUL in its text,
/// which Postgres refuses) fails alone, the others of its batch written.
#[tokio::test]
async fn a_batch_answers_each_item_alone() {
    use crate::{
        journal::{JournalEntry, StepKind},
        store::{Appended, Transition},
    };
    let Some((_url, _schema, store)) = store("a_batch_answers_each_item_alone").await else {
        return;
    };
    let now = 1_700_000_000_000;
    for id in ["taken", "mine", "stolen", "ending", "stale_end"] {
        store
            .create(TaskRecord::new(id, "tool", now))
            .await
            .unwrap();
    }
    let mut fences = std::collections::HashMap::new();
    for id in ["mine", "stolen", "ending", "stale_end"] {
        let (record, _) = store
            .claim(id, "a", now, now + 10_000)
            .await
            .unwrap()
            .unwrap();
        fences.insert(id, record.fence);
    }
    // Another instance takes two of them over: a's claim is stale there.
    for id in ["stolen", "stale_end"] {
        let until = now + 30_000;
        store
            .claim(id, "b", now + 20_000, until)
            .await
            .unwrap()
            .unwrap();
    }
    let step = |name: &str| JournalEntry {
        position: 0,
        kind: StepKind::Checkpoint,
        name: name.to_owned(),
        value: serde_json::json!(name),
    };
    let done = || Transition::Complete(serde_json::Map::new());
    let later = now + 20_001;
    let (taken, fresh, mine, stolen, ending, stale_end) = tokio::join!(
        store.create(TaskRecord::new("taken", "tool", now)),
        store.create(TaskRecord::new("fresh", "tool", now)),
        store.append("mine", step("mine"), fences["mine"]),
        store.append("stolen", step("stolen"), fences["stolen"]),
        store.transition("ending", done(), later, Some(fences["ending"])),
        store.transition("stale_end", done(), later, Some(fences["stale_end"])),
    );
    assert!(taken.unwrap_err().to_string().contains("already exists"));
    fresh.unwrap();
    assert_eq!(mine.unwrap(), Appended::Recorded);
    assert_eq!(stolen.unwrap(), Appended::Fenced);
    assert_eq!(store.journal("mine").await.unwrap(), [step("mine")]);
    assert!(store.journal("stolen").await.unwrap().is_empty());
    let ended = ending.unwrap().unwrap();
    assert_eq!(ended.status.as_str(), "completed");
    assert_eq!(store.get("ending").await.unwrap().unwrap(), ended);
    assert!(stale_end.unwrap().is_none());
    assert_eq!(
        store
            .get("stale_end")
            .await
            .unwrap()
            .unwrap()
            .status
            .as_str(),
        "working"
    );
    assert!(store.get("fresh").await.unwrap().is_some());

    // A create Postgres refuses fails alone; the rest of its batch is
    // written.
    let mut bad = TaskRecord::new("bad", "tool", now);
    bad.status_message = Some("a NUL: \0".to_owned());
    let mut next = step("mine");
    next.position = 1;
    let (bad, good, appended) = tokio::join!(
        store.create(bad),
        store.create(TaskRecord::new("good", "tool", now)),
        store.append("mine", next.clone(), fences["mine"]),
    );
    assert!(bad.is_err());
    assert!(store.get("bad").await.unwrap().is_none());
    good.unwrap();
    assert_eq!(appended.unwrap(), Appended::Recorded);
    assert_eq!(store.journal("mine").await.unwrap(), [step("mine"), next]);
    drop(store);
}
