//! The store contract, run against `PostgresStore` on a real server, and the
//! behaviours only a shared database has (`postgres_only`).
//!
//! The server is `MCP_TASKS_POSTGRES_URL`, or
//! `postgres://postgres@127.0.0.1:5432/postgres` when that is unset. Each
//! test gets a schema of its own (`mcp_tasks_test_<pid>_<n>_<nanos>`), which
//! a guard drops when the test ends, pass or fail. When the server cannot be
//! reached, the tests fail if `CI` is set, and otherwise print
//! `SKIPPED: Postgres not reachable at …` and pass.
#![cfg(feature = "postgres")]

mod common;

/// Finding the server, and a schema per test.
mod support {
    use std::time::Duration;

    use tokio_postgres::{Client, NoTls};

    /// The server the tests use, whether it answers (`server`), or a skip
    /// said on stderr (`server_or_skip`): the store test kit's, which the
    /// runtime's own unit tests use too.
    pub(crate) use mcp_tasks_runtime::store::testing::{
        postgres_server as server, postgres_server_or_skip as server_or_skip, postgres_url as url,
    };

    /// A plain connection to `url`, its driver task spawned on the current
    /// runtime.
    pub(crate) async fn connect(url: &str) -> Result<Client, tokio_postgres::Error> {
        let mut config: tokio_postgres::Config = url.parse()?;
        config.connect_timeout(Duration::from_secs(5));
        let (client, connection) = config.connect(NoTls).await?;
        tokio::spawn(connection);
        Ok(client)
    }

    /// A test's schema: dropped, with everything in it, when this drops.
    pub(crate) type Schema = mcp_tasks_runtime::store::testing::PostgresSchema;

    /// A fresh schema for one test, on the server at `url`.
    pub(crate) fn schema(url: &str) -> Schema {
        Schema::new(url, "mcp_tasks_test")
    }
}

mod postgres_store {
    use mcp_tasks_runtime::store::PostgresStore;
    use mcp_tasks_store_contract::Fixture;

    use super::support;

    async fn postgres() -> Fixture {
        let url = match support::server().await {
            Ok(url) => url,
            Err(reason) => return Fixture::skip(reason),
        };
        let schema = support::schema(&url);
        let store = PostgresStore::builder(schema.url())
            .schema(schema.name())
            .connect()
            .await
            .unwrap();
        Fixture::new(store).keep(schema)
    }

    mcp_tasks_store_contract::store_contract_tests!(postgres);
    mcp_tasks_store_contract::front_door_contract_tests!(postgres);
}

// ---------------------------------------------------------------------------
// Postgres only: migrations, connecting, and several processes at once.

mod postgres_only {
    use std::sync::Arc;

    use mcp_tasks_runtime::store::{
        JournalEntry, PostgresStore, StepKind, Store, TaskRecord, Transition,
    };
    use mcp_tasks_store_contract::full_task;
    use serde_json::json;

    use crate::common::{source_is, store_error};

    use super::support::{self, Schema};

    const T0: i64 = 1_700_000_000_000;

    /// A store on a fresh schema, and the schema's guard; `None` when the
    /// server is not reachable (the test is skipped).
    async fn fresh(test: &str) -> Option<(PostgresStore, Schema)> {
        let url = support::server_or_skip(test).await?;
        let schema = support::schema(&url);
        let store = PostgresStore::builder(schema.url())
            .schema(schema.name())
            .connect()
            .await
            .unwrap();
        Some((store, schema))
    }

    /// The versions recorded in a schema's `mcp_tasks_schema_version`.
    async fn versions(url: &str, schema: &str) -> Vec<i32> {
        let client = support::connect(url).await.unwrap();
        let sql = format!("SELECT version FROM {schema}.mcp_tasks_schema_version ORDER BY version");
        let rows = client.query(&sql, &[]).await.unwrap();
        rows.iter().map(|r| r.get(0)).collect()
    }

