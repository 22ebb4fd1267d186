//! The replay check before a deploy (`replay::check`), a task's journal as
//! exported JSON, and the testing kit's replay of an exported journal.
//!
//! `digest` comes in versions that live in this file under their own fn
//! names: version 1 fetches, then computes, then waits (a question, or a
//! durable sleep); version 2 computes first, and forgets `patched`; the
//! fixed version 2 puts the new order behind `patched`.

use std::{cell::Cell, time::Duration};

use mcp_tasks_runtime::{
    Engine, ToolError, checkpoint, confirm, durable,
    engine::{Call, CallOutcome},
    question::InputCapabilities,
    replay::{self, JournalExport, Step, Verdict},
    store::{SqliteStore, StepKind, Store, TaskRecord, TaskStatus},
    task_tool,
    testing::ToolTest,
    tool::Registry,
};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(20);

thread_local! {
    /// How many times a checkpoint's closure ran in this test (each test
    /// runs its engines on its own thread: a current-thread runtime).
    static CLOSURES: Cell<usize> = const { Cell::new(0) };
}

fn closures() -> usize {
    CLOSURES.with(Cell::get)
}

async fn fetch() -> Result<u32, ToolError> {
    checkpoint("fetch", || async {
        CLOSURES.with(|c| c.set(c.get() + 1));
        Ok(7)
    })
    .await
}

async fn stats() -> Result<u32, ToolError> {
    checkpoint("stats", || async {
        CLOSURES.with(|c| c.set(c.get() + 1));
        Ok(3)
    })
    .await
}

/// Waits: a day's durable sleep, or a question.
async fn wait(asleep: bool) -> Result<bool, ToolError> {
    if asleep {
        durable::sleep(Duration::from_secs(24 * 3600)).await;
        Ok(true)
    } else {
        Ok(confirm("Send the digest?").await?)
    }
}

/// Version 1: fetch, stats, then wait.
#[task_tool(name = "digest")]
async fn digest_v1(asleep: bool) -> Result<String, ToolError> {
    let (f, s) = (fetch().await?, stats().await?);
    let go = wait(asleep).await?;
    Ok(format!("{f}/{s}/{go}"))
}

/// Version 2 as first written: stats before fetch, with no `patched`.
#[task_tool(name = "digest", version = 2)]
async fn digest_v2_unpatched(asleep: bool) -> Result<String, ToolError> {
    let s = stats().await?;
    let f = fetch().await?;
    let go = wait(asleep).await?;
    Ok(format!("{f}/{s}/{go}"))
}

/// Version 2 fixed: the new order behind `patched`.
#[task_tool(name = "digest", version = 2)]
async fn digest_v2(asleep: bool) -> Result<String, ToolError> {
    let (f, s) = if durable::patched("stats-first").await {
        let s = stats().await?;
        (fetch().await?, s)
    } else {
        (fetch().await?, stats().await?)
    };
    let go = wait(asleep).await?;
    Ok(format!("{f}/{s}/{go}"))
}

/// Version 3: replays only version 3.
#[task_tool(name = "digest", version = 3, replays_from = 3)]
async fn digest_v3(asleep: bool) -> Result<String, ToolError> {
    digest_v2(asleep).await
}

/// A version that returns before its steps (all of them dropped).
#[task_tool(name = "digest", version = 2)]
async fn digest_v2_empty(asleep: bool) -> Result<String, ToolError> {
    Ok(format!("nothing to do ({asleep})"))
}

/// Another tool, so that a store can hold a task of a tool a build lacks.
#[task_tool]
async fn other() -> Result<String, ToolError> {
    Ok(confirm("Go?").await?.to_string())
}

/// Starts a `digest` task on `engine`; returns its id.
async fn start(engine: &Engine, tool: &str, args: Value) -> String {
    let args = args.as_object().cloned().unwrap_or_default();
    match engine
        .call(Call::new(tool, args).capabilities(InputCapabilities::ALL))
        .await
        .unwrap()
    {
        CallOutcome::Task(task) => task.id.clone(),
        other => panic!("expected a task: {other:?}"),
    }
}

