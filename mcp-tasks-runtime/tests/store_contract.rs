//! The store contract, run against the runtime's stores.
//!
//! The behaviours every store shares live in the kit,
//! `mcp_tasks_runtime::store::testing` (feature `testing`): here it runs
//! against `MemoryStore` and against `SqliteStore` in a file in a temporary
//! directory, for task storage and for front-door state. Behaviours that only a durable file has (reopening,
//! migrations, unreadable rows) follow, in `sqlite_only`.

// The SQLite-only tests share error helpers with the Postgres tests.
#[cfg(feature = "sqlite")]
mod common;

mod memory_store {
    use mcp_tasks_runtime::store::MemoryStore;
    use mcp_tasks_store_contract::Fixture;

    mcp_tasks_store_contract::store_contract_tests!(|| async { Fixture::new(MemoryStore::new()) });
    mcp_tasks_store_contract::front_door_contract_tests!(|| async {
        Fixture::new(MemoryStore::new())
    });
}

#[cfg(feature = "sqlite")]
mod sqlite_store {
    use mcp_tasks_runtime::store::SqliteStore;
    use mcp_tasks_store_contract::Fixture;

    async fn sqlite() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("tasks.db"))
            .await
            .unwrap();
        Fixture::new(store).keep(dir)
    }

    mcp_tasks_store_contract::store_contract_tests!(sqlite);
    mcp_tasks_store_contract::front_door_contract_tests!(sqlite);
}

// ---------------------------------------------------------------------------
// SQLite only: the file.

#[cfg(feature = "sqlite")]
mod sqlite_only {
    use std::path::{Path, PathBuf};

    use mcp_tasks_runtime::store::SqliteStore;
    use mcp_tasks_runtime::store::Synchronous;

    use std::sync::Arc;

    use mcp_tasks_runtime::question::{FormRequest, InputCapabilities, InputRequest};
    use mcp_tasks_runtime::store::{
        JournalEntry, PendingInput, StepKind, Store, TaskRecord, TaskStatus, Transition,
    };
    use mcp_tasks_store_contract::full_task;
    use serde_json::{Map, Value, json};

    use crate::common::{source_is, store_error};

    // Builders for the SQLite-only behaviours.