    fn migration_count() -> i32 {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/postgres/migrations");
        let count = std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "sql")
            })
            .count();
        i32::try_from(count).unwrap()
    }

    /// Processes that start together on a fresh schema all connect: the
    /// migrations run once, under the advisory lock. Connecting again
    /// changes nothing and keeps the data.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_connects_migrate_once_and_reconnects_are_idempotent() {
        let Some(url) = support::server_or_skip("concurrent_connects").await else {
            return;
        };
        let schema = support::schema(&url);
        let connect = || {
            PostgresStore::builder(schema.url())
                .schema(schema.name())
                .connect()
        };
        let (a, b, c, d) = tokio::join!(connect(), connect(), connect(), connect());
        let (a, b) = (a.unwrap(), b.unwrap());
        c.unwrap();
        d.unwrap();
        let all: Vec<i32> = (1..=migration_count()).collect();
        assert_eq!(versions(&url, schema.name()).await, all);

        a.create(full_task("t")).await.unwrap();
        assert_eq!(b.get("t").await.unwrap(), Some(full_task("t")));
        drop((a, b));
        for _ in 0..3 {
            let store = connect().await.unwrap();
            assert_eq!(store.get("t").await.unwrap(), Some(full_task("t")));
        }
        assert_eq!(versions(&url, schema.name()).await, all);
    }

    /// `PostgresSchema`, dropped while a store in it is still open (as a
    /// killed instance's would be): the store's sessions are ended and the
    /// schema is gone, tables and all.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_test_schema_takes_its_tables_and_sessions_with_it() {
        let Some((store, schema)) = fresh("a_dropped_test_schema").await else {
            return;
        };
        store.create(full_task("t")).await.unwrap();
        let name = schema.name().to_owned();
        let client = support::connect(&support::url()).await.unwrap();
        // The store's backends before the drop, by pid: the change feed may
        // connect again after its session ends, under the same name, and
        // that new session is not one the drop had to end.
        let sessions = "SELECT pid FROM pg_stat_activity WHERE application_name = $1";
        let pids = |rows: Vec<tokio_postgres::Row>| -> Vec<i32> {
            rows.iter().map(|r| r.get::<_, i32>(0)).collect()
        };
        let before = pids(client.query(sessions, &[&name]).await.unwrap());
        assert!(
            !before.is_empty(),
            "the store connects under the schema's name"
        );

        drop(schema);
        let schemas = "SELECT count(*) FROM pg_namespace WHERE nspname = $1";
        let left: i64 = client.query_one(schemas, &[&name]).await.unwrap().get(0);
        assert_eq!(left, 0, "the schema {name} is dropped");
        // A terminated backend leaves `pg_stat_activity` as it exits: give
        // it a moment.
        let mut still = before.clone();
        for _ in 0..50 {
            let now = pids(client.query(sessions, &[&name]).await.unwrap());
            still = before.iter().copied().filter(|p| now.contains(p)).collect();
            if still.is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(
            still.is_empty(),
            "the store's sessions are ended: {still:?} of {before:?} are left"
        );
        // The store itself answers with an error, not a panic or a hang.
        let after = store.get("t").await;
        assert!(after.is_err(), "{after:?}");
    }

    #[tokio::test]
    async fn newer_schema_version_is_refused() {
        let Some((store, schema)) = fresh("newer_schema_version_is_refused").await else {
            return;
        };
        drop(store);
        let url = support::url();
        let newer = migration_count() + 1;
        let client = support::connect(&url).await.unwrap();
        let sql = format!(
            "INSERT INTO {}.mcp_tasks_schema_version (version, name) VALUES ($1, 'future')",
            schema.name()
        );
        client.execute(&sql, &[&newer]).await.unwrap();
        let connect = PostgresStore::builder(schema.url())
            .schema(schema.name())
            .connect();
        let message = store_error(connect.await);
        assert!(
            message.contains(&format!("has version {newer}")) && message.contains(schema.name()),
            "{message}"
        );
    }

    /// Bad URLs, unreachable servers, missing databases and bad schema
    /// names are store errors that say what is wrong, never panics, and
    /// never show the password.
    #[tokio::test]
    async fn connection_failures_are_clear_store_errors() {
        let message = store_error(PostgresStore::connect("postgres://[nonsense").await);
        assert!(message.contains("connection URL"), "{message}");

        let refused = PostgresStore::connect("postgres://postgres:sekrit@127.0.0.1:1/tasks").await;
        let err = refused.unwrap_err();
        assert!(
            source_is::<tokio_postgres::Error>(&err),
            "the driver's error is the source: {err:?}"
        );
        let message = store_error(Err::<(), _>(err));
        assert!(
            message.contains("postgres://postgres@127.0.0.1:1/tasks")
                && message.contains("could not connect"),
            "{message}"
        );
        assert!(!message.contains("sekrit"), "{message}");

        let bad_schema = PostgresStore::builder(support::url()).schema("Robert'); DROP");
        let message = store_error(bad_schema.connect().await);
        assert!(message.contains("cannot name its schema"), "{message}");

        let Some(url) = support::server_or_skip("connection_failures (missing database)").await
        else {
            return;
        };
        // The same server in the key=value form, naming a missing database.
        let config: tokio_postgres::Config = url.parse().unwrap();
        let Some(tokio_postgres::config::Host::Tcp(host)) = config.get_hosts().first() else {
            return;
        };
        let missing = format!(
            "host={host} port={} user={} dbname=mcp_tasks_no_such_database",
            config.get_ports().first().copied().unwrap_or(5432),
            config.get_user().unwrap_or("postgres"),
        );
        let message = store_error(PostgresStore::connect(missing).await);
        assert!(message.contains("mcp_tasks_no_such_database"), "{message}");
    }

    /// Two stores (two processes, as far as the server can tell) change one
    /// task at once: every change lands, each sees a version of its own, and
    /// the version ends at the number of changes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_transitions_from_two_stores_serialize() {
        let Some((a, schema)) = fresh("concurrent_transitions_from_two_stores").await else {
            return;
        };
        let b = PostgresStore::builder(schema.url())
            .schema(schema.name())
            .connect()
            .await
            .unwrap();
        let stores: [Arc<dyn Store>; 2] = [Arc::new(a), Arc::new(b)];
        stores[0]
            .create(TaskRecord::new("t", "deploy", T0))
            .await
            .unwrap();
        const CHANGES: u64 = 60;
        let mut calls = vec![];
        for i in 0..CHANGES {
            let store = stores[(i % 2) as usize].clone();
            calls.push(tokio::spawn(async move {
                let change = Transition::StatusMessage(format!("step {i}"));
                store.transition("t", change, T0 + 1, None).await
            }));
        }
        let mut seen = vec![];
        for call in calls {
            let record = call.await.unwrap().unwrap().expect("every change applies");
            seen.push(record.version);
        }
        seen.sort_unstable();
        assert_eq!(seen, (1..=CHANGES).collect::<Vec<_>>());
        for store in &stores {
            assert_eq!(store.get("t").await.unwrap().unwrap().version, CHANGES);
        }
    }

    /// JSON is kept as the text serde_json wrote: a NUL character (which
    /// jsonb refuses) and keys in any order come back as they went in.
    #[tokio::test]
    async fn json_text_round_trips_what_jsonb_would_refuse() {
        let Some((store, _schema)) = fresh("json_text_round_trips").await else {
            return;
        };
        let task = full_task("t");
        let fence = task.fence;
        store.create(task).await.unwrap();
        let entry = JournalEntry {
            position: 0,
            kind: StepKind::Checkpoint,
            name: "nul".into(),
            value: json!({"z": "a\u{0}b", "a": [1.5, -0.0, 1e300]}),
        };
        store.append("t", entry.clone(), fence).await.unwrap();
        assert_eq!(store.journal("t").await.unwrap(), vec![entry]);
    }

    /// Bad data in the database is an error naming the task and column,
    /// never a panic; the other tasks are still served.
    #[tokio::test]
    async fn unreadable_rows_are_errors_naming_the_task() {
        let Some((store, schema)) = fresh("unreadable_rows").await else {
            return;
        };
        for id in ["good", "bad-json", "bad-status", "bad-ttl", "bad-journal"] {
            store
                .create(TaskRecord::new(id, "deploy", T0))
                .await
                .unwrap();
        }
        let entry = JournalEntry {
            position: 4,
            kind: StepKind::Checkpoint,
            name: "c".into(),
            value: json!(1),
        };
        store.append("bad-journal", entry, 0).await.unwrap();
        let client = support::connect(&support::url()).await.unwrap();
        let s = schema.name();
        client
            .batch_execute(&format!(
                "UPDATE {s}.tasks SET arguments = '{{not json' WHERE id = 'bad-json';
                 UPDATE {s}.tasks SET status = 'exploded' WHERE id = 'bad-status';
                 UPDATE {s}.tasks SET ttl_ms = -1 WHERE id = 'bad-ttl';
                 UPDATE {s}.journal SET kind = 'mystery' WHERE task_id = 'bad-journal';"
            ))
            .await
            .unwrap();
        for (id, column) in [
            ("bad-json", "arguments"),
            ("bad-status", "status"),
            ("bad-ttl", "ttl_ms"),
        ] {
            let message = store_error(store.get(id).await);
            assert!(
                message.contains(id) && message.contains(column),
                "{message}"
            );
            let message = store_error(store.transition(id, Transition::Cancel, T0, None).await);
            assert!(message.contains(id), "{message}");
        }
        let message = store_error(store.journal("bad-journal").await);
        assert!(message.contains("position 4"), "{message}");
        assert!(store_error(store.unfinished().await).contains("bad-"));
        assert!(store.get("good").await.unwrap().is_some());
    }

    /// A schema written before tasks recorded their tool's version (schema
    /// version 3) is migrated when a store connects, and its tasks read
    /// back as version 1.
    #[tokio::test]
    async fn tasks_stored_before_tool_versions_read_back_as_version_1() {
        let Some(url) = support::server_or_skip("tasks_stored_before_tool_versions").await else {
            return;
        };
        let schema = support::schema(&url);
        let s = schema.name();
        let client = support::connect(&url).await.unwrap();
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/postgres/migrations");
        let mut sql = format!(
            "CREATE SCHEMA {s}; SET search_path TO {s};
             CREATE TABLE mcp_tasks_schema_version (
                 version integer NOT NULL PRIMARY KEY, name text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now());"
        );
        for (n, file) in [
            "0001_tasks_and_journal.sql",
            "0002_question_deadlines.sql",
            "0003_spent_states.sql",
        ]
        .iter()
        .enumerate()
        {
            sql.push_str(&std::fs::read_to_string(dir.join(file)).unwrap());
            sql.push_str(&format!(
                ";\nINSERT INTO mcp_tasks_schema_version (version, name) VALUES ({}, '{file}');\n",
                n + 1
            ));
        }
        sql.push_str(&format!(
            "INSERT INTO tasks (id, tool, arguments, client_capabilities, status, created_at_ms, \
             updated_at_ms, pending, cancel_requested) \
             VALUES ('old', 'deploy', '{{}}', '{{}}', 'working', {T0}, {T0}, '[]', false);"
        ));
        client.batch_execute(&sql).await.unwrap();
        drop(client);

        let store = PostgresStore::builder(schema.url())
            .schema(s)
            .connect()
            .await
            .unwrap();
        assert_eq!(
            versions(&url, s).await,
            (1..=migration_count()).collect::<Vec<_>>()
        );
        let old = store.get("old").await.unwrap().expect("the old task");
        assert_eq!(old.tool_version, 1);
        let mut new = TaskRecord::new("new", "deploy", T0);
        new.tool_version = 4;
        store.create(new).await.unwrap();
        assert_eq!(store.get("new").await.unwrap().unwrap().tool_version, 4);
    }

    /// Recovery's query reads the partial index on unfinished tasks.
    #[tokio::test]
    async fn unfinished_reads_its_index() {
        let Some((store, schema)) = fresh("unfinished_reads_its_index").await else {
            return;
        };
        drop(store);
        let client = support::connect(&support::url()).await.unwrap();
        let s = schema.name();
        client
            .batch_execute(&format!(
                "SET search_path TO {s}; SET enable_seqscan = off;"
            ))
            .await
            .unwrap();
        let plan = client
            .query(
                "EXPLAIN SELECT * FROM tasks WHERE status IN ('working', 'input_required') \
                 ORDER BY id",
                &[],
            )
            .await
            .unwrap();
        let plan: Vec<String> = plan.iter().map(|r| r.get(0)).collect();
        assert!(
            plan.iter().any(|line| line.contains("tasks_unfinished")),
            "{plan:#?}"
        );
    }

    /// A connection the server closes is replaced: the next call succeeds.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn closed_connections_are_replaced() {
        let Some((store, schema)) = fresh("closed_connections_are_replaced").await else {
            return;
        };
        store
            .create(TaskRecord::new("t", "deploy", T0))
            .await
            .unwrap();
        let client = support::connect(&support::url()).await.unwrap();
        client
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE application_name = $1",
                &[&schema.name()],
            )
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(store.get("t").await.unwrap().is_some());
    }
}

