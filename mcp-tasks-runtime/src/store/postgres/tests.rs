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

/// Lease renewals and the writer's batches take the tasks' rows in one
/// order, by id, so that neither waits for a row the other holds while
/// holding one the other wants. Taken in the order each statement found
/// them, a renewal and a batch of appends and ends deadlocked under load:
/// Postgres broke each cycle after `deadlock_timeout` (a second, stalling
/// every write behind them) by failing one. Here, rounds of 64 runs append
/// and end through the writer for three seconds while the instance renews
/// its leases back to back; Postgres counts no deadlock in the test's own
/// database, and no renewal fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn renewals_and_batches_take_rows_in_one_order() {
    use std::sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    };

    use futures::FutureExt;

    use crate::{
        journal::{JournalEntry, StepKind},
        store::Transition,
    };
    let test = "renewals_and_batches_take_rows_in_one_order";
    let Some(url) = postgres_server_or_skip(test).await else {
        return;
    };
    // A database of its own: Postgres counts deadlocks by database.
    let (admin, connection) = tokio_postgres::connect(&url, NoTls).await.unwrap();
    tokio::spawn(connection);
    let db = format!("mcp_tasks_lock_order_{}", std::process::id());
    for sql in [
        format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"),
        format!("CREATE DATABASE {db}"),
    ] {
        admin.batch_execute(&sql).await.unwrap();
    }
    let config: tokio_postgres::Config = url.parse().unwrap();
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
    };
    let mut conninfo = format!(
        "host={host} port={} user={} dbname={db} sslmode=disable",
        config.get_ports().first().copied().unwrap_or(5432),
        config.get_user().unwrap_or("postgres"),
    );
    if let Some(password) = config.get_password() {
        conninfo.push_str(&format!(" password={}", String::from_utf8_lossy(password)));
    }
    // The database is dropped whatever the load's outcome.
    let load = std::panic::AssertUnwindSafe(async {
        let store = Arc::new(PostgresStore::builder(&conninfo).connect().await.unwrap());

        let renewing = Arc::new(AtomicBool::new(true));
        let renewals = tokio::spawn({
            let (store, renewing) = (store.clone(), renewing.clone());
            async move {
                let (mut renewed, mut failed) = (0, Vec::new());
                while renewing.load(Ordering::SeqCst) {
                    let now = crate::clock::now_ms();
                    match store.renew("a", now, now + 600_000).await {
                        Ok(_) => renewed += 1,
                        Err(e) => failed.push(e.to_string()),
                    }
                }
                (renewed, failed)
            }
        });
        // Rounds of 64 runs, for three seconds at least: a cycle needs a
        // renewal to start while a batch holds rows on both sides of one.
        let started = std::time::Instant::now();
        let mut round = 0;
        while round == 0 || started.elapsed() < std::time::Duration::from_secs(3) {
            let now = crate::clock::now_ms();
            let mut fences = Vec::new();
            for n in 0..64 {
                let id = format!("task-{round}-{n:02}");
                store
                    .create(TaskRecord::new(&id, "tool", now))
                    .await
                    .unwrap();
                let claimed = store.claim(&id, "a", now, now + 600_000).await.unwrap();
                fences.push((id, claimed.unwrap().0.fence));
            }
            let runs = fences.into_iter().map(|(id, fence)| {
                let store = store.clone();
                tokio::spawn(async move {
                    for position in 0..20 {
                        let entry = JournalEntry {
                            position,
                            kind: StepKind::Checkpoint,
                            name: "step".to_owned(),
                            value: serde_json::json!(position),
                        };
                        store.append(&id, entry, fence).await.unwrap();
                    }
                    let done = Transition::Complete(serde_json::Map::new());
                    let now = crate::clock::now_ms();
                    let ended = store.transition(&id, done, now, Some(fence)).await.unwrap();
                    assert_eq!(ended.unwrap().status.as_str(), "completed");
                })
            });
            futures::future::try_join_all(runs).await.unwrap();
            round += 1;
        }
        renewing.store(false, Ordering::SeqCst);
        let (renewed, failed) = renewals.await.unwrap();
        // Every backend of the store gone, its counts are in.
        drop(store);
        // A backend sends its counts as it exits: read them until its
        // connections have been gone for a second.
        let (mut deadlocks, mut gone_since) = (0, None);
        for _ in 0..100 {
            let row = admin
                .query_one(
                    "SELECT (SELECT count(*) FROM pg_stat_activity WHERE datname = $1), \
                     deadlocks FROM pg_stat_database WHERE datname = $1",
                    &[&db],
                )
                .await
                .unwrap();
            deadlocks = row.get::<_, i64>(1);
            if row.get::<_, i64>(0) > 0 {
                gone_since = None;
            } else if gone_since
                .get_or_insert_with(std::time::Instant::now)
                .elapsed()
                >= std::time::Duration::from_secs(1)
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        (renewed, failed, deadlocks)
    })
    .catch_unwind()
    .await;
    admin
        .batch_execute(&format!("DROP DATABASE {db} WITH (FORCE)"))
        .await
        .unwrap();
    let (renewed, failed, deadlocks) =
        load.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    assert!(renewed > 0);
    assert_eq!(deadlocks, 0, "Postgres broke {deadlocks} deadlocks");
    assert!(failed.is_empty(), "renewals failed: {failed:?}");
}
