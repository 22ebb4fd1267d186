//! The checks that must write nothing, end to end: the replay check before a
//! deploy (`--check-replay` of every example server) and the operator CLI's
//! reads (`tasks list`, `show`, `journal`), run as real processes on a store
//! of an OLDER schema, with tasks in it that a real server parked. They leave
//! the store as they found it: on SQLite, the bytes of the file, its `-wal`
//! and its `-shm` (and which of them exist), whether no process has the file
//! open, a server (of an older build) holds it, or one was killed on it; on
//! Postgres, the schema's catalog, rows and recorded version. So the build
//! that runs on the store still starts on it. Migration happens only when
//! asked for: `tasks migrate` moves the store to this build's version, and
//! the CLI's writes refuse an older store, naming `migrate`.
//!
//! The older store is built from the migration files the runtime ships
//! (`store/migrations/0001..0008` for SQLite, `store/postgres/migrations/
//! 0001..0004` for Postgres: the schemas before `tasks_due`), and filled
//! with the rows a `versioned-digest` server of this build parked.

mod common;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Command, Output},
    time::{Duration, Instant},
};

use common::{digest, process::StoreArgs};
use serde_json::{Value, json};

/// Every wait in these tests gives up after this long.
const PATIENCE: Duration = Duration::from_secs(30);

fn digest_bin() -> &'static str {
    common::bin("versioned-digest")
}

fn tasks_bin() -> &'static str {
    common::bin("tasks")
}

/// The example servers that take `--check-replay`, with the environment
/// that picks their build.
fn servers() -> [(&'static str, &'static [(&'static str, &'static str)]); 5] {
    [
        (
            common::bin("versioned-digest"),
            &[("MCP_TASKS_DIGEST_VERSION", "1")],
        ),
        (common::bin("demo"), &[]),
        (common::bin("conformance"), &[]),
        (common::bin("fleet-fixture"), &[]),
        (
            common::bin("versioned-report"),
            &[("MCP_TASKS_REPORT_VERSION", "1")],
        ),
    ]
}

/// The SQLite schema before `tasks_due` (version 8), as the runtime ships it.
const SQLITE_V8: &[&str] = &[
    include_str!("../../mcp-tasks-runtime/src/store/migrations/0001_tasks_and_journal.sql"),
    include_str!("../../mcp-tasks-runtime/src/store/migrations/0002_task_version.sql"),
    include_str!("../../mcp-tasks-runtime/src/store/migrations/0003_list_and_sessions.sql"),
    include_str!("../../mcp-tasks-runtime/src/store/migrations/0004_leases.sql"),
    include_str!("../../mcp-tasks-runtime/src/store/migrations/0005_question_deadlines.sql"),
    include_str!("../../mcp-tasks-runtime/src/store/migrations/0006_spent_states.sql"),
    include_str!("../../mcp-tasks-runtime/src/store/migrations/0007_tool_version.sql"),
    include_str!("../../mcp-tasks-runtime/src/store/migrations/0008_one_unfinished_index.sql"),
];

/// The Postgres schema before `tasks_due` (version 4), as the runtime ships it.
const POSTGRES_V4: &[(&str, &str)] = &[
    (
        "0001_tasks_and_journal.sql",
        include_str!(
            "../../mcp-tasks-runtime/src/store/postgres/migrations/0001_tasks_and_journal.sql"
        ),
    ),
    (
        "0002_question_deadlines.sql",
        include_str!(
            "../../mcp-tasks-runtime/src/store/postgres/migrations/0002_question_deadlines.sql"
        ),
    ),
    (
        "0003_spent_states.sql",
        include_str!("../../mcp-tasks-runtime/src/store/postgres/migrations/0003_spent_states.sql"),
    ),
    (
        "0004_tool_version.sql",
        include_str!("../../mcp-tasks-runtime/src/store/postgres/migrations/0004_tool_version.sql"),
    ),
];

/// This build's schema versions.
const SQLITE_LATEST: u32 = 9;
const POSTGRES_LATEST: i32 = 5;

/// The tables a store keeps, in the order their rows can be copied.
const TABLES: &[&str] = &["tasks", "journal", "sessions", "spent_states"];

// ---------------------------------------------------------------------------
// Parking tasks with a real server

/// Runs `versioned-digest` version 1 on `store`, parks a task on its
/// question and another in a day's durable sleep, and drains it. Returns
/// the two ids (asked, asleep).
async fn park_two(store: &StoreArgs) -> (String, String) {
    let parked = digest::park_two(store).await;
    assert!(
        parked.server.terminate(PATIENCE).success(),
        "the server drains"
    );
    (parked.asked, parked.asleep)
}

