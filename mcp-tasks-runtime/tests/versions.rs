//! Deploying new code with tasks in flight: the tool version recorded with
//! each task, `patched` markers, and tasks whose version this code no
//! longer (or does not yet) serve.
//!
//! Three versions of one tool, `report`, live in this file under their own
//! fn names; each engine gets a registry built by hand with one of them, as
//! a server of that version would. A deploy is one engine going away and
//! the next starting over the same store.

mod stores;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use mcp_tasks_runtime::{
    Elicit, Engine, ToolError, ask_user, checkpoint, durable,
    engine::{Call, CallOutcome},
    question::InputCapabilities,
    store::{MemoryStore, StepKind, Store, TaskRecord, TaskStatus},
    task_tool,
    tool::{Registry, ToolDescriptor},
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use stores::{text, until};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::{Layer, layer::Context, prelude::*};

#[derive(Debug, Deserialize, JsonSchema, Elicit)]
struct Approval {
    /// Send it?
    send: bool,
}

/// Version 1: asks, then sends plain text.
#[task_tool(name = "report")]
async fn report_v1(team: String) -> Result<String, ToolError> {
    let approval: Approval = ask_user("Send the report?").key("send").await?;
    let sent = checkpoint("send", || async { Ok(format!("text to {team}")) }).await?;
    Ok(format!("v1 path: {sent} (send={})", approval.send))
}

/// Version 2: new tasks send HTML; tasks of version 1 keep the old path.
#[task_tool(name = "report", version = 2)]
async fn report_v2(team: String) -> Result<String, ToolError> {
    let html = durable::patched("html").await;
    let approval: Approval = ask_user("Send the report?").key("send").await?;
    if html {
        let sent = checkpoint("send-html", || async { Ok(format!("html to {team}")) }).await?;
        Ok(format!("new path: {sent} (send={})", approval.send))
    } else {
        let sent = checkpoint("send", || async { Ok(format!("text to {team}")) }).await?;
        Ok(format!("old path: {sent} (send={})", approval.send))
    }
}

/// Version 3: the plain-text path is gone; it replays versions 2 and 3.
#[task_tool(name = "report", version = 3, replays_from = 2)]
async fn report_v3(team: String) -> Result<String, ToolError> {
    durable::patched("html").await;
    let approval: Approval = ask_user("Send the report?").key("send").await?;
    let sent = checkpoint("send-html", || async { Ok(format!("html to {team}")) }).await?;
    Ok(format!("v3: {sent} (send={})", approval.send))
}

/// A patch inside a checkpoint's closure, and outside any task.
#[task_tool]
async fn nested_patch() -> Result<String, ToolError> {
    let inner = checkpoint("inner", || async { Ok(durable::patched("inside").await) }).await?;
    Ok(format!("inside a checkpoint: {inner}"))
}

async fn engine(store: &Arc<dyn Store>, tool: &ToolDescriptor) -> Engine {
    Engine::builder_arc(store.clone())
        .registry(Registry::new().with(tool).unwrap())
        .scan_interval(Duration::from_millis(20))
        .lease(Duration::from_millis(300))
        .start()
        .await
        .expect("the engine starts")
}

fn forms() -> InputCapabilities {
    let mut caps = InputCapabilities::NONE;
    caps.elicitation = true;
    caps
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

async fn create(engine: &Engine, team: &str) -> String {
    let call = Call::new("report", obj(json!({"team": team}))).capabilities(forms());
    let CallOutcome::Task(r) = engine.call(call).await.expect("create the task") else {
        panic!("a task-capable call with no inline window starts a task");
    };
    r.id.clone()
}

async fn parked(engine: &Engine, id: &str) -> TaskRecord {
    until(engine, id, |r| r.status == TaskStatus::InputRequired).await
}

async fn answer(engine: &Engine, id: &str) {
    let yes = obj(json!({"send": {"action": "accept", "content": {"send": true}}}));
    engine.update(id, yes, None).await.expect("the answer");
}

async fn finished(engine: &Engine, id: &str) -> TaskRecord {
    until(engine, id, |r| r.status.is_terminal()).await
}

/// The journal as (kind, name) pairs, by position.
async fn steps(store: &Arc<dyn Store>, id: &str) -> Vec<(u32, StepKind, String)> {
    store
        .journal(id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.position, e.kind, e.name))
        .collect()
}

fn memory() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new())
}

#[tokio::test]
async fn each_task_records_the_version_of_the_tool_that_created_it() {
    let store = memory();
    let v1 = engine(&store, report_v1_tool()).await;
    let old = create(&v1, "ops").await;
    assert_eq!(parked(&v1, &old).await.tool_version, 1);
    drop(v1);

    let v2 = engine(&store, report_v2_tool()).await;
    let new = create(&v2, "ops").await;
    assert_eq!(parked(&v2, &new).await.tool_version, 2);
    assert_eq!(v2.get(&old, None).await.unwrap().tool_version, 1, "kept");
    assert_eq!(report_v3_tool().version(), 3);
    assert_eq!(report_v3_tool().replays_from(), 2);
    assert_eq!(
        (report_v1_tool().version(), report_v1_tool().replays_from()),
        (1, 1),
        "the defaults"
    );
}