/// Waits until task `id` is parked on a question or asleep.
async fn settled(engine: &Engine, id: &str) -> TaskRecord {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let r = engine.get(id, None).await.unwrap();
        let asleep = r.wake_at_ms.is_some() && r.lease.is_none();
        if r.status == TaskStatus::InputRequired || asleep {
            return r;
        }
        assert!(!r.status.is_terminal(), "task {id} ended: {r:?}");
        assert!(tokio::time::Instant::now() < deadline, "task {id}: {r:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Every task of the store and its journal, to compare before and after.
async fn snapshot(store: &dyn Store) -> Vec<(TaskRecord, Vec<Value>)> {
    let mut out = Vec::new();
    for t in store.list_all(None, 1000).await.unwrap() {
        let journal = store.journal(&t.id).await.unwrap();
        let journal = journal.iter().map(|e| json!(e)).collect();
        out.push((t, journal));
    }
    out
}

fn checkpoint_step(name: &str) -> Step {
    Step {
        kind: StepKind::Checkpoint,
        name: name.into(),
    }
}

fn verdict_of<'a>(report: &'a replay::Report, id: &str) -> &'a Verdict {
    &report
        .tasks
        .iter()
        .find(|t| t.task_id == id)
        .unwrap_or_else(|| panic!("task {id} is not in the report: {report}"))
        .verdict
}

/// Tasks of version 1 parked in a real SQLite file (one on a question, one
/// in a durable sleep): version 2 with its steps reordered diverges at
/// position 0 for both, naming what was recorded and what the code asks
/// for; the fixed version 2 replays both. The check runs no checkpoint
/// closure and changes nothing in the store.
#[tokio::test]
async fn the_check_names_each_divergent_task_on_sqlite_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");

    let v1 = Engine::builder(SqliteStore::open(&path).await.unwrap())
        .registry(
            Registry::new()
                .with(digest_v1_tool())
                .unwrap()
                .with(other_tool())
                .unwrap(),
        )
        .start()
        .await
        .unwrap();
    let asked = start(&v1, "digest", json!({"asleep": false})).await;
    let asleep = start(&v1, "digest", json!({"asleep": true})).await;
    let foreign = start(&v1, "other", json!({})).await;
    assert_eq!(settled(&v1, &asked).await.status, TaskStatus::InputRequired);
    assert!(settled(&v1, &asleep).await.wake_at_ms.is_some());
    settled(&v1, &foreign).await;
    v1.shutdown().await.unwrap();
    drop(v1);

    let store = SqliteStore::open(&path).await.unwrap();
    let before = snapshot(&store).await;
    let ran = closures();

    let registry = Registry::new().with(digest_v2_unpatched_tool()).unwrap();
    let report = replay::check(&store, &registry).await.unwrap();
    assert!(!report.passed(), "{report}");
    for id in [&asked, &asleep] {
        assert_eq!(
            verdict_of(&report, id),
            &Verdict::Diverges {
                position: 0,
                recorded: checkpoint_step("fetch"),
                wanted: Some(checkpoint_step("stats")),
            },
            "{report}"
        );
    }
    assert_eq!(verdict_of(&report, &foreign), &Verdict::UnknownTool);
    let text = report.to_string();
    assert!(
        text.contains(&format!(
            "{asked} digest v1: diverges at position 0: recorded checkpoint `fetch`, the code \
             now asks for checkpoint `stats`"
        )),
        "{text}"
    );
    assert!(text.ends_with("FAILED"), "{text}");
    assert_eq!(
        serde_json::to_value(&report).unwrap()["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["taskId"] == asked.as_str())
            .unwrap(),
        &json!({
            "taskId": asked, "tool": "digest", "version": 1, "verdict": "diverges",
            "position": 0,
            "recorded": {"kind": "checkpoint", "name": "fetch"},
            "wanted": {"kind": "checkpoint", "name": "stats"},
        })
    );

    let registry = Registry::new()
        .with(digest_v2_tool())
        .unwrap()
        .with(other_tool())
        .unwrap();
    let report = replay::check(&store, &registry).await.unwrap();
    assert!(report.passed(), "{report}");
    for id in [&asked, &asleep, &foreign] {
        assert_eq!(verdict_of(&report, id), &Verdict::Replays, "{report}");
    }
    assert!(report.to_string().ends_with("passed"), "{report}");

    assert_eq!(
        closures(),
        ran,
        "no checkpoint closure ran during the checks"
    );
    assert_eq!(snapshot(&store).await, before, "the checks wrote nothing");
}

