//! Tests of the SQLite store's own machinery: connection settings, query
//! plans, batches and the read thread. The behaviours every store shares are
//! in the store contract suite.

use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::{SqliteStore, Synchronous, rows};
use crate::{
    error::{Error, Result},
    store::{Store, StoreError},
};

async fn open(sync: Synchronous) -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::builder(dir.path().join("t.db"))
        .synchronous(sync)
        .open()
        .await
        .unwrap();
    (dir, store)
}

fn pragma(c: &Connection, name: &str) -> String {
    c.pragma_query_value(None, name, |r| r.get::<_, rusqlite::types::Value>(0))
        .map(|v| format!("{v:?}"))
        .unwrap()
}

#[tokio::test]
async fn connection_settings() {
    for (sync, level) in [(Synchronous::Full, "2"), (Synchronous::Normal, "1")] {
        let (_dir, store) = open(sync).await;
        let got = store
            .call(|c| {
                Ok([
                    pragma(c, "journal_mode"),
                    pragma(c, "synchronous"),
                    pragma(c, "foreign_keys"),
                    pragma(c, "busy_timeout"),
                ])
            })
            .await
            .unwrap();
        assert_eq!(
            got,
            [
                r#"Text("wal")"#.to_owned(),
                format!("Integer({level})"),
                "Integer(1)".to_owned(),
                "Integer(5000)".to_owned(),
            ]
        );
    }
}

/// The sweep, `next_expiry`, recovery and the scan for work read indexes,
/// not the table.
#[tokio::test]
async fn queries_use_the_indexes() {
    let (_dir, store) = open(Synchronous::Normal).await;
    let plan = |query: String| {
        store.call(move |c| {
            let mut stmt = c.prepare(&format!("EXPLAIN QUERY PLAN {query}")).unwrap();
            let rows = stmt
                .query_map([], |r| r.get::<_, String>(3))
                .unwrap()
                .collect::<rusqlite::Result<Vec<_>>>()
                .unwrap();
            Ok(rows.join("; "))
        })
    };
    let p = plan(rows::DELETE_EXPIRED.replace("?1", "5").replace("?2", "500"))
        .await
        .unwrap();
    assert!(p.contains("INDEX tasks_by_expiry"), "{p}");
    // The cascade finds the journal rows by key, too.
    assert!(!p.contains("SCAN"), "{p}");
    let p = plan(rows::SELECT_NEXT_EXPIRY.into()).await.unwrap();
    assert!(p.contains("tasks_by_expiry"), "{p}");
    assert!(!p.contains("SCAN"), "{p}");
    // Only the unfinished rows: a partial index's whole scan, not the table's.
    let p = plan(rows::SELECT_UNFINISHED.into()).await.unwrap();
    assert_eq!(p, "SCAN tasks USING INDEX tasks_unfinished_by_principal");
    // The scan for work reads the due tasks, a range of `tasks_due`: not
    // every working task, as it did while the tasks asleep were in its way.
    let p = plan(
        rows::SELECT_CLAIMABLE
            .replace("?1", "5")
            .replace("?2", "256"),
    )
    .await
    .unwrap();
    assert!(
        p.contains("SEARCH tasks USING") && p.contains("INDEX tasks_due (<expr><?)"),
        "{p}"
    );
    assert!(!p.contains("SCAN"), "{p}");
}

/// A failing call in a batch rolls back only its own writes.
#[tokio::test]
async fn failed_call_rolls_back_only_itself() {
    let (_dir, store) = open(Synchronous::Normal).await;
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    // Hold the owner thread so the next three calls land in one batch.
    let gate = store.call(move |_| {
        let _ = rx.recv_timeout(Duration::from_secs(5));
        Ok(())
    });
    let write = |sql: &'static str, fail: bool| {
        store.call(move |c| {
            c.execute_batch(sql).map_err(sql_err)?;
            if fail {
                return Err(StoreError::new("failed on purpose").into());
            }
            Ok(())
        })
    };
    let (g, a, b, d, ()) = tokio::join!(
        gate,
        write("CREATE TABLE a (x INTEGER)", false),
        write("CREATE TABLE b (x INTEGER)", true),
        write("CREATE TABLE d (x INTEGER)", false),
        async {
            tokio::task::yield_now().await;
            tx.send(()).unwrap();
        },
    );
    g.unwrap();
    a.unwrap();
    assert!(b.unwrap_err().to_string().contains("failed on purpose"));
    d.unwrap();
    let tables = store
        .call(|c| {
            let mut s = c
                .prepare(
                    "SELECT name FROM sqlite_master WHERE name IN ('a', 'b', 'd') ORDER BY name",
                )
                .unwrap();
            Ok(s.query_map([], |r| r.get::<_, String>(0))
                .unwrap()
                .collect::<rusqlite::Result<Vec<_>>>()
                .unwrap())
        })
        .await
        .unwrap();
    assert_eq!(tables, ["a", "d"]);
}