/// Live: the marker is journaled at the next position, and the fn takes
/// the new path; the question comes after it.
#[tokio::test]
async fn patched_live_journals_its_marker_and_takes_the_new_path() {
    let store = memory();
    let v2 = engine(&store, report_v2_tool()).await;
    let id = create(&v2, "ops").await;
    parked(&v2, &id).await;
    assert_eq!(
        steps(&store, &id).await,
        [(0, StepKind::Patch, "html".to_owned())]
    );
    assert_eq!(store.journal(&id).await.unwrap()[0].value, json!(true));
    answer(&v2, &id).await;
    assert_eq!(
        text(&finished(&v2, &id).await),
        "new path: html to ops (send=true)"
    );
    assert_eq!(
        steps(&store, &id).await,
        [
            (0, StepKind::Patch, "html".to_owned()),
            (1, StepKind::Ask, "Approval".to_owned()),
            (2, StepKind::Checkpoint, "send-html".to_owned()),
        ]
    );
}

/// Replay with the marker: a task of version 2 that parked, resumed by a
/// fresh engine of the same version, replays `true` from its journal.
#[tokio::test]
async fn patched_replays_its_marker_as_true() {
    let store = memory();
    let first = engine(&store, report_v2_tool()).await;
    let id = create(&first, "ops").await;
    parked(&first, &id).await;
    drop(first);

    let second = engine(&store, report_v2_tool()).await;
    answer(&second, &id).await;
    assert_eq!(
        text(&finished(&second, &id).await),
        "new path: html to ops (send=true)"
    );
    let journal = steps(&store, &id).await;
    let markers = journal
        .iter()
        .filter(|(_, kind, _)| *kind == StepKind::Patch)
        .count();
    assert_eq!(
        markers, 1,
        "the replay journals no second marker: {journal:?}"
    );
}

/// Replay of an old journal: a task that version 1 parked resumes on
/// version 2 down the old path, and no marker is journaled; a task created
/// on version 2 takes the new one.
#[tokio::test]
async fn an_old_journal_replays_the_old_path_and_new_tasks_take_the_new_one() {
    let store = memory();
    let v1 = engine(&store, report_v1_tool()).await;
    let old = create(&v1, "ops").await;
    parked(&v1, &old).await;
    drop(v1);

    let v2 = engine(&store, report_v2_tool()).await;
    let new = create(&v2, "dev").await;
    parked(&v2, &new).await;
    answer(&v2, &old).await;
    answer(&v2, &new).await;
    assert_eq!(
        text(&finished(&v2, &old).await),
        "old path: text to ops (send=true)"
    );
    assert_eq!(
        steps(&store, &old).await,
        [
            (0, StepKind::Ask, "Approval".to_owned()),
            (1, StepKind::Checkpoint, "send".to_owned()),
        ],
        "no marker in an old task's journal"
    );
    assert_eq!(
        text(&finished(&v2, &new).await),
        "new path: html to dev (send=true)"
    );
}

/// Inside a checkpoint's closure `patched` is `true` and journals nothing
/// (the checkpoint's value covers it); outside any task it is `true`.
#[tokio::test]
async fn patched_inside_a_checkpoint_and_outside_a_task_is_true() {
    assert!(durable::patched("anything").await);
    let store = memory();
    let e = engine(&store, nested_patch_tool()).await;
    let call = Call::new("nested_patch", Map::new());
    let CallOutcome::Task(r) = e.call(call).await.unwrap() else {
        panic!("a task");
    };
    let done = finished(&e, &r.id).await;
    assert_eq!(text(&done), "inside a checkpoint: true");
    assert_eq!(
        steps(&store, &r.id).await,
        [(0, StepKind::Checkpoint, "inner".to_owned())]
    );
}

/// A server that replays from version 2 fails, as it starts, the unfinished
/// tasks of version 1 (parked ones included), with a reason naming the
/// versions; tasks of version 2 carry on.
#[tokio::test]
async fn tasks_older_than_replays_from_fail_at_startup_naming_the_versions() {
    let store = memory();
    let v1 = engine(&store, report_v1_tool()).await;
    let old = create(&v1, "ops").await;
    parked(&v1, &old).await;
    drop(v1);
    let v2 = engine(&store, report_v2_tool()).await;
    let kept = create(&v2, "dev").await;
    parked(&v2, &kept).await;
    drop(v2);

    let v3 = engine(&store, report_v3_tool()).await;
    // Failed before `start` returned: no run was needed.
    let failed = v3.get(&old, None).await.unwrap();
    assert_eq!(failed.status, TaskStatus::Failed, "{failed:#?}");
    let message = failed.status_message.clone().unwrap();
    assert!(
        message.starts_with(
            "task recorded by version 1 of `report`; this server replays versions 2–3"
        ),
        "{message}"
    );
    let error = failed.error.clone().unwrap();
    assert_eq!(
        error.data,
        Some(json!({"tool": "report", "recordedVersion": 1, "replaysFrom": 2, "version": 3}))
    );
    assert_eq!(steps(&store, &old).await.len(), 0, "nothing was replayed");

    answer(&v3, &kept).await;
    assert_eq!(
        text(&finished(&v3, &kept).await),
        "v3: html to dev (send=true)"
    );
}