// ---------------------------------------------------------------------------
// Running the checks

/// Runs `bin` with `args` and `env` to its end (or panics after PATIENCE).
fn run(bin: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(bin)
        .args(args)
        .env("RUST_LOG", "error")
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let deadline = Instant::now() + PATIENCE;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{bin} {args:?} did not exit within {PATIENCE:?} (serving instead?)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("its output")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `--check-replay` of every example server on `store`: each prints its
/// report and exits (0 when it passed, 1 when not), without serving.
/// `versioned-digest` version 1 parked the tasks `ids`: its check passes,
/// naming each.
fn check_replay_everywhere(store: &[&str], ids: &[&str]) {
    for (bin, env) in servers() {
        let mut args = vec!["--addr", "127.0.0.1:0", "--check-replay"];
        args.extend_from_slice(store);
        let out = run(bin, &args, env);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            !stdout.contains("listening on") && !stderr.contains("panicked"),
            "{bin} --check-replay served instead of checking: {stdout}{stderr}"
        );
        assert!(
            stdout.contains("unfinished task(s)"),
            "{bin} --check-replay printed no report: {out:?}"
        );
        if bin == digest_bin() {
            assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
            for id in ids {
                assert!(
                    stdout.contains(&format!("{id} digest v1: replays")),
                    "{stdout}"
                );
            }
        } else {
            // Other tools: the digest tasks are unknown to them.
            assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
            assert!(stdout.contains("unknown tool"), "{stdout}");
        }
    }
}

/// `tasks list`, `show` and `journal` on `store`: each succeeds and shows
/// the tasks `ids`. Returns what `list --json` printed.
fn operator_reads(store: &[&str], ids: &[&str]) -> Value {
    let tasks = |args: &[&str]| {
        let mut all = store.to_vec();
        all.extend_from_slice(args);
        let out = run(tasks_bin(), &all, &[]);
        assert!(out.status.success(), "tasks {all:?}: {out:?}");
        text(&out.stdout)
    };
    let listed = tasks(&["list"]);
    let as_json: Value = serde_json::from_str(&tasks(&["--json", "list"])).expect("JSON");
    for id in ids {
        assert!(listed.contains(id), "{listed}");
        let shown = tasks(&["show", id]);
        assert!(shown.contains("fetch-members"), "{shown}");
        let export: Value = serde_json::from_str(&tasks(&["journal", id])).expect("JSON");
        assert_eq!(export["taskId"], *id, "{export}");
        assert!(
            export["entries"].as_array().is_some_and(|e| e.len() >= 2),
            "{export}"
        );
    }
    as_json
}

// ---------------------------------------------------------------------------
// SQLite

/// Each of the store's files (the database, its `-wal` and `-shm`) that
/// exists, with its bytes.
fn files(db: &Path) -> BTreeMap<String, Vec<u8>> {
    ["", "-wal", "-shm"]
        .iter()
        .filter_map(|suffix| {
            let mut name = db.as_os_str().to_owned();
            name.push(suffix);
            std::fs::read(PathBuf::from(name))
                .ok()
                .map(|bytes| (format!("tasks.db{suffix}"), bytes))
        })
        .collect()
}

/// Asserts that the files are as `before` (naming which changed).
fn assert_unchanged(db: &Path, before: &BTreeMap<String, Vec<u8>>, what: &str) {
    let after = files(db);
    let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&after), names(before), "{what}: the same files exist");
    for (name, bytes) in before {
        assert!(
            after[name] == *bytes,
            "{what} changed {name} ({} bytes before, {} after)",
            bytes.len(),
            after[name].len()
        );
    }
}

/// The schema version in the database file's header (`user_version`, bytes
/// 60..64), read without SQLite, which could write.
fn header_version(db: &Path) -> u32 {
    let bytes = std::fs::read(db).expect("the database file");
    u32::from_be_bytes(bytes[60..64].try_into().unwrap())
}

