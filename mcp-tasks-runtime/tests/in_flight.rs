//! Questions asked in flight (`durable::ask_in_flight`): the task shows
//! `input_required` while its run goes on, the answer reaches that run (from
//! any instance sharing the store), and a question dropped unanswered
//! leaves `inputRequests`.
//!
//! Each scenario runs on a SQLite file and on Postgres (`MCP_TASKS_POSTGRES_URL`,
//! or `postgres://postgres@127.0.0.1:5432/postgres`; skipped with a note on
//! stderr when no server answers, unless `CI` is set); the one across two
//! instances on Postgres, whose feed carries the answer between them.

mod stores;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use mcp_tasks_runtime::{
    Engine, ToolError, durable,
    engine::{Call, CallOutcome},
    question::{AskError, FormRequest, InputCapabilities, InputRequest},
    store::{TaskRecord, TaskStatus},
    task_tool,
    tool::Registry,
};
use serde_json::{Map, Value, json};
use stores::{Backend, forms, on_schema, postgres_schema, sqlite, text, until};

/// How many runs each task (by its `tag`) started.
fn runs() -> &'static Mutex<HashMap<String, usize>> {
    static RUNS: std::sync::OnceLock<Mutex<HashMap<String, usize>>> = std::sync::OnceLock::new();
    RUNS.get_or_init(Default::default)
}

fn count_run(tag: &str) {
    *runs().lock().unwrap().entry(tag.to_owned()).or_default() += 1;
}

fn runs_of(tag: &str) -> usize {
    runs().lock().unwrap().get(tag).copied().unwrap_or(0)
}

fn region_form() -> InputRequest {
    let schema = json!({
        "type": "object",
        "properties": {"region": {"type": "string"}},
        "required": ["region"],
    });
    InputRequest::Form(FormRequest {
        message: "Which region?".into(),
        requested_schema: schema.as_object().cloned().unwrap_or_default(),
    })
}

/// Asks for a region in flight and answers with it.
#[task_tool]
async fn relay(tag: String) -> Result<String, ToolError> {
    count_run(&tag);
    match durable::ask_in_flight(region_form()).await {
        Ok(answer) => Ok(format!("region {}", answer["content"]["region"])),
        Err(AskError::Unsupported(what)) => Ok(format!("unsupported: {what}")),
        Err(e) => Err(ToolError::new(e.to_string())),
    }
}

/// Asks in flight, stops waiting when the test says `drop`, then ends when
/// it says `end`: a question dropped unanswered while the run goes on.
#[task_tool]
async fn relay_dropped(tag: String) -> Result<String, ToolError> {
    count_run(&tag);
    ask_until_dropped(&tag).await?;
    signal(&tag, "end").notified().await;
    Ok("gave up waiting".to_owned())
}

async fn ask_until_dropped(tag: &str) -> Result<(), ToolError> {
    let asked = std::pin::pin!(durable::ask_in_flight(region_form()));
    let dropped = std::pin::pin!(signal(tag, "drop").notified_owned());
    match futures::future::select(asked, dropped).await {
        futures::future::Either::Left(_) => Err(ToolError::new("answered, though never answered")),
        futures::future::Either::Right(_) => Ok(()),
    }
}

/// The test's signal `what` to the task tagged `tag`.
fn signal(tag: &str, what: &str) -> Arc<tokio::sync::Notify> {
    static SIGNALS: std::sync::OnceLock<Mutex<HashMap<String, Arc<tokio::sync::Notify>>>> =
        std::sync::OnceLock::new();
    SIGNALS
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry(format!("{tag}/{what}"))
        .or_default()
        .clone()
}

// ---------------------------------------------------------------------------
// Stores.

/// One Postgres schema, and as many stores (instances) on it as asked.
async fn postgres(instances: usize) -> Option<Vec<Backend>> {
    let schema = postgres_schema("mcp_tasks_in_flight");
    let mut backends = Vec::new();
    for _ in 0..instances {
        backends.push(on_schema(&schema).await?);
    }
    Some(backends)
}

async fn engine(backend: &Backend, instance: &str) -> Engine {
    engine_with_lease(backend, instance, Duration::from_secs(30)).await
}