    const T0: i64 = 1_700_000_000_000;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            other => panic!("not an object: {other}"),
        }
    }

    /// A working task created at `T0`.
    fn task(id: &str) -> TaskRecord {
        TaskRecord::new(id, "deploy", T0)
    }

    fn with(id: &str, f: impl FnOnce(&mut TaskRecord)) -> TaskRecord {
        let mut t = task(id);
        f(&mut t);
        t
    }

    /// A form question, as the runtime asks them.
    fn form(message: &str) -> InputRequest {
        InputRequest::Form(FormRequest {
            message: message.to_owned(),
            requested_schema: obj(json!({"type": "object"})),
        })
    }

    /// A task parked on `keys`, at positions 10, 11, …
    fn parked(id: &str, keys: &[&str]) -> TaskRecord {
        with(id, |t| {
            t.status = TaskStatus::InputRequired;
            t.pending = keys
                .iter()
                .zip(10..)
                .map(|(k, position)| PendingInput {
                    key: (*k).to_owned(),
                    position,
                    kind: StepKind::Ask,
                    name: "Approval".into(),
                    request: form("go?"),
                    deadline_ms: None,
                    race: None,
                    in_flight: false,
                    answer: None,
                })
                .collect();
        })
    }

    fn entry(position: u32, kind: StepKind, name: &str, value: Value) -> JournalEntry {
        JournalEntry {
            position,
            kind,
            name: name.to_owned(),
            value,
        }
    }

    /// An elicitation answer carrying `content`.
    fn accept(content: &str) -> Value {
        json!({"action": "accept", "content": {"value": content}})
    }

    async fn create(store: &Arc<dyn Store>, t: &TaskRecord) {
        store.create(t.clone()).await.unwrap();
    }

    async fn get(store: &Arc<dyn Store>, id: &str) -> TaskRecord {
        store
            .get(id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("task {id} is missing"))
    }

    fn sorted(mut ids: Vec<String>) -> Vec<String> {
        ids.sort();
        ids
    }

    async fn open(path: &Path, sync: Synchronous) -> Arc<dyn Store> {
        Arc::new(
            SqliteStore::builder(path)
                .synchronous(sync)
                .open()
                .await
                .unwrap(),
        )
    }

    /// The migration files, in order, checked to be numbered 1, 2, 3, …
    fn migrations() -> Vec<(String, String)> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/migrations");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "sql"))
            .collect();
        files.sort();
        assert!(!files.is_empty());
        files
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let name = p.file_name().unwrap().to_str().unwrap().to_owned();
                assert!(
                    name.starts_with(&format!("{:04}_", i + 1)),
                    "migration {name} is out of sequence"
                );
                (name, std::fs::read_to_string(&p).unwrap())
            })
            .collect()
    }

    fn user_version(path: &Path) -> i64 {
        rusqlite::Connection::open(path)
            .unwrap()
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap()
    }

    fn schema(path: &Path) -> Vec<(String, String)> {
        let c = rusqlite::Connection::open(path).unwrap();
        let mut s = c
            .prepare("SELECT type, name FROM sqlite_master ORDER BY type, name")
            .unwrap();
        s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    /// Everything the store can tell about the tasks with these ids.
    async fn snapshot(
        store: &Arc<dyn Store>,
        ids: &[&str],
    ) -> (
        Vec<(Option<TaskRecord>, Vec<JournalEntry>)>,
        Vec<String>,
        Option<i64>,
    ) {
        let mut tasks = vec![];
        for id in ids {
            tasks.push((
                store.get(id).await.unwrap(),
                store.journal(id).await.unwrap(),
            ));
        }
        let unfinished = sorted(
            store
                .unfinished()
                .await
                .unwrap()
                .into_iter()
                .map(|t| t.id)
                .collect(),
        );
        (tasks, unfinished, store.next_expiry().await.unwrap())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reopen_keeps_everything() {
        for sync in [Synchronous::Full, Synchronous::Normal] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("tasks.db");
            let store = open(&path, sync).await;

            create(&store, &full_task("full")).await;
            create(&store, &with("running", |t| t.ttl_ms = Some(60_000))).await;
            for p in 0..5 {
                store
                    .append(
                        "running",
                        entry(p, StepKind::Checkpoint, "step", json!({"p": p})),
                        0,
                    )
                    .await
                    .unwrap();
            }
            store
                .transition(
                    "running",
                    Transition::StatusMessage("3 of 5".into()),
                    T0 + 1,
                    None,
                )
                .await
                .unwrap()
                .unwrap();
            create(&store, &parked("parked", &["k1", "k2"])).await;
            store
                .answer("parked", obj(json!({"k1": accept("yes")})), T0 + 2)
                .await
                .unwrap()
                .unwrap();
            create(&store, &task("done")).await;
            store
                .transition(
                    "done",
                    Transition::Complete(obj(json!({"content": []}))),
                    T0 + 3,
                    None,
                )
                .await
                .unwrap()
                .unwrap();
            create(&store, &with("gone", |t| t.ttl_ms = Some(1))).await;
            store.purge_expired(T0 + 1, usize::MAX).await.unwrap();

            let ids = ["full", "running", "parked", "done", "gone"];
            let before = snapshot(&store, &ids).await;
            assert_eq!(before.0[4], (None, vec![]));
            assert_eq!(before.1, ["full", "parked", "running"]);
            drop(store);

            let store = open(&path, sync).await;
            assert_eq!(snapshot(&store, &ids).await, before, "{sync:?}");
            // And it carries on from there.
            store
                .append("running", entry(5, StepKind::Now, "now", json!(T0)), 0)
                .await
                .unwrap();
            drop(store);
            let store = open(&path, sync).await;
            assert_eq!(store.journal("running").await.unwrap().len(), 6);
        }
    }

    #[tokio::test]
    async fn fresh_file_gets_the_latest_schema_version() {
        let latest = migrations().len() as i64;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.db");
        drop(SqliteStore::open(&path).await.unwrap());
        assert_eq!(user_version(&path), latest);
        let names: Vec<String> = schema(&path).into_iter().map(|(_, n)| n).collect();
        for name in [
            "tasks",
            "journal",
            "tasks_by_expiry",
            "tasks_unfinished_by_principal",
        ] {
            assert!(
                names.iter().any(|n| n == name),
                "{name} missing from {names:?}"
            );
        }
        // Migration 0008 dropped it: `tasks_unfinished_by_principal` has the
        // same rows.
        assert!(!names.iter().any(|n| n == "tasks_unfinished"), "{names:?}");
    }

    #[tokio::test]
    async fn reopening_does_not_rerun_migrations() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.db");
        let store = open(&path, Synchronous::Full).await;
        create(&store, &task("t")).await;
        drop(store);
        let before = schema(&path);
        // Migrations use plain `CREATE TABLE`: running one twice would fail
        // the open. Reopen several times; nothing changes.
        for _ in 0..3 {
            let store = open(&path, Synchronous::Full).await;
            assert_eq!(get(&store, "t").await, task("t"));
            drop(store);
            assert_eq!(schema(&path), before);
            assert_eq!(user_version(&path), migrations().len() as i64);
        }
    }

    /// A file left at each older schema version is brought up to date.
    #[tokio::test]
    async fn older_schema_versions_are_upgraded() {
        let all = migrations();
        for version in 0..all.len() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("tasks.db");
            {
                let c = rusqlite::Connection::open(&path).unwrap();
                // Somebody else's table: left alone.
                c.execute_batch(
                    "CREATE TABLE unrelated (x INTEGER); INSERT INTO unrelated VALUES (7);",
                )
                .unwrap();
                for (_, sql) in &all[..version] {
                    c.execute_batch(sql).unwrap();
                }
                c.pragma_update(None, "user_version", version as i64)
                    .unwrap();
            }
            let store = open(&path, Synchronous::Full).await;
            create(&store, &full_task("t")).await;
            store
                .append(
                    "t",
                    entry(0, StepKind::Checkpoint, "c", json!(1)),
                    full_task("t").fence,
                )
                .await
                .unwrap();
            assert_eq!(get(&store, "t").await, full_task("t"));
            assert_eq!(store.journal("t").await.unwrap().len(), 1);
            drop(store);
            assert_eq!(user_version(&path), all.len() as i64, "from {version}");
            let x: i64 = rusqlite::Connection::open(&path)
                .unwrap()
                .query_row("SELECT x FROM unrelated", [], |r| r.get(0))
                .unwrap();
            assert_eq!(x, 7);
        }
    }

    /// A file written before the version counter (schema version 1, with
    /// capabilities and requests stored as MCP JSON) opens, is migrated, and
    /// reads back typed, at version 0.
    #[tokio::test]
    async fn a_version_1_file_is_migrated_and_read_back_typed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.db");
        {
            let c = rusqlite::Connection::open(&path).unwrap();
            c.execute_batch(include_str!(
                "../src/store/migrations/0001_tasks_and_journal.sql"
            ))
            .unwrap();
            c.pragma_update(None, "user_version", 1).unwrap();
            let pending = json!([{
                "key": "k1",
                "position": 2,
                "kind": "ask",
                "name": "Approval",
                "request": {
                    "method": "elicitation/create",
                    "params": {"mode": "form", "message": "m", "requestedSchema": {"type": "object"}},
                },
            }]);
            c.execute(
                "INSERT INTO tasks (id, tool, arguments, client_capabilities, principal, status, \
                 status_message, created_at_ms, updated_at_ms, ttl_ms, expires_at_ms, \
                 poll_interval_ms, pending, wake_at_ms, cancel_requested, result, error) \
                 VALUES ('old', 'deploy', '{\"service\":\"api\"}', '{\"elicitation\":{}}', \
                 'alice', 'input_required', 'Waiting', ?1, ?2, NULL, NULL, 500, ?3, NULL, 0, \
                 NULL, NULL)",
                rusqlite::params![T0, T0 + 5, pending.to_string()],
            )
            .unwrap();
            c.execute(
                "INSERT INTO journal (task_id, position, kind, name, value) \
                 VALUES ('old', 0, 'checkpoint', 'fetch', '{\"rows\":3}')",
                [],
            )
            .unwrap();
        }

        let store = open(&path, Synchronous::Full).await;
        let mut capabilities = InputCapabilities::NONE;
        capabilities.elicitation = true;
        let expected = TaskRecord {
            id: "old".into(),
            tool: "deploy".into(),
            // Stored before tools had versions: version 1.
            tool_version: 1,
            arguments: obj(json!({"service": "api"})),
            client_capabilities: capabilities,
            principal: Some("alice".into()),
            status: TaskStatus::InputRequired,
            status_message: Some("Waiting".into()),
            created_at_ms: T0,
            updated_at_ms: T0 + 5,
            ttl_ms: None,
            poll_interval_ms: Some(500),
            pending: vec![PendingInput {
                key: "k1".into(),
                position: 2,
                kind: StepKind::Ask,
                name: "Approval".into(),
                request: InputRequest::Form(FormRequest {
                    message: "m".into(),
                    requested_schema: obj(json!({"type": "object"})),
                }),
                // Written before deadlines and races existed: none.
                deadline_ms: None,
                race: None,
                in_flight: false,
                answer: None,
            }],
            wake_at_ms: None,
            cancel_requested: false,
            result: None,
            error: None,
            version: 0,
            lease: None,
            fence: 0,
        };
        assert_eq!(get(&store, "old").await, expected);
        assert_eq!(
            store.journal("old").await.unwrap(),
            vec![entry(0, StepKind::Checkpoint, "fetch", json!({"rows": 3}))]
        );
        // The old task carries on from version 0.
        let a = store
            .answer("old", obj(json!({"k1": accept("yes")})), T0 + 6)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((a.accepted, a.runnable, a.record.version), (1, true, 1));
        drop(store);
        assert_eq!(
            user_version(&path),
            migrations().len() as i64,
            "migrated to the latest schema"
        );
    }

    #[tokio::test]
    async fn newer_schema_version_is_refused() {
        let newer = migrations().len() as i64 + 1;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.db");
        rusqlite::Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", newer)
            .unwrap();
        let message = store_error(SqliteStore::open(&path).await);
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(
            message.contains(&format!("schema version {newer}")),
            "{message}"
        );
        // The file is left as it was.
        assert_eq!(user_version(&path), newer);
    }

    #[tokio::test]
    async fn open_errors_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-such-dir").join("tasks.db");
        let err = SqliteStore::open(&missing).await.unwrap_err();
        // The store creates a new file itself (owner-only), so the first
        // thing to fail is the operating system's, kept as the source.
        assert!(
            source_is::<std::io::Error>(&err),
            "the operating system's error is the source: {err:?}"
        );
        let message = store_error(Err::<(), _>(err));
        assert!(
            message.contains(&missing.display().to_string()),
            "{message}"
        );

        let garbage = dir.path().join("garbage.db");
        std::fs::write(&garbage, vec![0xAB; 8192]).unwrap();
        let message = store_error(SqliteStore::open(&garbage).await);
        assert!(
            message.contains(&garbage.display().to_string()),
            "{message}"
        );
    }

    /// Bad data in the file is an error naming the task, never a panic, and it
    /// does not spoil the calls batched with it. The store reads the file on
    /// every call (no cached rows), so edits made behind its back show.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unreadable_rows_are_errors_naming_the_task() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.db");
        let store = open(&path, Synchronous::Normal).await;
        for id in ["good", "bad-json", "bad-status", "bad-ttl", "bad-journal"] {
            create(&store, &task(id)).await;
        }
        store
            .append(
                "bad-journal",
                entry(4, StepKind::Checkpoint, "c", json!(1)),
                0,
            )
            .await
            .unwrap();
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "UPDATE tasks SET arguments = '{not json' WHERE id = 'bad-json';
             UPDATE tasks SET status = 'exploded' WHERE id = 'bad-status';
             UPDATE tasks SET ttl_ms = -1 WHERE id = 'bad-ttl';
             UPDATE journal SET kind = 'mystery' WHERE task_id = 'bad-journal';
             UPDATE tasks SET status_message = 'edited outside' WHERE id = 'good';",
        )
        .unwrap();

        for (id, column) in [
            ("bad-json", "arguments"),
            ("bad-status", "status"),
            ("bad-ttl", "ttl_ms"),
        ] {
            let err = store.get(id).await.unwrap_err();
            if id == "bad-json" {
                assert!(source_is::<serde_json::Error>(&err), "{err:?}");
            }
            let message = store_error(Err::<(), _>(err));
            assert!(
                message.contains(id) && message.contains(column),
                "{message}"
            );
            let message = store_error(store.transition(id, Transition::Cancel, T0, None).await);
            assert!(message.contains(id), "{message}");
        }
        let message = store_error(store.journal("bad-journal").await);
        assert!(
            message.contains("bad-journal") && message.contains("position 4"),
            "{message}"
        );
        let message = store_error(store.unfinished().await);
        assert!(message.contains("bad-"), "{message}");
        assert_eq!(
            get(&store, "good").await.status_message.as_deref(),
            Some("edited outside")
        );

        // A failing call among many: only it fails.
        let mut calls = vec![];
        for p in 0..50u32 {
            let s = store.clone();
            calls.push(tokio::spawn(async move {
                s.append("good", entry(p, StepKind::Checkpoint, "c", json!(p)), 0)
                    .await
                    .is_ok()
            }));
            if p == 25 {
                let s = store.clone();
                calls.push(tokio::spawn(async move {
                    s.transition("bad-json", Transition::Cancel, T0, None)
                        .await
                        .is_ok()
                }));
            }
        }
        let mut ok = vec![];
        for call in calls {
            ok.push(call.await.unwrap());
        }
        assert_eq!(ok.iter().filter(|ok| !**ok).count(), 1);
        assert!(!ok[26], "the transition of the unreadable task fails");
        assert_eq!(store.journal("good").await.unwrap().len(), 50);
    }

    /// Milliseconds beyond i64 are stored as i64::MAX, which means the same
    /// thing: never, in practice.
    #[tokio::test]
    async fn huge_millis_are_clamped() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir.path().join("tasks.db"), Synchronous::Normal).await;
        let t = with("t", |t| {
            t.ttl_ms = Some(u64::MAX);
            t.poll_interval_ms = Some(u64::MAX);
        });
        create(&store, &t).await;
        let got = get(&store, "t").await;
        assert_eq!(got.ttl_ms, Some(i64::MAX as u64));
        assert_eq!(got.poll_interval_ms, Some(i64::MAX as u64));
        assert_eq!(got.expires_at_ms(), t.expires_at_ms());
        assert_eq!(store.next_expiry().await.unwrap(), Some(i64::MAX));
    }
}