/// Reads use their own connection: a read completes while a write batch
/// is still in progress on the writer thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_do_not_wait_behind_writes() {
    let (_dir, store) = open(Synchronous::Full).await;
    let store = std::sync::Arc::new(store);
    let (release, blocked) = std::sync::mpsc::channel::<()>();
    let blocked = std::sync::Mutex::new(blocked);
    let (started_tx, started) = oneshot::channel::<()>();
    let started_tx = std::sync::Mutex::new(Some(started_tx));
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .call(move |_| {
                    if let Some(tx) = started_tx.lock().unwrap().take() {
                        let _ = tx.send(());
                    }
                    // Hold the writer until the test says so.
                    let _ = blocked
                        .lock()
                        .unwrap()
                        .recv_timeout(Duration::from_secs(10));
                    Ok(())
                })
                .await
        })
    };
    started.await.unwrap();
    let read = tokio::time::timeout(Duration::from_secs(5), store.get("nobody")).await;
    assert!(
        matches!(read, Ok(Ok(None))),
        "the read finished while the writer was busy: {read:?}"
    );
    release.send(()).unwrap();
    writer.await.unwrap().unwrap();
}

/// A call that panics fails alone; the thread lives on.
#[tokio::test]
async fn panicking_call_fails_alone() {
    let (_dir, store) = open(Synchronous::Normal).await;
    let r: Result<()> = store.call(|_| panic!("a bug")).await;
    assert!(r.unwrap_err().to_string().contains("panicked"));
    assert_eq!(store.next_expiry().await.unwrap(), None);
}

fn sql_err(e: rusqlite::Error) -> Error {
    StoreError::new("test SQL failed").with_source(e).into()
}

/// An update writes the indexed columns (`status`, `wake_at_ms`,
/// `lease_owner`) only when they change: through a claim, a sleep, a park
/// with a deadline, a timeout and the end, each record reads back as
/// returned and every index still matches the table.
#[tokio::test]
async fn updates_keep_the_row_and_its_indexes() {
    use crate::question::{FormRequest, InputRequest};
    use crate::store::{PendingInput, StepKind, TaskStatus, Transition};

    let (_dir, store) = open(Synchronous::Normal).await;
    let consistent = |what: &'static str, expected: crate::store::TaskRecord| {
        let store = &store;
        async move {
            let stored = store.get(&expected.id).await.unwrap().expect("the task");
            assert_eq!(stored, expected, "after {what}");
            let check = store
                .call(|c| Ok(pragma(c, "integrity_check")))
                .await
                .unwrap();
            assert_eq!(check, r#"Text("ok")"#, "after {what}");
        }
    };
    let t0 = 1_700_000_000_000;
    let mut task = crate::store::TaskRecord::new("t", "tool", t0);
    task.principal = Some("alice".into());
    task.ttl_ms = Some(60_000);
    assert!(task.claim("a", t0, t0 + 1_000));
    store.create(task.clone()).await.unwrap();
    consistent("create", task).await;

    let slept = store
        .transition(
            "t",
            Transition::Sleep {
                wake_at_ms: t0 + 500,
            },
            t0 + 1,
            Some(1),
        )
        .await
        .unwrap()
        .expect("a sleep");
    assert_eq!(
        (slept.status, slept.lease.as_ref()),
        (TaskStatus::Working, None)
    );
    consistent("a sleep", slept).await;

    let (claimed, _) = store
        .claim("t", "b", t0 + 600, t0 + 2_000)
        .await
        .unwrap()
        .expect("a claim");
    consistent("a claim", claimed.clone()).await;

    let question = PendingInput {
        key: "k".into(),
        position: 0,
        kind: StepKind::Ask,
        name: "Approval0".into(),
        request: InputRequest::Form(FormRequest {
            message: "go?".into(),
            requested_schema: serde_json::Map::new(),
        }),
        deadline_ms: Some(t0 + 900),
        race: None,
        in_flight: false,
        answer: None,
    };
    let parked = store
        .transition(
            "t",
            Transition::Park(vec![question]),
            t0 + 700,
            Some(claimed.fence),
        )
        .await
        .unwrap()
        .expect("a park");
    assert_eq!(parked.status, TaskStatus::InputRequired);
    assert_eq!(parked.wake_at_ms, Some(t0 + 900));
    consistent("a park", parked).await;

    let timed_out = store
        .time_out("t", t0 + 1_000)
        .await
        .unwrap()
        .expect("the task");
    assert_eq!(timed_out.accepted, 1);
    consistent("a timeout", timed_out.record.clone()).await;

    let ended = store
        .transition("t", Transition::Cancel, t0 + 1_100, None)
        .await
        .unwrap()
        .expect("an end");
    assert_eq!(ended.status, TaskStatus::Cancelled);
    consistent("the end", ended).await;
}