async fn engine_with_lease(backend: &Backend, instance: &str, lease: Duration) -> Engine {
    let registry = Registry::new()
        .with(relay_tool())
        .and_then(|r| r.with(relay_dropped_tool()))
        .expect("a registry");
    Engine::builder_arc(backend.store.clone())
        .registry(registry)
        .instance(instance)
        .lease(lease)
        .scan_interval(Duration::from_millis(50))
        .start()
        .await
        .expect("start the engine")
}

// ---------------------------------------------------------------------------
// Helpers.

fn tag(name: &str) -> String {
    format!("{name}-{}", std::process::id()) + &format!("-{:?}", std::time::Instant::now())
}

async fn start(engine: &Engine, tool: &str, tag: &str, caps: InputCapabilities) -> String {
    let mut args = Map::new();
    args.insert("tag".into(), json!(tag));
    let call = Call::new(tool, args).capabilities(caps);
    let CallOutcome::Task(r) = engine.call(call).await.expect("create the task") else {
        panic!("a task-capable call with no inline window starts a task");
    };
    r.id.clone()
}

fn open_keys(r: &TaskRecord) -> Vec<&str> {
    r.pending
        .iter()
        .filter(|p| p.is_open())
        .map(|p| p.key.as_str())
        .collect()
}

fn answer(key: &str, region: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(
        key.into(),
        json!({"action": "accept", "content": {"region": region}}),
    );
    m
}

// ---------------------------------------------------------------------------
// Scenarios.

/// The task shows the question while its run goes on (it holds its lease),
/// the answer reaches that very run (one run in all: a parked question would
/// have dropped the fn and replayed it), and the question leaves the task.
async fn answered_in_the_same_run(backend: Backend) {
    let engine = engine(&backend, "a").await;
    let tag = tag("answered");
    let id = start(&engine, "relay", &tag, forms()).await;
    let asked = until(&engine, &id, |r| r.status == TaskStatus::InputRequired).await;
    assert_eq!(open_keys(&asked), ["ask-f1.1"], "{asked:#?}");
    assert!(
        asked.lease.as_ref().is_some_and(|l| l.owner == "a"),
        "the run keeps its lease while the question waits: {asked:#?}"
    );
    // An answer that does not fit the form is refused, and the question stays.
    let mut bad = Map::new();
    bad.insert(
        "ask-f1.1".into(),
        json!({"action": "accept", "content": {}}),
    );
    engine.update(&id, bad, None).await.expect("update");
    let still = engine.get(&id, None).await.expect("the task");
    assert_eq!(still.status, TaskStatus::InputRequired, "{still:#?}");
    engine
        .update(&id, answer("ask-f1.1", "eu-west"), None)
        .await
        .expect("update");
    let done = until(&engine, &id, |r| r.status.is_terminal()).await;
    assert_eq!(text(&done), "region \"eu-west\"");
    assert!(done.pending.is_empty(), "{done:#?}");
    assert_eq!(runs_of(&tag), 1, "the run went on: it was never replayed");
}

/// A client that cannot answer forms gets no question: the error comes back
/// at once, and the task never shows `input_required`.
async fn refused_without_the_capability(backend: Backend) {
    let engine = engine(&backend, "a").await;
    let tag = tag("unsupported");
    let id = start(&engine, "relay", &tag, InputCapabilities::NONE).await;
    let done = until(&engine, &id, |r| r.status.is_terminal()).await;
    assert_eq!(text(&done), "unsupported: elicitation");
}

/// A question dropped unanswered leaves `inputRequests`, the task is
/// `working` again, and an answer to it afterwards is ignored.
async fn dropped_unanswered(backend: Backend) {
    let engine = engine(&backend, "a").await;
    let tag = tag("dropped");
    let id = start(&engine, "relay_dropped", &tag, forms()).await;
    let asked = until(&engine, &id, |r| r.status == TaskStatus::InputRequired).await;
    assert_eq!(open_keys(&asked), ["ask-f1.1"]);
    signal(&tag, "drop").notify_one();
    let working = until(&engine, &id, |r| r.status == TaskStatus::Working).await;
    assert!(working.pending.is_empty(), "{working:#?}");
    assert_eq!(working.lease.as_ref().map(|l| l.owner.as_str()), Some("a"));
    signal(&tag, "end").notify_one();
    let done = until(&engine, &id, |r| r.status.is_terminal()).await;
    assert_eq!(text(&done), "gave up waiting");
    engine
        .update(&id, answer("ask-f1.1", "late"), None)
        .await
        .expect("a late answer is ignored, not refused");
    assert!(engine.get(&id, None).await.unwrap().pending.is_empty());
}