/// A version that no longer replays version 1 reports its tasks refused by
/// version (which passes: `replays_from` refuses them on purpose); a fn
/// that returns before a recorded step diverges at that step; an
/// `EngineBuilder` checks without starting (nothing claimed or changed).
#[tokio::test]
async fn refused_versions_and_early_returns_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    let v1 = Engine::builder(SqliteStore::open(&path).await.unwrap())
        .registry(Registry::new().with(digest_v1_tool()).unwrap())
        .start()
        .await
        .unwrap();
    let id = start(&v1, "digest", json!({"asleep": false})).await;
    settled(&v1, &id).await;
    v1.shutdown().await.unwrap();
    drop(v1);

    let store = SqliteStore::open(&path).await.unwrap();
    let before = snapshot(&store).await;
    let report = Engine::builder(SqliteStore::open(&path).await.unwrap())
        .registry(Registry::new().with(digest_v3_tool()).unwrap())
        .check_replay()
        .await
        .unwrap();
    assert_eq!(
        verdict_of(&report, &id),
        &Verdict::RefusedByVersion {
            recorded: 1,
            replays_from: 3,
            version: 3
        }
    );
    assert!(report.passed(), "{report}");

    let registry = Registry::new().with(digest_v2_empty_tool()).unwrap();
    let report = replay::check(&store, &registry).await.unwrap();
    assert_eq!(
        verdict_of(&report, &id),
        &Verdict::Diverges {
            position: 0,
            recorded: checkpoint_step("fetch"),
            wanted: None,
        }
    );
    assert!(
        report.to_string().contains(
            "diverges at position 0: recorded checkpoint `fetch`, the code now returns before it"
        ),
        "{report}"
    );
    assert_eq!(snapshot(&store).await, before, "the checks wrote nothing");
}

/// The testing kit: a history recorded by version 1, exported as JSON,
/// replays through version 1 and the fixed version 2, and diverges through
/// version 2 without `patched`, with the same verdict as the check.
#[tokio::test]
async fn an_exported_journal_replays_or_diverges_in_the_testing_kit() {
    let test = ToolTest::new(digest_v1_tool()).start().await;
    let task = test.call(json!({"asleep": false})).await;
    task.question().await;
    let export = task.export().await;

    // The export's JSON shape.
    let value = serde_json::to_value(&export).unwrap();
    assert_eq!(
        value,
        json!({
            "taskId": task.id(),
            "tool": "digest",
            "version": 1,
            "status": "input_required",
            "principal": null,
            "createdAtMs": export.created_at_ms,
            "arguments": {"asleep": false},
            "entries": [
                {"position": 0, "kind": "checkpoint", "name": "fetch", "value": 7},
                {"position": 1, "kind": "checkpoint", "name": "stats", "value": 3},
            ],
        })
    );
    let export: JournalExport = serde_json::from_value(value).unwrap();

    let ran = closures();
    assert_eq!(
        ToolTest::new(digest_v1_tool())
            .replay_journal(&export)
            .await,
        Verdict::Replays
    );
    assert_eq!(
        ToolTest::new(digest_v2_tool())
            .replay_journal(&export)
            .await,
        Verdict::Replays
    );
    assert_eq!(
        ToolTest::new(digest_v2_unpatched_tool())
            .replay_journal(&export)
            .await,
        Verdict::Diverges {
            position: 0,
            recorded: checkpoint_step("fetch"),
            wanted: Some(checkpoint_step("stats")),
        }
    );
    assert_eq!(
        ToolTest::new(other_tool()).replay_journal(&export).await,
        Verdict::UnknownTool
    );
    // A history cut after its first step (a run that died before the
    // second was journaled): the replay stops where `stats` would run live,
    // and runs nothing.
    let mut cut = export.clone();
    cut.entries.truncate(1);
    assert_eq!(
        ToolTest::new(digest_v1_tool()).replay_journal(&cut).await,
        Verdict::Replays
    );
    assert_eq!(closures(), ran, "replays run no closure");
}