/// Makes a SQLite store of schema version 8 at `old` (from the shipped
/// migration files, in WAL mode as a server leaves it) holding the rows of
/// the store `current`; closes it, so that no `-wal` or `-shm` is left.
fn sqlite_v8(old: &Path, current: &Path) {
    let conn = rusqlite::Connection::open(old).expect("a new file");
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    conn.execute_batch("BEGIN").unwrap();
    for sql in SQLITE_V8 {
        conn.execute_batch(sql)
            .expect("a shipped migration applies");
    }
    conn.execute_batch("PRAGMA user_version = 8; COMMIT")
        .unwrap();
    conn.execute("ATTACH DATABASE ?1 AS current", [current.to_str().unwrap()])
        .unwrap();
    for table in TABLES {
        conn.execute_batch(&format!(
            "INSERT INTO main.{table} SELECT * FROM current.{table}"
        ))
        .expect("the rows fit the older schema");
    }
    conn.execute_batch("DETACH DATABASE current").unwrap();
    drop(conn);
    assert_eq!(header_version(old), 8);
}

/// On a SQLite store of schema version 8 that no process has open, with
/// two tasks parked by a server: `--check-replay` of every example server
/// and `tasks list`/`show`/`journal` leave the database file as it was
/// (same bytes, still version 8) and create no `-wal` or `-shm`. The CLI's
/// writes refuse it, naming `migrate`; `tasks migrate` moves it to version
/// 9, after which the check still passes and the writes go through.
#[tokio::test]
async fn sqlite_checks_leave_an_older_store_as_they_found_it() {
    let dir = tempfile::tempdir().unwrap();
    let current = dir.path().join("current.db");
    let (asked, asleep) = park_two(&StoreArgs::Sqlite(current.clone())).await;
    let old_dir = dir.path().join("old");
    std::fs::create_dir(&old_dir).unwrap();
    let db = old_dir.join("tasks.db");
    sqlite_v8(&db, &current);
    let store_arg = db.to_str().unwrap();
    let store = ["--store", store_arg];

    let before = files(&db);
    assert_eq!(
        before.len(),
        1,
        "no process has the file open: no -wal, no -shm"
    );

    check_replay_everywhere(&store, &[&asked, &asleep]);
    assert_unchanged(&db, &before, "--check-replay");
    operator_reads(&store, &[&asked, &asleep]);
    assert_unchanged(&db, &before, "tasks list/show/journal");
    assert_eq!(header_version(&db), 8, "still the older build's schema");

    // A write refuses the older schema, naming both versions and `migrate`.
    for args in [vec!["cancel", asked.as_str()], vec!["purge"]] {
        let mut all = store.to_vec();
        all.extend_from_slice(&args);
        let out = run(tasks_bin(), &all, &[]);
        let stderr = text(&out.stderr);
        assert!(
            !out.status.success(),
            "tasks {args:?} on version 8: {out:?}"
        );
        assert!(
            stderr.contains("schema version 8")
                && stderr.contains(&format!("({SQLITE_LATEST})"))
                && stderr.contains(&format!("tasks --store {store_arg} migrate")),
            "{stderr}"
        );
    }
    assert_unchanged(&db, &before, "the refused writes");

    // The explicit step.
    let out = run(tasks_bin(), &["--store", store_arg, "migrate"], &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        text(&out.stdout).trim(),
        format!("schema version 8 -> {SQLITE_LATEST}")
    );
    // (The CLI's writing connection may leave the migration in the WAL:
    // read the version through SQLite now.)
    let version: u32 = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SQLITE_LATEST);
    let out = run(
        tasks_bin(),
        &["--store", store_arg, "--json", "migrate"],
        &[],
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap(),
        json!({"from": SQLITE_LATEST, "to": SQLITE_LATEST})
    );
    check_replay_everywhere(&store, &[&asked, &asleep]);
    let out = run(tasks_bin(), &["--store", store_arg, "cancel", &asked], &[]);
    assert!(out.status.success(), "{out:?}");
}