/// Two instances on one Postgres schema: the question asked by a run on `a`
/// is answered through `b`; the answer reaches the run on `a` through the
/// store's feed, and `b` starts no run of its own.
async fn answered_through_another_instance(a: Backend, b: Backend) {
    let on_a = engine(&a, "a").await;
    let on_b = engine(&b, "b").await;
    let tag = tag("across");
    let id = start(&on_a, "relay", &tag, forms()).await;
    let asked = until(&on_b, &id, |r| r.status == TaskStatus::InputRequired).await;
    assert_eq!(open_keys(&asked), ["ask-f1.1"]);
    on_b.update(&id, answer("ask-f1.1", "ap-south"), None)
        .await
        .expect("update through b");
    let done = until(&on_b, &id, |r| r.status.is_terminal()).await;
    assert_eq!(text(&done), "region \"ap-south\"");
    assert_eq!(runs_of(&tag), 1, "one run, on a");
    assert_eq!(done.fence, 1, "claimed once: b never took the task");
}

macro_rules! on_stores {
    ($($name:ident),* $(,)?) => {
        mod sqlite_store {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::sqlite().await.expect("a SQLite store")).await;
                }
            )*
        }
        mod postgres_store {
            $(
                #[tokio::test]
                async fn $name() {
                    if let Some(mut backends) = super::postgres(1).await {
                        super::$name(backends.remove(0)).await;
                    }
                }
            )*
        }
    };
}

on_stores!(
    answered_in_the_same_run,
    refused_without_the_capability,
    dropped_unanswered
);

#[tokio::test]
async fn postgres_answered_through_another_instance() {
    if let Some(mut backends) = postgres(2).await {
        let b = backends.pop().unwrap();
        let a = backends.pop().unwrap();
        answered_through_another_instance(a, b).await;
    }
}

/// The instance whose run asked dies mid-question (its runtime is dropped:
/// no run, no renewal, no write of its own any more). Once its lease has
/// lapsed, another instance takes the question away, claims the task and
/// runs it again from its journal: the new run asks anew, under a new key.
#[test]
fn postgres_withdrawn_once_the_asking_run_lapses() {
    let schema = postgres_schema("mcp_tasks_in_flight");
    let tag = tag("lapse");
    let lease = Duration::from_millis(600);
    let dying = tokio::runtime::Runtime::new().expect("a runtime for instance a");
    let id = dying.block_on(async {
        let a = on_schema(&schema).await?;
        let on_a = engine_with_lease(&a, "a", lease).await;
        let id = start(&on_a, "relay", &tag, forms()).await;
        let asked = until(&on_a, &id, |r| r.status == TaskStatus::InputRequired).await;
        assert_eq!(open_keys(&asked), ["ask-f1.1"]);
        // Kept alive until the runtime goes, as a killed process's are not.
        std::mem::forget(on_a);
        drop(a);
        Some(id)
    });
    let Some(id) = id else { return };
    drop(dying);
    let main = tokio::runtime::Runtime::new().expect("a runtime for instance b");
    main.block_on(async {
        let Some(b) = on_schema(&schema).await else {
            return;
        };
        let on_b = engine_with_lease(&b, "b", lease).await;
        let again = until(&on_b, &id, |r| open_keys(r) == ["ask-f2.1"]).await;
        assert_eq!(again.lease.as_ref().map(|l| l.owner.as_str()), Some("b"));
        on_b.update(&id, answer("ask-f2.1", "us-east"), None)
            .await
            .expect("update");
        let done = until(&on_b, &id, |r| r.status.is_terminal()).await;
        assert_eq!(text(&done), "region \"us-east\"");
        assert_eq!(runs_of(&tag), 2, "run on a, then again on b");
    });
}