/// A rolling deploy: an old instance (version 1) still creates tasks after
/// an instance that replays from version 2 started. Such a task is failed,
/// with the same reason, when the new instance would claim it; its fn never
/// runs there.
#[tokio::test]
async fn a_task_of_a_version_too_old_that_comes_later_is_failed_when_claimed() {
    let store = memory();
    let v3 = engine(&store, report_v3_tool()).await;
    let v1 = engine(&store, report_v1_tool()).await;
    let late = create(&v1, "ops").await;
    parked(&v1, &late).await;
    drop(v1);
    assert_eq!(
        v3.get(&late, None).await.unwrap().status,
        TaskStatus::InputRequired,
        "parked tasks are not failed after startup: nothing runs them"
    );
    answer(&v3, &late).await;
    let failed = finished(&v3, &late).await;
    assert_eq!(failed.status, TaskStatus::Failed, "{failed:#?}");
    let message = failed.status_message.unwrap();
    assert!(
        message.starts_with(
            "task recorded by version 1 of `report`; this server replays versions 2–3"
        ),
        "{message}"
    );
    assert_eq!(
        steps(&store, &late).await,
        [(0, StepKind::Ask, "Approval".to_owned())],
        "only the answer was journaled: nothing replayed"
    );
}

/// Counts `WARN` events whose message contains a phrase.
#[derive(Clone)]
struct Warnings {
    phrase: &'static str,
    seen: Arc<AtomicUsize>,
}

impl<S: Subscriber> Layer<S> for Warnings {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if *event.metadata().level() != Level::WARN {
            return;
        }
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut m = Message(String::new());
        event.record(&mut m);
        if m.0.contains(self.phrase) {
            self.seen.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A rollback: tasks recorded by version 2 are runnable on a server of
/// version 1. It gives up each one it claims without running it, leaves it
/// `working` for an instance that serves version 2, claims it no more, and
/// logs one WARN for the tool and version; the next server of version 2
/// runs them on the new path.
#[tokio::test]
async fn tasks_of_a_newer_version_are_left_for_an_instance_that_serves_it() {
    let warnings = Warnings {
        phrase: "tasks recorded by version 2 of `report` are left for an instance that serves it; this one serves version 1",
        seen: Arc::default(),
    };
    let _log =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(warnings.clone()));
    let store = memory();
    let v2 = engine(&store, report_v2_tool()).await;
    let a = create(&v2, "a").await;
    let b = create(&v2, "b").await;
    parked(&v2, &a).await;
    parked(&v2, &b).await;
    drop(v2);

    let v1 = engine(&store, report_v1_tool()).await;
    let before = steps(&store, &a).await;
    for id in [&a, &b] {
        answer(&v1, id).await;
        // Claimed once (the fence moved on) and given up at once.
        let left = until(&v1, id, |r| r.fence == 2 && r.lease.is_none()).await;
        assert_eq!(left.status, TaskStatus::Working, "{left:#?}");
    }
    // Its scans find both claimable and leave them be: another full scan
    // (the engine scans every 20 ms) claims neither again.
    for _ in 0..3 {
        let now = store.claimable(i64::MAX, 10).await.unwrap();
        assert_eq!(now.len(), 2, "still claimable by another instance");
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    for id in [&a, &b] {
        let r = v1.get(id, None).await.unwrap();
        assert_eq!((r.status, r.fence), (TaskStatus::Working, 2), "{r:#?}");
    }
    assert_eq!(
        steps(&store, &a).await.len(),
        before.len() + 1,
        "only the answer"
    );
    assert_eq!(
        warnings.seen.load(Ordering::SeqCst),
        1,
        "one WARN per tool and version"
    );
    drop(v1);

    let v2 = engine(&store, report_v2_tool()).await;
    assert_eq!(
        text(&finished(&v2, &a).await),
        "new path: html to a (send=true)"
    );
    assert_eq!(
        text(&finished(&v2, &b).await),
        "new path: html to b (send=true)"
    );
}

/// Descriptors built by hand are checked as the macro checks its options.
#[test]
fn a_registry_refuses_versions_out_of_range() {
    let zero = report_v1_tool().clone().with_version(0);
    let err = Registry::new().with(&zero).unwrap_err().to_string();
    assert!(err.contains("a tool's version starts at 1"), "{err}");
    let above = report_v1_tool()
        .clone()
        .with_version(2)
        .with_replays_from(3);
    let err = Registry::new().with(&above).unwrap_err().to_string();
    assert!(
        err.contains("it replays from version 3 but is version 2"),
        "{err}"
    );
    let from_zero = report_v1_tool().clone().with_replays_from(0);
    assert!(Registry::new().with(&from_zero).is_err());
}