/// The same checks on a SQLite store of version 8 while a process of an
/// older build has it open (a connection of this test, in WAL mode, with a
/// commit still in the `-wal` only), and then on a copy of the three files
/// as a killed server leaves them: the checks see the commit in the WAL,
/// and write none of the database, the `-wal` or the `-shm`.
#[tokio::test]
async fn sqlite_checks_beside_a_server_or_after_a_crash_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let current = dir.path().join("current.db");
    let (asked, asleep) = park_two(&StoreArgs::Sqlite(current.clone())).await;
    let live_dir = dir.path().join("live");
    std::fs::create_dir(&live_dir).unwrap();
    let db = live_dir.join("tasks.db");
    sqlite_v8(&db, &current);

    // The older build's server: it holds the file, and has committed a
    // change that is still in the WAL only.
    let server = rusqlite::Connection::open(&db).unwrap();
    server
        .execute_batch("PRAGMA wal_autocheckpoint = 0")
        .unwrap();
    server
        .execute(
            "UPDATE tasks SET status_message = 'seen in the WAL only' WHERE id = ?1",
            [&asked],
        )
        .unwrap();
    let store_arg = db.to_str().unwrap().to_owned();
    let store = ["--store", store_arg.as_str()];
    let before = files(&db);
    assert_eq!(before.len(), 3, "a server holds the file: -wal and -shm");
    assert!(!before["tasks.db-wal"].is_empty(), "a commit in the WAL");

    check_replay_everywhere(&store, &[&asked, &asleep]);
    let listed = operator_reads(&store, &[&asked, &asleep]);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == asked.as_str() && t["statusMessage"] == "seen in the WAL only"),
        "the reads see the commit in the WAL: {listed}"
    );
    assert_unchanged(&db, &before, "the checks beside a server");
    let version: u32 = server
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 8, "the older build's schema");

    // A server killed on the file leaves the three files and no process:
    // copies of them, as it left them.
    let crashed_dir = dir.path().join("crashed");
    std::fs::create_dir(&crashed_dir).unwrap();
    let crashed = crashed_dir.join("tasks.db");
    for (name, bytes) in &before {
        std::fs::write(crashed_dir.join(name), bytes).unwrap();
    }
    drop(server);
    let crashed_arg = crashed.to_str().unwrap().to_owned();
    let store = ["--store", crashed_arg.as_str()];
    check_replay_everywhere(&store, &[&asked, &asleep]);
    let listed = operator_reads(&store, &[&asked, &asleep]);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["statusMessage"] == "seen in the WAL only"),
        "{listed}"
    );
    assert_unchanged(&crashed, &before, "the checks after a crash");
}

/// A store older than this build reads as it is (version 6: no
/// `tool_version` column) is refused by the read-only commands, naming
/// both versions and `migrate`, and left as it was; a missing file is not
/// created.
#[test]
fn a_store_too_old_to_read_is_refused_naming_migrate() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("tasks.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0))
        .unwrap();
    for sql in &SQLITE_V8[..6] {
        conn.execute_batch(sql).unwrap();
    }
    conn.execute_batch("PRAGMA user_version = 6").unwrap();
    drop(conn);
    let before = files(&db);
    let store_arg = db.to_str().unwrap();
    for args in [vec!["list"], vec!["show", "t1"], vec!["journal", "t1"]] {
        let mut all = vec!["--store", store_arg];
        all.extend_from_slice(&args);
        let out = run(tasks_bin(), &all, &[]);
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {out:?}");
        assert!(
            stderr.contains("schema version 6")
                && stderr.contains(&format!("schema version {SQLITE_LATEST}"))
                && stderr.contains("migrate"),
            "{stderr}"
        );
    }
    let out = run(
        digest_bin(),
        &["--check-replay", "--store", store_arg],
        &[("MCP_TASKS_DIGEST_VERSION", "1")],
    );
    assert!(!out.status.success(), "{out:?}");
    assert!(text(&out.stderr).contains("migrate"), "{out:?}");
    assert_unchanged(&db, &before, "the refusals");
    assert_eq!(header_version(&db), 6);

    let missing = dir.path().join("missing.db");
    let out = run(
        tasks_bin(),
        &["--store", missing.to_str().unwrap(), "list"],
        &[],
    );
    assert!(!out.status.success(), "{out:?}");
    assert!(text(&out.stderr).contains("no SQLite store"), "{out:?}");
    assert!(!missing.exists(), "a read creates no store");
}

// ---------------------------------------------------------------------------
// Postgres

/// A client of the test's own.
async fn pg(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("the test connects");
    tokio::spawn(connection);
    client
}