/// Two stores on one file, as two processes share it: a commit through one
/// is announced on the other's feed (`Change::Missed`, within a few poll
/// intervals), and a store's own commits are not announced to itself.
#[tokio::test]
async fn another_processs_commits_are_announced_and_ones_own_are_not() {
    use crate::store::{Change, TaskRecord};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let every = Duration::from_millis(10);
    let here = SqliteStore::builder(&path)
        .poll_interval(every)
        .open()
        .await
        .unwrap();
    let there = SqliteStore::builder(&path)
        .poll_interval(every)
        .open()
        .await
        .unwrap();
    // Whatever opening the second store wrote has been heard by now.
    tokio::time::sleep(every * 10).await;
    let mut feed = here.changes().expect("a SQLite store has a feed");
    let t0 = 1_700_000_000_000;

    // Its own commits: many poll intervals pass, nothing is announced.
    for i in 0..5 {
        here.create(TaskRecord::new(format!("own-{i}"), "tool", t0))
            .await
            .unwrap();
    }
    tokio::time::sleep(every * 20).await;
    assert!(
        matches!(
            feed.try_recv(),
            Err(tokio::sync::broadcast::error::TryRecvError::Empty)
        ),
        "a store's own commits are not another process's"
    );

    // One commit through the other store.
    there
        .create(TaskRecord::new("theirs", "tool", t0))
        .await
        .unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(10), feed.recv())
        .await
        .expect("announced within 10 s")
        .unwrap();
    assert_eq!(heard, Change::Missed);
    assert!(here.get("theirs").await.unwrap().is_some());
}

/// A deferrable write alone (a run's end) waits for the next job and
/// commits with it: the later job, in the same transaction, sees the
/// earlier one's row uncommitted (another connection does not see it).
/// A deferrable write that no job joins commits on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferrable_write_shares_the_next_jobs_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let store = std::sync::Arc::new(
        SqliteStore::builder(&path)
            .linger(Duration::from_secs(30))
            .open()
            .await
            .unwrap(),
    );
    store
        .call(|c| {
            c.execute_batch("CREATE TABLE shared (x TEXT)")
                .map_err(sql_err)
        })
        .await
        .unwrap();
    let deferred = {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .writer()
                .unwrap()
                .run_as(super::worker::Urgency::Deferrable, |c| {
                    c.execute("INSERT INTO shared VALUES ('deferred')", [])
                        .map_err(sql_err)
                        .map(drop)
                })
                .await
        })
    };
    // Long enough for the writer to have committed it alone, were it urgent.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!deferred.is_finished(), "the deferrable write waited");
    let seen = store
        .call(move |c| {
            let here: i64 = c
                .query_row("SELECT count(*) FROM shared", [], |r| r.get(0))
                .map_err(sql_err)?;
            let other = Connection::open(&path).map_err(sql_err)?;
            let elsewhere: i64 = other
                .query_row("SELECT count(*) FROM shared", [], |r| r.get(0))
                .map_err(sql_err)?;
            Ok((here, elsewhere))
        })
        .await
        .unwrap();
    deferred.await.unwrap().unwrap();
    assert_eq!(seen, (1, 0), "in the same transaction, not yet committed");

    let (_dir, store) = open(Synchronous::Full).await;
    let alone = store
        .writer()
        .unwrap()
        .run_as(super::worker::Urgency::Deferrable, |_| Ok(7));
    let alone = tokio::time::timeout(Duration::from_secs(5), alone).await;
    assert!(matches!(alone, Ok(Ok(7))), "{alone:?}");
}

/// A store opened read-only in a process does not keep another store of
/// the same process from opening the file to write, whether the read-only
/// one is still open or just dropped.
#[tokio::test]
async fn a_read_only_store_beside_a_writer_in_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    drop(SqliteStore::open(&path).await.unwrap());
    // Once the writer has closed the file (and removed its `-wal`), the
    // reader reads it as immutable; while it is open, through its `-shm`.
    while dir.path().join("t.db-wal").exists() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for _ in 0..2 {
        let reader = SqliteStore::open_read_only(&path).await.unwrap();
        assert!(reader.unfinished().await.unwrap().is_empty());
        let writer = SqliteStore::open(&path).await.unwrap();
        writer.purge_expired(0, 10).await.unwrap();
        assert!(reader.unfinished().await.unwrap().is_empty());
        drop((reader, writer));
    }
}