/// Engines sharing one database: the change feed carries work and cancel
/// requests between them at once. Leases and scans are set to a minute, so
/// only the feed can be what moved anything within the test's seconds.
mod engines {
    use std::{
        sync::atomic::{AtomicUsize, Ordering},
        time::{Duration, Instant},
    };

    use mcp_tasks_runtime::{
        Engine, ToolError, checkpoint,
        engine::{Call, CallOutcome},
        store::{PostgresStore, TaskStatus},
        task_tool,
        tool::Registry,
    };
    use serde_json::Map;

    use super::support::{self, Schema};

    static QUICK_RUNS: AtomicUsize = AtomicUsize::new(0);

    /// Done at once, counting its runs.
    #[task_tool]
    async fn quick() -> Result<String, ToolError> {
        checkpoint("count", || async {
            Ok::<_, ToolError>(QUICK_RUNS.fetch_add(1, Ordering::SeqCst))
        })
        .await?;
        Ok("quick".into())
    }

    static STEP_EFFECTS: AtomicUsize = AtomicUsize::new(0);

    /// Ten checkpoints, 150 ms apart, counting their effects.
    #[task_tool]
    async fn steps() -> Result<String, ToolError> {
        for i in 0..10 {
            checkpoint(format!("step-{i}"), || async {
                STEP_EFFECTS.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(i)
            })
            .await?;
            #[allow_nondeterminism]
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        Ok("ten steps".into())
    }

    /// Busy for a minute unless cancelled (steps every 20 ms).
    #[task_tool]
    async fn busy() -> &'static str {
        for _ in 0..3000 {
            #[allow_nondeterminism]
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        "busy"
    }

    const SLOW: Duration = Duration::from_secs(60);
    const PROMPT: Duration = Duration::from_secs(5);

    async fn engine(schema: &Schema, name: &str, workers: usize) -> Engine {
        let store = PostgresStore::builder(schema.url())
            .schema(schema.name())
            .connect()
            .await
            .unwrap();
        let registry = Registry::new()
            .with(quick_tool())
            .and_then(|r| r.with(busy_tool()))
            .and_then(|r| r.with(steps_tool()))
            .unwrap();
        Engine::builder(store)
            .registry(registry)
            .instance(name)
            .max_concurrency(workers)
            .lease(SLOW)
            .scan_interval(SLOW)
            .start()
            .await
            .unwrap()
    }

    async fn start(engine: &Engine, tool: &str) -> String {
        let CallOutcome::Task(t) = engine.call(Call::new(tool, Map::new())).await.unwrap() else {
            panic!("no task");
        };
        t.id
    }

    async fn until(engine: &Engine, id: &str, status: TaskStatus) -> Duration {
        let begun = Instant::now();
        loop {
            let t = engine.get(id, None).await.unwrap();
            if t.status == status {
                return begun.elapsed();
            }
            assert!(begun.elapsed() < PROMPT, "task {id} stuck at {t:#?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_task_created_on_a_busy_instance_runs_on_a_free_one_at_once() {
        let Some(url) = support::server_or_skip("engines::busy_instance").await else {
            return;
        };
        let schema = support::schema(&url);
        let a = engine(&schema, "a", 1).await;
        let b = engine(&schema, "b", 4).await;
        let hog = start(&a, "busy").await;
        until(&a, &hog, TaskStatus::Working).await;
        let id = start(&a, "quick").await;
        let took = until(&b, &id, TaskStatus::Completed).await;
        let t = b.get(&id, None).await.unwrap();
        assert_eq!(t.result.unwrap()["content"][0]["text"], "quick");
        assert!(took < PROMPT, "took {took:?}");
        a.cancel(&hog, None).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_through_one_instance_stops_a_run_on_another() {
        let Some(url) = support::server_or_skip("engines::cancel_elsewhere").await else {
            return;
        };
        let schema = support::schema(&url);
        let a = engine(&schema, "a", 4).await;
        let b = engine(&schema, "b", 4).await;
        let id = start(&a, "busy").await;
        // Until a's run holds the task (a loaded machine may take a while).
        let store = PostgresStore::builder(schema.url())
            .schema(schema.name())
            .connect()
            .await
            .unwrap();
        let begun = Instant::now();
        while mcp_tasks_runtime::store::Store::get(&store, &id)
            .await
            .unwrap()
            .and_then(|r| r.lease)
            .is_none()
        {
            assert!(begun.elapsed() < PROMPT, "a never claimed {id}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        b.cancel(&id, None).await.unwrap();
        let t = b.get(&id, None).await.unwrap();
        assert_eq!(
            t.status,
            TaskStatus::Working,
            "a's run holds the task; b only asks"
        );
        until(&b, &id, TaskStatus::Cancelled).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_shut_down_instance_hands_its_tasks_over_at_once() {
        let Some(url) = support::server_or_skip("engines::handover").await else {
            return;
        };
        let schema = support::schema(&url);
        let a = engine(&schema, "a", 4).await;
        let b = engine(&schema, "b", 4).await;
        let id = start(&a, "busy").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        a.shutdown().await.unwrap();
        // b claims the released task and runs it; a's run stops.
        let begun = Instant::now();
        loop {
            let t = b.get(&id, None).await.unwrap();
            if t.lease.as_ref().is_some_and(|l| l.owner == "b") {
                assert_eq!(t.fence, 2);
                break;
            }
            assert!(begun.elapsed() < PROMPT, "b did not take over: {t:#?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        b.cancel(&id, None).await.unwrap();
        until(&b, &id, TaskStatus::Cancelled).await;
    }

    /// The server drops every connection of the store (the pool's and the
    /// feed's) again and again while a task journals its steps: the writes
    /// are retried until they land, the task completes, and no step's
    /// effect runs twice.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dropped_connections_mid_run_lose_nothing() {
        let Some(url) = support::server_or_skip("engines::dropped_connections").await else {
            return;
        };
        let schema = support::schema(&url);
        let a = engine(&schema, "a", 4).await;
        let id = start(&a, "steps").await;
        let admin = support::connect(&url).await.unwrap();
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            admin
                .execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE application_name = $1",
                    &[&schema.name()],
                )
                .await
                .unwrap();
        }
        let begun = Instant::now();
        let t = loop {
            match a.get(&id, None).await {
                Ok(t) if t.status.is_terminal() => break t,
                _ => {}
            }
            assert!(begun.elapsed() < Duration::from_secs(20), "never finished");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(t.status, TaskStatus::Completed, "{t:#?}");
        assert_eq!(a.store().journal(&id).await.unwrap().len(), 10);
        assert_eq!(
            STEP_EFFECTS.load(Ordering::SeqCst),
            10,
            "each step ran once"
        );
    }
}

// ---------------------------------------------------------------------------
// TLS, as the URL's `sslmode` asks: the local server runs with `ssl = on` and
// Debian's self-signed snakeoil certificate (for `localhost`).

mod tls {
    use mcp_tasks_runtime::store::PostgresStore;

    use super::support::{self, Schema};

    /// The snakeoil certificate: the server's, and its own CA.
    const SNAKEOIL: &str = "/etc/ssl/certs/ssl-cert-snakeoil.pem";

    /// The error and each of its sources, as one line.
    fn chain(error: &dyn std::error::Error) -> String {
        let mut out = error.to_string();
        let mut next = error.source();
        while let Some(e) = next {
            out.push_str(": ");
            out.push_str(&e.to_string());
            next = e.source();
        }
        out
    }

    /// `url` with the setting `setting` added, in its form.
    fn with(url: &str, setting: &str) -> String {
        if !url.contains("://") {
            format!("{url} {setting}")
        } else if url.contains('?') {
            format!("{url}&{setting}")
        } else {
            format!("{url}?{setting}")
        }
    }

    /// A store on a fresh schema with `settings` added to the URL.
    async fn connect(
        test: &str,
        settings: &[&str],
    ) -> Option<(mcp_tasks_runtime::Result<PostgresStore>, Schema)> {
        let url = support::server_or_skip(test).await?;
        let schema = support::schema(&url);
        let url = settings.iter().fold(schema.url(), |url, s| with(&url, s));
        let store = PostgresStore::builder(url)
            .schema(schema.name())
            .connect()
            .await;
        Some((store, schema))
    }

    /// Whether every session the store opened (its pool's and its feed's,
    /// which carry the schema's name as their application name) is over
    /// TLS, and how many there are, as the server sees them.
    async fn sessions_over_tls(schema: &Schema) -> (bool, i64) {
        let client = support::connect(&support::url()).await.unwrap();
        let row = client
            .query_one(
                "SELECT coalesce(bool_and(s.ssl), false), count(*) FROM pg_stat_ssl s \
                 JOIN pg_stat_activity a USING (pid) WHERE a.application_name = $1",
                &[&schema.name()],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    }

    /// `require` encrypts every connection of the store (the certificate
    /// is not checked); `disable` none.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn require_connects_over_tls_and_disable_does_not() {
        let Some((store, schema)) = connect("tls_require", &["sslmode=require"]).await else {
            return;
        };
        let _store = store.expect("sslmode=require connects to a server with ssl = on");
        let (all_tls, sessions) = sessions_over_tls(&schema).await;
        assert!(sessions > 0, "the store holds a session");
        assert!(all_tls, "every session of the store is over TLS");

        let (store, schema) = connect("tls_disable", &["sslmode=disable"]).await.unwrap();
        let _store = store.unwrap();
        let (all_tls, sessions) = sessions_over_tls(&schema).await;
        assert!(sessions > 0 && !all_tls, "sslmode=disable is plain");
    }

    /// `verify-ca` with the CA connects over TLS, whatever name the
    /// certificate gives (it is for `localhost`, the URL says 127.0.0.1).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn verify_ca_with_the_ca_connects() {
        let root = format!("sslrootcert={SNAKEOIL}");
        let Some((store, schema)) = connect("tls_verify_ca", &["sslmode=verify-ca", &root]).await
        else {
            return;
        };
        let _store = store.expect("verify-ca with the snakeoil CA connects");
        assert!(sessions_over_tls(&schema).await.0);
    }

    /// `verify-full` refuses what it cannot check, with a message that
    /// says why: no CA at all; a CA, but a certificate for another name.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn verify_full_refuses_without_the_ca_or_the_name() {
        let Some((store, _schema)) = connect("tls_verify_full", &["sslmode=verify-full"]).await
        else {
            return;
        };
        let error = chain(&store.unwrap_err());
        assert!(
            error.contains("verify-full") && error.contains("sslrootcert"),
            "says it needs the CA: {error}"
        );

        let root = format!("sslrootcert={SNAKEOIL}");
        let (store, _schema) = connect("tls_verify_full", &["sslmode=verify-full", &root])
            .await
            .unwrap();
        let error = chain(&store.unwrap_err());
        assert!(
            error.contains("not valid for name"),
            "the certificate is for localhost, not 127.0.0.1: {error}"
        );

        // The name it is for, with the CA: connects.
        let url = support::url();
        if url.contains("@127.0.0.1:") {
            let url = url.replace("@127.0.0.1:", "@localhost:");
            let schema = Schema::new(&url, "mcp_tasks_test");
            let url = with(&with(&schema.url(), "sslmode=verify-full"), &root);
            let store = PostgresStore::builder(url)
                .schema(schema.name())
                .connect()
                .await;
            let _store = store.expect("verify-full with the CA, to localhost, connects");
            assert!(sessions_over_tls(&schema).await.0);
        }
    }

    /// A connector of one's own replaces the store's: tokio-postgres's
    /// `NoTls` under `prefer` connects in plain text to a server that
    /// offers TLS (the store's own connector takes it), and under `require`
    /// does not connect.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connector_of_ones_own_is_the_one_used() {
        let Some(url) = support::server_or_skip("tls_own_connector").await else {
            return;
        };
        let schema = support::schema(&url);
        let _store = PostgresStore::builder(with(&schema.url(), "sslmode=prefer"))
            .schema(schema.name())
            .tls(tokio_postgres::NoTls)
            .connect()
            .await
            .expect("NoTls connects in plain text under prefer");
        let (all_tls, sessions) = sessions_over_tls(&schema).await;
        assert!(sessions > 0 && !all_tls, "plain, through NoTls");

        let schema = support::schema(&url);
        let error = PostgresStore::builder(with(&schema.url(), "sslmode=require"))
            .schema(schema.name())
            .tls(tokio_postgres::NoTls)
            .connect()
            .await
            .unwrap_err();
        let error = chain(&error);
        assert!(error.contains("TLS"), "NoTls cannot require TLS: {error}");
    }

    /// A proxy on 127.0.0.1 in front of the server at `upstream`
    /// (`host:port`) that answers every SSLRequest with `N` (no TLS here),
    /// then forwards the rest both ways; its `host:port`.
    async fn refusing_tls(upstream: String) -> String {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let mut first = [0; 8];
                    client.read_exact(&mut first).await?;
                    let mut server = tokio::net::TcpStream::connect(upstream).await?;
                    if first == SSL_REQUEST {
                        client.write_all(b"N").await?;
                    } else {
                        server.write_all(&first).await?;
                    }
                    tokio::io::copy_bidirectional(&mut client, &mut server)
                        .await
                        .map(drop)
                });
            }
        });
        addr
    }

    /// `url` (the test server's, with `host:port` in it) going through a
    /// [`refusing_tls`] proxy instead.
    async fn through_refusing_proxy(url: &str) -> String {
        let config: tokio_postgres::Config = url.parse().unwrap();
        let host = match &config.get_hosts()[0] {
            tokio_postgres::config::Host::Tcp(host) => host.clone(),
            other => panic!("the test server is not over TCP: {other:?}"),
        };
        let upstream = format!("{host}:{}", config.get_ports()[0]);
        assert!(url.contains(&upstream), "{url} does not name {upstream}");
        url.replacen(&upstream, &refusing_tls(upstream.clone()).await, 1)
    }

    /// What a subscriber wrote.
    #[derive(Clone, Default)]
    struct Written(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Written {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Written {
        fn warnings(&self) -> Vec<String> {
            String::from_utf8(self.0.lock().unwrap().clone())
                .unwrap()
                .lines()
                .filter(|l| l.contains("WARN"))
                .map(str::to_owned)
                .collect()
        }
    }

    /// Under `prefer`, a server that refuses TLS gets a plain connection
    /// and a WARN that says so, naming the host, once for the store however
    /// many connections its pool opens; a server that takes TLS, none.
    /// (Current-thread runtime: the subscriber set here sees every task.)
    #[tokio::test]
    async fn prefer_warns_once_when_the_server_refuses_tls() {
        let Some(url) = support::server_or_skip("tls_prefer_plain").await else {
            return;
        };
        let written = Written::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer({
                let written = written.clone();
                move || written.clone()
            })
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);

        // Straight to the server, which takes TLS: no warning.
        let schema = support::schema(&url);
        let _store = PostgresStore::builder(with(&schema.url(), "sslmode=prefer"))
            .schema(schema.name())
            .connect()
            .await
            .unwrap();
        assert_eq!(written.warnings(), Vec::<String>::new());

        // Through the proxy: plain, and said once.
        let schema = support::schema(&url);
        let proxied = through_refusing_proxy(&schema.url()).await;
        let store = PostgresStore::builder(with(&proxied, "sslmode=prefer"))
            .schema(schema.name())
            .connect()
            .await
            .expect("prefer connects in plain text when the server refuses TLS");
        // Several connections at once.
        let reads = (0..6).map(|i| {
            use mcp_tasks_runtime::store::Store as _;
            let store = &store;
            async move { store.get(&format!("nope{i}")).await.unwrap() }
        });
        futures::future::join_all(reads).await;
        let (all_tls, sessions) = sessions_over_tls(&schema).await;
        assert!(sessions > 1 && !all_tls, "{sessions} plain sessions");
        let warnings = written.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("the connection to 127.0.0.1 is NOT encrypted")
                && warnings[0].contains("sslmode=require"),
            "{}",
            warnings[0]
        );
    }

    /// Runs this test binary's [`environment_child`] with `env` set, for
    /// `case`: the environment is the process's, so each case gets a
    /// process of its own.
    fn in_a_child(case: &str, env: &[(&str, &str)]) {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["tls::environment_child", "--exact", "--nocapture"])
            .env("MCP_TASKS_TLS_CASE", case)
            .env_remove("PGSSLMODE")
            .env_remove("PGSSLROOTCERT")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && text.contains("1 passed"),
            "{case}: {text}"
        );
    }

    /// `PGSSLMODE` and `PGSSLROOTCERT` from the environment, as libpq
    /// reads them, when the URL does not set `sslmode` and `sslrootcert`.
    #[test]
    fn pgsslmode_and_pgsslrootcert_are_read_from_the_environment() {
        // verify-ca with the CA: connects over TLS.
        in_a_child(
            "tls",
            &[("PGSSLMODE", "verify-ca"), ("PGSSLROOTCERT", SNAKEOIL)],
        );
        // verify-full: the certificate is for localhost, not 127.0.0.1.
        in_a_child(
            "not valid for name",
            &[("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", SNAKEOIL)],
        );
        // require, through a proxy that refuses TLS: no plain connection.
        in_a_child("server does not support TLS", &[("PGSSLMODE", "require")]);
        // The URL wins.
        in_a_child("url wins", &[("PGSSLMODE", "verify-full")]);
        in_a_child("PGSSLMODE=on", &[("PGSSLMODE", "on")]);
    }

    /// One case of [`pgsslmode_and_pgsslrootcert_are_read_from_the_environment`],
    /// in a process of its own; nothing without `MCP_TASKS_TLS_CASE`.
    #[tokio::test]
    async fn environment_child() {
        let Ok(case) = std::env::var("MCP_TASKS_TLS_CASE") else {
            return;
        };
        let url = support::server().await.expect("the server answers");
        let schema = support::schema(&url);
        let connect = |url: String| {
            let name = schema.name().to_owned();
            async move { PostgresStore::builder(url).schema(name).connect().await }
        };
        match case.as_str() {
            "tls" => {
                let _store = connect(schema.url()).await.unwrap();
                assert!(sessions_over_tls(&schema).await.0, "over TLS");
            }
            "url wins" => {
                let _store = connect(with(&schema.url(), "sslmode=disable"))
                    .await
                    .unwrap();
                let (all_tls, sessions) = sessions_over_tls(&schema).await;
                assert!(sessions > 0 && !all_tls, "sslmode=disable in the URL");
            }
            "server does not support TLS" => {
                let proxied = through_refusing_proxy(&schema.url()).await;
                let error = chain(&connect(proxied).await.unwrap_err());
                assert!(error.contains(&case), "{error}");
                eprintln!("require, refused TLS: {error}");
            }
            named => {
                let error = chain(&connect(schema.url()).await.unwrap_err());
                assert!(error.contains(named), "{error}");
            }
        }
    }

    /// An `sslmode` libpq does not know is refused naming it, before any
    /// connection is made.
    #[tokio::test]
    async fn an_unknown_sslmode_is_refused_naming_it() {
        let error =
            PostgresStore::connect("postgres://postgres@127.0.0.1:5432/postgres?sslmode=on")
                .await
                .unwrap_err()
                .to_string();
        assert!(error.contains("unknown sslmode `on`"), "{error}");
    }
}