/// What a check must not change in `schema`: its objects (name, kind and
/// definition of each relation, index and extended statistics), its
/// recorded versions, and every table's rows with their row versions
/// (`xmin`, which any update moves).
async fn pg_state(c: &tokio_postgres::Client, schema: &str) -> Vec<String> {
    let mut state = Vec::new();
    let objects = c
        .query(
            "SELECT c.relname::text || ' ' || c.relkind::text || ' ' || \
                    coalesce(pg_get_indexdef(c.oid), '') \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 \
             UNION ALL \
             SELECT 'statistics ' || s.stxname::text FROM pg_statistic_ext s \
             JOIN pg_namespace n ON n.oid = s.stxnamespace WHERE n.nspname = $1 \
             ORDER BY 1",
            &[&schema],
        )
        .await
        .unwrap();
    state.extend(objects.iter().map(|r| r.get::<_, String>(0)));
    let versions = c
        .query(
            &format!(
                "SELECT version || ' ' || name FROM {schema}.mcp_tasks_schema_version \
                 ORDER BY version"
            ),
            &[],
        )
        .await
        .unwrap();
    state.extend(versions.iter().map(|r| r.get::<_, String>(0)));
    for table in TABLES {
        let rows = c
            .query(
                &format!(
                    "SELECT t.xmin::text || ' ' || t::text FROM {schema}.{table} t ORDER BY 1"
                ),
                &[],
            )
            .await
            .unwrap();
        state.extend(
            rows.iter()
                .map(|r| format!("{table}: {}", r.get::<_, String>(0))),
        );
    }
    state
}

async fn pg_version(c: &tokio_postgres::Client, schema: &str) -> i32 {
    c.query_one(
        &format!("SELECT max(version) FROM {schema}.mcp_tasks_schema_version"),
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

/// On a Postgres schema of version 4 (the schema before `tasks_due`) with
/// two tasks parked by a server: `--check-replay` of every example server
/// and `tasks list`/`show`/`journal` change no object of the schema (no
/// DDL), no row, and not its recorded version. The CLI's writes refuse it
/// naming `migrate`; `tasks migrate` moves it to version 5.
#[tokio::test]
async fn postgres_checks_leave_an_older_schema_as_they_found_it() {
    let Some(url) = common::postgres_or_skip("postgres_checks_leave_an_older_schema").await else {
        return;
    };
    let current = mcp_tasks_runtime::store::testing::PostgresSchema::new(&url, "read_only_current");
    let (asked, asleep) = park_two(&StoreArgs::Postgres {
        url: current.url(),
        schema: current.name().to_owned(),
    })
    .await;
    let old = mcp_tasks_runtime::store::testing::PostgresSchema::new(&url, "read_only_old");
    let (o, c) = (old.name(), current.name());
    let client = pg(&old.url()).await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {o}; SET search_path TO {o};
             CREATE TABLE mcp_tasks_schema_version (
                 version    integer     NOT NULL PRIMARY KEY,
                 name       text        NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now()
             );"
        ))
        .await
        .unwrap();
    for (i, (name, sql)) in POSTGRES_V4.iter().enumerate() {
        client
            .batch_execute(sql)
            .await
            .expect("a shipped migration applies");
        let version = i32::try_from(i + 1).unwrap();
        client
            .execute(
                "INSERT INTO mcp_tasks_schema_version (version, name) VALUES ($1, $2)",
                &[&version, name],
            )
            .await
            .unwrap();
    }
    for table in TABLES {
        client
            .batch_execute(&format!(
                "INSERT INTO {o}.{table} SELECT * FROM {c}.{table}"
            ))
            .await
            .expect("the rows fit the older schema");
    }
    drop(current);
    assert_eq!(pg_version(&client, o).await, 4);
    let before = pg_state(&client, o).await;
    assert!(
        before.iter().any(|s| s.starts_with("tasks_working ")),
        "the older schema's index: {before:?}"
    );

    let pg_url = old.url();
    let store = ["--store", pg_url.as_str(), "--pg-schema", o];
    check_replay_everywhere(&store, &[&asked, &asleep]);
    operator_reads(&store, &[&asked, &asleep]);
    assert_eq!(pg_state(&client, o).await, before, "no DDL, no row written");
    assert_eq!(
        pg_version(&client, o).await,
        4,
        "still the older build's schema"
    );

    let mut cancel = store.to_vec();
    cancel.extend_from_slice(&["cancel", &asked]);
    let out = run(tasks_bin(), &cancel, &[]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        stderr.contains("version 4")
            && stderr.contains(&format!("({POSTGRES_LATEST})"))
            && stderr.contains(&format!("--pg-schema {o} migrate")),
        "{stderr}"
    );
    assert_eq!(pg_state(&client, o).await, before, "the refused write");

    let mut migrate = store.to_vec();
    migrate.push("migrate");
    let out = run(tasks_bin(), &migrate, &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        text(&out.stdout).trim(),
        format!("schema version 4 -> {POSTGRES_LATEST}")
    );
    assert_eq!(pg_version(&client, o).await, POSTGRES_LATEST);
    let out = run(tasks_bin(), &cancel, &[]);
    assert!(out.status.success(), "{out:?}");
}
