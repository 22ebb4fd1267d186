//! Engine behaviour through its Rust API (no MCP, no transport).
//!
//! Every scenario is an `async fn(Backend)` run twice, on the memory store and
//! on a SQLite file (see `engine_tests!` at the bottom). Each scenario builds
//! its engine from a hand-made registry of the tools it defines, and passes a
//! fresh `tag` to those tools: counters, flags and gates are keyed by it, so
//! the two runs of a scenario (which run in parallel) never share state.

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
    sync::{Arc, LazyLock, Mutex},
    time::{Duration, Instant},
};

use mcp_tasks_runtime::{
    Elicit, Engine, Error, ToolError, ask_user, checkpoint, durable,
    engine::{Call, CallMode, CallOutcome},
    question::{AskError, InputCapabilities, InputRequest},
    store::{MemoryStore, SqliteStore, StepKind, Store, TaskRecord, TaskStatus},
    task_tool,
    tool::Registry,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

/// The longest any single wait in these tests may take.
const LIMIT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------
// Shared state keyed by tag: counters, flags and gates.

static COUNTERS: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Default::default);
static FLAGS: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Default::default);
static GATES: LazyLock<Mutex<HashMap<String, watch::Sender<bool>>>> =
    LazyLock::new(Default::default);

/// A tag no other scenario run uses.
fn tag() -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("t{}", NEXT.fetch_add(1, Ordering::SeqCst))
}

/// Adds one to counter `key`; returns the new value.
fn bump(key: &str) -> usize {
    let mut c = COUNTERS.lock().unwrap();
    let n = c.entry(key.to_owned()).or_default();
    *n += 1;
    *n
}

/// Subtracts one from counter `key`.
fn drop_one(key: &str) {
    *COUNTERS.lock().unwrap().entry(key.to_owned()).or_default() -= 1;
}

fn count(key: &str) -> usize {
    COUNTERS.lock().unwrap().get(key).copied().unwrap_or(0)
}

/// Raises counter `key` to at least `n`.
fn raise(key: &str, n: usize) {
    let mut c = COUNTERS.lock().unwrap();
    let v = c.entry(key.to_owned()).or_default();
    *v = (*v).max(n);
}

fn flag(key: &str) -> bool {
    FLAGS.lock().unwrap().contains(key)
}

fn set_flag(key: &str) {
    FLAGS.lock().unwrap().insert(key.to_owned());
}

fn gate(key: &str) -> watch::Sender<bool> {
    GATES
        .lock()
        .unwrap()
        .entry(key.to_owned())
        .or_insert_with(|| watch::channel(false).0)
        .clone()
}

/// Waits until gate `key` is opened (at once if it already is).
async fn pass(key: &str) {
    let mut rx = gate(key).subscribe();
    rx.wait_for(|open| *open)
        .await
        .expect("gates are never dropped");
}

fn open(key: &str) {
    gate(key).send_replace(true);
}

// ---------------------------------------------------------------------------
// Backends.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Memory,
    Sqlite,
}

/// A store for one scenario run, and what it takes to open it again.
struct Backend {
    kind: Kind,
    store: Arc<dyn Store>,
    path: Option<PathBuf>,
    _dir: Option<tempfile::TempDir>,
}

impl Backend {
    async fn new(kind: Kind) -> Self {
        match kind {
            Kind::Memory => Self {
                kind,
                store: Arc::new(MemoryStore::new()),
                path: None,
                _dir: None,
            },
            Kind::Sqlite => {
                let dir = tempfile::tempdir().expect("a temporary directory");
                let path = dir.path().join("tasks.db");
                let store = SqliteStore::open(&path)
                    .await
                    .expect("open the SQLite store");
                Self {
                    kind,
                    store: Arc::new(store),
                    path: Some(path),
                    _dir: Some(dir),
                }
            }
        }
    }

    /// The same data seen by a new process: a second connection to the file
    /// (SQLite), or the same shared store (memory).
    async fn reopen(&self) -> Arc<dyn Store> {
        match &self.path {
            Some(path) => Arc::new(SqliteStore::open(path).await.expect("reopen the store")),
            None => self.store.clone(),
        }
    }

    async fn engine(&self, registry: Registry) -> Engine {
        Engine::builder_arc(self.store.clone())
            .registry(registry)
            .start()
            .await
            .expect("start the engine")
    }
}

// ---------------------------------------------------------------------------
// Helpers.

fn caps() -> InputCapabilities {
    let mut caps = InputCapabilities::NONE;
    caps.elicitation = true;
    caps
}

/// A question as it goes on the wire.
fn wire(request: &InputRequest) -> Value {
    serde_json::to_value(request).unwrap()
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

async fn create(engine: &Engine, tool: &str, args: Value) -> TaskRecord {
    let call = Call::new(tool, obj(args)).capabilities(caps());
    let CallOutcome::Task(r) = engine.call(call).await.expect("create the task") else {
        panic!("a task-capable call with no inline window starts a task");
    };
    assert_eq!(r.status, TaskStatus::Working);
    *r
}

/// Polls `get` until `pred` holds; panics with the last state after [`LIMIT`].
async fn until(engine: &Engine, id: &str, pred: impl Fn(&TaskRecord) -> bool) -> TaskRecord {
    let start = Instant::now();
    loop {
        let r = engine.get(id, None).await.expect("the task exists");
        if pred(&r) {
            return r;
        }
        assert!(
            start.elapsed() < LIMIT,
            "timed out waiting on task {id}; last state: {r:#?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Polls until counter `key` reaches `n`.
async fn until_count(key: &str, n: usize) {
    let start = Instant::now();
    while count(key) < n {
        assert!(
            start.elapsed() < LIMIT,
            "timed out waiting for counter {key} to reach {n} (it is {})",
            count(key)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn parked(engine: &Engine, id: &str) -> TaskRecord {
    until(engine, id, |r| r.status == TaskStatus::InputRequired).await
}

/// Waits for the task to end; panics if it does not within [`LIMIT`].
///
/// `wait` returns as soon as its subscription sees the terminal state; if it
/// only returns at its deadline, it missed the change, which is a bug even
/// when the state it then reads is terminal.
/// Polls the journal of task `id` until it holds an entry; panics after
/// [`LIMIT`].
async fn journaled(
    store: &Arc<dyn Store>,
    id: &str,
) -> Vec<mcp_tasks_runtime::store::JournalEntry> {
    let start = Instant::now();
    loop {
        let journal = store.journal(id).await.unwrap();
        if !journal.is_empty() {
            return journal;
        }
        assert!(start.elapsed() < LIMIT, "task {id} journaled nothing");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn finished(engine: &Engine, id: &str) -> TaskRecord {
    let start = Instant::now();
    let r = engine.wait(id, None, LIMIT).await.expect("the task exists");
    assert!(r.status.is_terminal(), "task did not finish: {r:#?}");
    assert!(
        start.elapsed() < LIMIT,
        "`wait` missed the change to {} and ran into its deadline",
        r.status.as_str()
    );
    r
}

async fn answer(engine: &Engine, id: &str, responses: Value) {
    engine
        .update(id, obj(responses), None)
        .await
        .expect("update the task");
}

fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

/// The text of a completed task's first content block.
fn text(r: &TaskRecord) -> &str {
    let result = r.result.as_ref().expect("a completed task has a result");
    result["content"][0]["text"]
        .as_str()
        .expect("a text content block")
}

fn is_error(r: &TaskRecord) -> bool {
    r.result.as_ref().expect("a result")["isError"] == json!(true)
}

fn error(r: &TaskRecord) -> Value {
    serde_json::to_value(r.error.as_ref().expect("a failed task has an error")).unwrap()
}

fn assert_completed(r: &TaskRecord, expected_text: &str) {
    assert_eq!(r.status, TaskStatus::Completed, "{r:#?}");
    assert!(!is_error(r), "{r:#?}");
    assert_eq!(text(r), expected_text);
    assert!(r.error.is_none());
    assert!(r.pending.is_empty());
}

fn assert_not_found<T: std::fmt::Debug>(result: mcp_tasks_runtime::Result<T>) {
    match result {
        Err(Error::TaskNotFound(_)) => {}
        other => panic!("expected TaskNotFound, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// Types asked of the user.

#[derive(Debug, Deserialize, JsonSchema, Elicit)]
struct Approval {
    approve: bool,
}

#[derive(Debug, Deserialize, JsonSchema, Elicit)]
struct Name {
    name: String,
}

#[derive(Debug, Deserialize, JsonSchema, Elicit)]
struct Age {
    age: u32,
}

#[derive(Debug, Deserialize, JsonSchema, Elicit)]
struct Pick {
    n: u32,
}

// ---------------------------------------------------------------------------
// Scenarios.

/// Doubles `a` in a checkpoint, then asks for approval.
#[task_tool]
async fn approve_flow(tag: String, a: u32) -> Result<String, ToolError> {
    let doubled = checkpoint("double", || async {
        bump(&tag);
        Ok::<_, ToolError>(a * 2)
    })
    .await?;
    durable::status("waiting for approval");
    let answer: Approval = ask_user("Approve the rollout?").await?;
    if !answer.approve {
        return Err(ToolError::new("not approved"));
    }
    Ok(format!("doubled {doubled}"))
}

async fn full_flow(b: Backend) {
    let engine = b
        .engine(Registry::new().with(approve_flow_tool()).unwrap())
        .await;
    let tag = tag();
    let t = create(&engine, "approve_flow", json!({"tag": tag, "a": 21})).await;
    assert_eq!(t.id.len(), 32);

    let r = parked(&engine, &t.id).await;
    assert_eq!(r.pending.len(), 1, "{r:#?}");
    let p = &r.pending[0];
    assert_eq!(p.kind, StepKind::Ask);
    assert_eq!(
        wire(&p.request),
        json!({
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": "Approve the rollout?",
                "requestedSchema": Value::Object(Approval::requested_schema()),
            }
        })
    );
    let request = wire(&p.request);
    let schema = &request["params"]["requestedSchema"];
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["properties"]["approve"]["type"], "boolean");
    assert_eq!(schema["required"], json!(["approve"]));
    assert_eq!(count(&tag), 1, "the checkpoint ran once before parking");
    assert!(r.result.is_none() && r.error.is_none());

    let key = p.key.clone();
    answer(
        &engine,
        &t.id,
        json!({ key.clone(): accept(json!({"approve": true})) }),
    )
    .await;
    let r = finished(&engine, &t.id).await;
    assert_completed(&r, "doubled 42");
    assert_eq!(count(&tag), 1, "the checkpoint did not run again on replay");
    assert_eq!(r.created_at_ms, t.created_at_ms);
    assert!(r.updated_at_ms >= t.updated_at_ms);

    // The journal holds the checkpoint's value and the answer, once each.
    let journal = b.store.journal(&t.id).await.unwrap();
    assert_eq!(journal.len(), 2, "{journal:#?}");
    assert_eq!(
        (journal[0].kind, journal[0].name.as_str(), &journal[0].value),
        (StepKind::Checkpoint, "double", &json!(42))
    );
    assert_eq!(journal[1].kind, StepKind::Ask);
    assert_eq!(journal[1].value, accept(json!({"approve": true})));
}

/// Asks for approval and reports how the question ended.
#[task_tool]
async fn ask_outcome() -> Result<String, ToolError> {
    match ask_user::<Approval>("Proceed?").await {
        Ok(a) => Ok(format!("approve={}", a.approve)),
        Err(AskError::Declined) => Err(ToolError::new("the user declined")),
        Err(AskError::Cancelled) => Err(ToolError::new("the user dismissed the question")),
        Err(other) => Err(ToolError::rpc(-32603, format!("unexpected: {other}"))),
    }
}

async fn decline_and_cancel_answers(b: Backend) {
    let engine = b
        .engine(Registry::new().with(ask_outcome_tool()).unwrap())
        .await;
    for (action, expected) in [
        ("decline", "the user declined"),
        ("cancel", "the user dismissed the question"),
    ] {
        let t = create(&engine, "ask_outcome", json!({})).await;
        let r = parked(&engine, &t.id).await;
        let key = r.pending[0].key.clone();
        answer(&engine, &t.id, json!({ key: {"action": action} })).await;
        let r = finished(&engine, &t.id).await;
        assert_eq!(r.status, TaskStatus::Completed, "{r:#?}");
        assert!(is_error(&r), "{r:#?}");
        assert_eq!(text(&r), expected);
        assert!(r.error.is_none());
    }
    // And an accept still works.
    let t = create(&engine, "ask_outcome", json!({})).await;
    let key = parked(&engine, &t.id).await.pending[0].key.clone();
    answer(
        &engine,
        &t.id,
        json!({ key: accept(json!({"approve": false})) }),
    )
    .await;
    assert_completed(&finished(&engine, &t.id).await, "approve=false");
}

/// Asks two questions at once.
#[task_tool]
async fn two_questions() -> Result<String, ToolError> {
    let (name, age) = tokio::join!(
        ask_user::<Name>("What is your name?"),
        ask_user::<Age>("How old are you?")
    );
    Ok(format!("{} is {}", name?.name, age?.age))
}

async fn partial_answers(b: Backend) {
    let engine = b
        .engine(Registry::new().with(two_questions_tool()).unwrap())
        .await;
    let t = create(&engine, "two_questions", json!({})).await;
    let r = parked(&engine, &t.id).await;
    assert_eq!(r.pending.len(), 2, "{r:#?}");
    assert_ne!(r.pending[0].key, r.pending[1].key);
    let message = |i: usize| {
        wire(&r.pending[i].request)["params"]["message"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (name_i, age_i) = if message(0) == "What is your name?" {
        (0, 1)
    } else {
        (1, 0)
    };
    assert_eq!(message(age_i), "How old are you?");
    let name_key = r.pending[name_i].key.clone();
    let age = r.pending[age_i].clone();

    // One answer (plus a key that was never issued, which is ignored).
    answer(
        &engine,
        &t.id,
        json!({
            name_key.clone(): accept(json!({"name": "Ada"})),
            "no-such-key": {"ignored": true},
        }),
    )
    .await;
    let r = engine.get(&t.id, None).await.unwrap();
    assert_eq!(r.status, TaskStatus::InputRequired, "{r:#?}");
    assert_eq!(r.pending, vec![age.clone()], "only the age is outstanding");

    // Answering the already-answered key again changes nothing.
    answer(
        &engine,
        &t.id,
        json!({ name_key: accept(json!({"name": "Bob"})) }),
    )
    .await;
    let again = engine.get(&t.id, None).await.unwrap();
    assert_eq!(again, r);

    answer(
        &engine,
        &t.id,
        json!({ age.key: accept(json!({"age": 36})) }),
    )
    .await;
    assert_completed(&finished(&engine, &t.id).await, "Ada is 36");
}

/// Waits for its gate, then asks for approval.
#[task_tool]
async fn gated_ask(tag: String) -> Result<String, ToolError> {
    pass(&tag).await;
    let a: Approval = ask_user("Go?").await?;
    Ok(format!("approve={}", a.approve))
}

async fn answers_to_working_or_finished_tasks_are_ignored(b: Backend) {
    let engine = b
        .engine(Registry::new().with(gated_ask_tool()).unwrap())
        .await;
    let tag = tag();
    let t = create(&engine, "gated_ask", json!({"tag": tag})).await;

    // Working: every key is ignored (even the one the task will ask next).
    answer(
        &engine,
        &t.id,
        json!({
            "ask-0": accept(json!({"approve": true})),
            "x": accept(json!({"approve": true})),
        }),
    )
    .await;
    let r = engine.get(&t.id, None).await.unwrap();
    assert_eq!(r.status, TaskStatus::Working);
    assert!(b.store.journal(&t.id).await.unwrap().is_empty());

    open(&tag);
    let r = parked(&engine, &t.id).await;
    assert_eq!(r.pending.len(), 1, "the early answer was not kept: {r:#?}");
    let key = r.pending[0].key.clone();
    answer(
        &engine,
        &t.id,
        json!({ key.clone(): accept(json!({"approve": false})) }),
    )
    .await;
    let done = finished(&engine, &t.id).await;
    assert_completed(&done, "approve=false");

    // Terminal: ignored too, and nothing changes (not even lastUpdatedAt).
    answer(
        &engine,
        &t.id,
        json!({ key: accept(json!({"approve": true})) }),
    )
    .await;
    assert_eq!(engine.get(&t.id, None).await.unwrap(), done);
    assert_eq!(b.store.journal(&t.id).await.unwrap().len(), 1);
}

/// Counts its runs, asks for a number, counts the resumes past the question.
#[task_tool]
async fn pick_once(tag: String) -> Result<String, ToolError> {
    bump(&format!("{tag}/runs"));
    let pick: Pick = ask_user("Pick a number").await?;
    bump(&format!("{tag}/resumed"));
    Ok(format!("picked {}", pick.n))
}

async fn concurrent_answers_to_one_key(b: Backend) {
    let engine = b
        .engine(Registry::new().with(pick_once_tool()).unwrap())
        .await;
    let tag = tag();
    let t = create(&engine, "pick_once", json!({"tag": tag})).await;
    let key = parked(&engine, &t.id).await.pending[0].key.clone();

    let answers: Vec<_> = (0..32u32)
        .map(|n| {
            let engine = engine.clone();
            let id = t.id.clone();
            let key = key.clone();
            tokio::spawn(async move {
                engine
                    .update(&id, obj(json!({ key: accept(json!({"n": n})) })), None)
                    .await
            })
        })
        .collect();
    for a in answers {
        a.await.unwrap().expect("every update is acknowledged");
    }
    let r = finished(&engine, &t.id).await;
    assert_eq!(r.status, TaskStatus::Completed, "{r:#?}");
    let picked: u32 = text(&r).strip_prefix("picked ").unwrap().parse().unwrap();
    assert!(picked < 32);
    // Let any stray second run show itself before counting.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(count(&format!("{tag}/resumed")), 1, "resumed exactly once");
    assert_eq!(count(&format!("{tag}/runs")), 2, "one run, one replay");
    let journal = b.store.journal(&t.id).await.unwrap();
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0].value, accept(json!({"n": picked})));
}

/// Names its checkpoint after a flag: flipping the flag between runs makes
/// the replay meet a different step.
#[task_tool]
async fn drifting(tag: String) -> Result<String, ToolError> {
    let name = if flag(&tag) { "second" } else { "first" };
    let _: u32 = checkpoint(name, || async { Ok::<_, ToolError>(1) }).await?;
    let _: Approval = ask_user("Go?").await?;
    Ok("unreachable after drift".into())
}

async fn non_determinism_fails_the_task(b: Backend) {
    let engine = b
        .engine(Registry::new().with(drifting_tool()).unwrap())
        .await;
    let tag = tag();
    let t = create(&engine, "drifting", json!({"tag": tag})).await;
    let key = parked(&engine, &t.id).await.pending[0].key.clone();
    set_flag(&tag);
    answer(
        &engine,
        &t.id,
        json!({ key: accept(json!({"approve": true})) }),
    )
    .await;
    let r = finished(&engine, &t.id).await;
    assert_eq!(r.status, TaskStatus::Failed, "{r:#?}");
    assert!(r.result.is_none());
    let e = error(&r);
    assert_eq!(e["code"], json!(-32603));
    let message = e["message"].as_str().unwrap();
    assert!(message.contains("non-deterministic"), "{message}");
    assert_eq!(
        e["data"],
        json!({
            "position": 0,
            "expected": {"kind": "checkpoint", "name": "first"},
            "found": {"kind": "checkpoint", "name": "second"},
        })
    );
    assert_eq!(r.status_message.as_deref(), Some(message));
}

/// Sleeps (not durably) for a minute.
#[task_tool]
async fn slow(tag: String) -> Result<String, ToolError> {
    bump(&tag);
    #[allow_nondeterminism]
    tokio::time::sleep(Duration::from_secs(60)).await;
    Ok("slept".into())
}

/// Sleeps durably for `ms` milliseconds.
#[task_tool]
async fn nap(ms: u64) -> Result<String, ToolError> {
    durable::sleep(Duration::from_millis(ms)).await;
    Ok("woke".into())
}

/// Returns at once.
#[task_tool]
async fn quick() -> String {
    "quick".into()
}

async fn cancel_in_each_state(b: Backend) {
    let registry = Registry::new()
        .with(slow_tool())
        .unwrap()
        .with(nap_tool())
        .unwrap()
        .with(ask_outcome_tool())
        .unwrap()
        .with(quick_tool())
        .unwrap();
    let engine = b.engine(registry).await;

    // Working, inside a plain (non-durable) sleep: stops promptly.
    let slow_tag = tag();
    let t = create(&engine, "slow", json!({"tag": slow_tag})).await;
    until_count(&slow_tag, 1).await;
    let asked = Instant::now();
    engine.cancel(&t.id, None).await.unwrap();
    let r = finished(&engine, &t.id).await;
    assert_eq!(r.status, TaskStatus::Cancelled, "{r:#?}");
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    assert!(r.result.is_none() && r.error.is_none());

    // Parked in input_required: cancelled at once.
    let t = create(&engine, "ask_outcome", json!({})).await;
    parked(&engine, &t.id).await;
    engine.cancel(&t.id, None).await.unwrap();
    let r = engine.get(&t.id, None).await.unwrap();
    assert_eq!(r.status, TaskStatus::Cancelled, "{r:#?}");
    assert!(r.pending.is_empty());

    // In a durable sleep: cancelled at once.
    let t = create(&engine, "nap", json!({"ms": 60_000})).await;
    until(&engine, &t.id, |r| r.wake_at_ms.is_some()).await;
    engine.cancel(&t.id, None).await.unwrap();
    let r = engine.get(&t.id, None).await.unwrap();
    assert_eq!(r.status, TaskStatus::Cancelled, "{r:#?}");
    assert_eq!(r.wake_at_ms, None);

    // Terminal: acknowledged, nothing changes.
    let t = create(&engine, "quick", json!({})).await;
    let done = finished(&engine, &t.id).await;
    assert_completed(&done, "quick");
    engine.cancel(&t.id, None).await.unwrap();
    engine.cancel(&t.id, None).await.unwrap();
    assert_eq!(engine.get(&t.id, None).await.unwrap(), done);

    // Working but waiting for a worker: cancelled at once, and never runs.
    let one = Engine::builder_arc(b.store.clone())
        .registry(Registry::new().with(slow_tool()).unwrap())
        .max_concurrency(1)
        .start()
        .await
        .unwrap();
    let (busy_tag, queued_tag) = (tag(), tag());
    let busy = create(&one, "slow", json!({"tag": busy_tag})).await;
    until_count(&busy_tag, 1).await;
    let queued = create(&one, "slow", json!({"tag": queued_tag})).await;
    one.cancel(&queued.id, None).await.unwrap();
    let r = one.get(&queued.id, None).await.unwrap();
    assert_eq!(r.status, TaskStatus::Cancelled, "{r:#?}");
    one.cancel(&busy.id, None).await.unwrap();
    assert_eq!(finished(&one, &busy.id).await.status, TaskStatus::Cancelled);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(count(&queued_tag), 0, "the cancelled task never ran");

    // Unknown id.
    assert_not_found(
        engine
            .cancel("0123456789abcdef0123456789abcdef", None)
            .await,
    );
    assert_not_found(engine.get("nope", None).await);
    assert_not_found(engine.update("nope", Map::new(), None).await);
    assert_not_found(engine.subscribe("nope", None).await);
}

/// Finishes at once, but lives only 300 ms.
#[task_tool(ttl = "300ms")]
async fn short_lived() -> String {
    "done".into()
}

/// Finishes at once and lives 5 s.
#[task_tool(ttl = "5s")]
async fn medium_lived() -> String {
    "done".into()
}

/// Runs far past its 300 ms TTL.
#[task_tool(ttl = "300ms")]
async fn overrun() -> String {
    #[allow_nondeterminism]
    tokio::time::sleep(Duration::from_secs(60)).await;
    "never".into()
}

async fn ttl_expiry(b: Backend) {
    let registry = Registry::new()
        .with(short_lived_tool())
        .unwrap()
        .with(overrun_tool())
        .unwrap()
        .with(medium_lived_tool())
        .unwrap();
    let engine = b.engine(registry).await;
    // The sweeper is now due at this task's expiry, 5 s away; the next task
    // expires first.
    let medium = create(&engine, "medium_lived", json!({})).await;

    // Readable for its whole TTL, gone soon after.
    let t = create(&engine, "short_lived", json!({})).await;
    assert_eq!(t.ttl_ms, Some(300));
    assert_eq!(
        t.expires_at_ms(),
        Some(t.created_at_ms + 300),
        "TTL counts from createdAt"
    );
    let gone_at = loop {
        let now = mcp_now_ms();
        match engine.get(&t.id, None).await {
            Ok(r) => {
                assert!(
                    now < t.created_at_ms + 300 + LIMIT.as_millis() as i64,
                    "still there long after its TTL: {r:#?}"
                );
            }
            Err(Error::TaskNotFound(_)) => break mcp_now_ms(),
            Err(e) => panic!("{e}"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        gone_at >= t.created_at_ms + 300,
        "expired early: created {} gone {}",
        t.created_at_ms,
        gone_at
    );
    assert_not_found(engine.cancel(&t.id, None).await);
    assert_not_found(engine.update(&t.id, Map::new(), None).await);
    assert!(
        gone_at < t.created_at_ms + 3000,
        "purged late: created {} gone {gone_at}",
        t.created_at_ms
    );
    engine.get(&medium.id, None).await.expect("not expired yet");

    // A running task past its TTL: subscribers see it fail, then it is gone.
    let t = create(&engine, "overrun", json!({})).await;
    let mut rx = engine.subscribe(&t.id, None).await.unwrap();
    let last = tokio::time::timeout(LIMIT, async {
        loop {
            let cur = rx.borrow_and_update().clone();
            if cur.status.is_terminal() {
                return cur;
            }
            if rx.changed().await.is_err() {
                return rx.borrow().clone();
            }
        }
    })
    .await
    .expect("the subscriber saw the task end");
    assert_eq!(last.status, TaskStatus::Failed, "{last:#?}");
    assert_eq!(last.status_message.as_deref(), Some("Task expired"));
    assert_eq!(error(&last)["code"], json!(-32603));
    assert_eq!(error(&last)["message"], json!("Task expired"));
    assert_not_found(engine.get(&t.id, None).await);
}

fn mcp_now_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// Panics.
#[task_tool]
async fn boom(n: u32) -> String {
    if n > 0 {
        panic!("kaboom number {n}");
    }
    "no panic".into()
}

async fn panics_fail_the_task(b: Backend) {
    let registry = Registry::new()
        .with(boom_tool())
        .unwrap()
        .with(quick_tool())
        .unwrap();
    let engine = b.engine(registry).await;
    let t = create(&engine, "boom", json!({"n": 7})).await;
    let r = finished(&engine, &t.id).await;
    assert_eq!(r.status, TaskStatus::Failed, "{r:#?}");
    assert_eq!(error(&r)["code"], json!(-32603));
    let e = error(&r);
    let message = e["message"].as_str().unwrap();
    assert!(message.contains("kaboom number 7"), "{message}");
    assert!(r.result.is_none());

    // The engine keeps serving.
    let t = create(&engine, "quick", json!({})).await;
    assert_completed(&finished(&engine, &t.id).await, "quick");
    let t = create(&engine, "boom", json!({"n": 0})).await;
    assert_completed(&finished(&engine, &t.id).await, "no panic");
}

/// Fails as a tool error or as a JSON-RPC error.
#[task_tool]
async fn refuse(rpc: bool) -> Result<String, ToolError> {
    if rpc {
        Err(ToolError::rpc(-31000, "the backend is down"))
    } else {
        Err(ToolError::new("no such file"))
    }
}

async fn tool_errors(b: Backend) {
    let engine = b.engine(Registry::new().with(refuse_tool()).unwrap()).await;

    let t = create(&engine, "refuse", json!({"rpc": false})).await;
    let r = finished(&engine, &t.id).await;
    assert_eq!(r.status, TaskStatus::Completed, "{r:#?}");
    assert!(is_error(&r));
    assert_eq!(text(&r), "no such file");
    assert!(r.error.is_none());

    let t = create(&engine, "refuse", json!({"rpc": true})).await;
    let r = finished(&engine, &t.id).await;
    assert_eq!(r.status, TaskStatus::Failed, "{r:#?}");
    assert_eq!(error(&r)["code"], json!(-31000));
    assert_eq!(error(&r)["message"], json!("the backend is down"));
    assert!(r.result.is_none());
}

/// An engine with one worker serving `nap` and `quick`, whose sleeps of up
/// to `in_process` wait in their run.
async fn one_worker_napping(b: &Backend, in_process: Duration) -> Engine {
    let registry = Registry::new()
        .with(nap_tool())
        .unwrap()
        .with(quick_tool())
        .unwrap();
    Engine::builder_arc(b.store.clone())
        .registry(registry)
        .max_concurrency(1)
        .sleep_in_process_up_to(in_process)
        .start()
        .await
        .unwrap()
}

async fn durable_sleep(b: Backend) {
    let engine = one_worker_napping(&b, Duration::ZERO).await;
    let sleeper = create(&engine, "nap", json!({"ms": 200})).await;
    let r = until(&engine, &sleeper.id, |r| r.wake_at_ms.is_some()).await;
    assert_eq!(r.status, TaskStatus::Working, "a sleeping task is working");
    let wake_at = r.wake_at_ms.unwrap();
    assert!(wake_at >= sleeper.created_at_ms + 200);

    // The only worker is free: another task runs while the first sleeps.
    let other = create(&engine, "quick", json!({})).await;
    let other = finished(&engine, &other.id).await;
    assert_completed(&other, "quick");

    let r = finished(&engine, &sleeper.id).await;
    assert_completed(&r, "woke");
    assert!(
        other.updated_at_ms < r.updated_at_ms,
        "the other task finished first"
    );
    assert!(
        r.updated_at_ms >= wake_at,
        "woke before the deadline: {r:#?}"
    );
    let journal = b.store.journal(&sleeper.id).await.unwrap();
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0].kind, StepKind::Sleep);
    assert_eq!(journal[0].value, json!(wake_at));
    assert!(
        r.fence > sleeper.fence,
        "the task was claimed again when it woke: {r:#?}"
    );
}

async fn short_sleep_waits_in_its_run(b: Backend) {
    // The default: sleeps of up to a second wait in their run.
    let engine = one_worker_napping(&b, Duration::from_secs(1)).await;
    let sleeper = create(&engine, "nap", json!({"ms": 300})).await;
    // Its deadline is journaled before it waits.
    let journal = journaled(&b.store, &sleeper.id).await;
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0].kind, StepKind::Sleep);
    let deadline = journal[0].value.as_i64().expect("a deadline in Unix ms");
    assert!(deadline >= sleeper.created_at_ms + 300);

    // The run holds the only worker while it waits: a task created meanwhile
    // runs once the sleeper has finished.
    let other = create(&engine, "quick", json!({})).await;
    let other = finished(&engine, &other.id).await;
    assert_completed(&other, "quick");
    let r = finished(&engine, &sleeper.id).await;
    assert_completed(&r, "woke");
    assert!(
        r.updated_at_ms <= other.updated_at_ms,
        "the sleeper finished first: {r:#?} {other:#?}"
    );
    assert!(
        r.updated_at_ms >= deadline,
        "woke before the deadline: {r:#?}"
    );
    // Never parked, never claimed again.
    assert_eq!(r.wake_at_ms, None);
    assert_eq!(
        r.fence, sleeper.fence,
        "the run that slept is the one that ended it"
    );
    assert_eq!(b.store.journal(&sleeper.id).await.unwrap(), journal);
}

/// A sleep that waits in its run waits on the engine's clock: moving a
/// test clock on (`Engine::advance_clock`) ends it, as it fires a parked
/// sleep's timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleep_in_its_run_wakes_when_the_clock_moves_on() {
    let clock = mcp_tasks_runtime::testing::TestClock::new();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let engine = Engine::builder_arc(store.clone())
        .registry(Registry::new().with(nap_tool()).unwrap())
        .clock(&clock)
        // Moving the clock an hour on must neither expire the task nor
        // lapse its run's lease.
        .default_ttl(None)
        .lease(Duration::from_secs(48 * 3600))
        .sleep_in_process_up_to(Duration::from_secs(24 * 3600))
        .start()
        .await
        .unwrap();
    let hour = 3_600_000;
    let t = create(&engine, "nap", json!({ "ms": hour })).await;
    journaled(&store, &t.id).await;
    let asleep = engine.get(&t.id, None).await.unwrap();
    assert_eq!(asleep.wake_at_ms, None, "waiting in its run: {asleep:#?}");
    engine.advance_clock(Duration::from_secs(3600));
    let r = finished(&engine, &t.id).await;
    assert_completed(&r, "woke");
    assert_eq!(r.fence, t.fence, "the run that slept ended it: {r:#?}");
}

/// Reports progress, waits for its gate, asks, finishes.
#[task_tool]
async fn phases(tag: String) -> Result<String, ToolError> {
    durable::status("phase one");
    pass(&tag).await;
    let _: Approval = ask_user("Continue?").await?;
    durable::status("phase two");
    Ok("finished".into())
}

async fn status_and_subscribe(b: Backend) {
    let engine = b.engine(Registry::new().with(phases_tool()).unwrap()).await;
    let tag = tag();
    let t = create(&engine, "phases", json!({"tag": tag})).await;
    let mut rx = engine.subscribe(&t.id, None).await.unwrap();

    let r = until(&engine, &t.id, |r| {
        r.status_message.as_deref() == Some("phase one")
    })
    .await;
    assert_eq!(r.status, TaskStatus::Working);
    let seen = tokio::time::timeout(
        LIMIT,
        rx.wait_for(|r| r.status_message.as_deref() == Some("phase one")),
    )
    .await
    .expect("the subscriber saw the status message")
    .unwrap()
    .clone();
    assert_eq!(seen.status, TaskStatus::Working);

    open(&tag);
    let seen = tokio::time::timeout(
        LIMIT,
        rx.wait_for(|r| r.status == TaskStatus::InputRequired),
    )
    .await
    .expect("the subscriber saw the task park")
    .unwrap()
    .clone();
    assert_eq!(seen.pending.len(), 1);
    assert_eq!(seen, engine.get(&t.id, None).await.unwrap());

    let key = seen.pending[0].key.clone();
    answer(
        &engine,
        &t.id,
        json!({ key: accept(json!({"approve": true})) }),
    )
    .await;
    let seen = tokio::time::timeout(LIMIT, rx.wait_for(|r| r.status.is_terminal()))
        .await
        .expect("the subscriber saw the task finish")
        .unwrap()
        .clone();
    assert_completed(&seen, "finished");
    // The terminal state a subscriber sees is the stored one.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let stored = engine.get(&t.id, None).await.unwrap();
    assert_eq!(stored.status, TaskStatus::Completed);
    assert_eq!(stored.result, seen.result);

    // Subscribing to a finished task yields its final state at once.
    let rx = engine.subscribe(&t.id, None).await.unwrap();
    assert_eq!(rx.borrow().status, TaskStatus::Completed);
}

/// Records how many of its kind run at once.
#[task_tool]
async fn overlap(tag: String) -> String {
    let now = bump(&format!("{tag}/current"));
    raise(&format!("{tag}/peak"), now);
    #[allow_nondeterminism]
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop_one(&format!("{tag}/current"));
    "ok".into()
}

async fn bounded_concurrency(b: Backend) {
    let engine = Engine::builder_arc(b.store.clone())
        .registry(Registry::new().with(overlap_tool()).unwrap())
        .max_concurrency(2)
        .start()
        .await
        .unwrap();
    let tag = tag();
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(create(&engine, "overlap", json!({"tag": tag})).await.id);
    }
    for id in &ids {
        assert_completed(&finished(&engine, id).await, "ok");
    }
    let peak = count(&format!("{tag}/peak"));
    assert!((1..=2).contains(&peak), "peak overlap {peak}");
}

/// Checkpoints, then waits for its gate.
#[task_tool]
async fn resumable(tag: String) -> Result<String, ToolError> {
    let v: u32 = checkpoint("effect", || async {
        bump(&format!("{tag}/effect"));
        Ok::<_, ToolError>(9)
    })
    .await?;
    bump(&format!("{tag}/after"));
    pass(&tag).await;
    Ok(format!("resumed with {v}"))
}

/// Never finishes; only engine A knows it.
#[task_tool]
async fn hang() -> String {
    std::future::pending::<()>().await;
    unreachable!()
}

async fn startup_recovery(b: Backend) {
    let tag = tag();
    // Engine A runs on its own runtime, which is then shut down: every task
    // future it held is dropped, as in a crash.
    let rt_a = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let store_a = b.store.clone();
    let tag_a = tag.clone();
    let (parked_id, resumable_id, hung_id) = rt_a
        .spawn(async move {
            let registry = Registry::new()
                .with(approve_flow_tool())
                .unwrap()
                .with(resumable_tool())
                .unwrap()
                .with(hang_tool())
                .unwrap();
            // A's leases run out soon after it dies.
            let a = Engine::builder_arc(store_a)
                .registry(registry)
                .lease(Duration::from_millis(300))
                .start()
                .await
                .unwrap();
            let p = create(&a, "approve_flow", json!({"tag": tag_a, "a": 5})).await;
            let r = create(&a, "resumable", json!({"tag": tag_a})).await;
            let h = create(&a, "hang", json!({})).await;
            parked(&a, &p.id).await;
            until_count(&format!("{tag_a}/after"), 1).await;
            (p.id, r.id, h.id)
        })
        .await
        .unwrap();
    rt_a.shutdown_background();
    let before = b.store.get(&parked_id).await.unwrap().unwrap();
    assert_eq!(before.status, TaskStatus::InputRequired);
    assert_eq!(
        b.store.get(&hung_id).await.unwrap().unwrap().status,
        TaskStatus::Working
    );

    // Engine B: same data, no `hang` tool.
    open(&tag);
    let registry = Registry::new()
        .with(approve_flow_tool())
        .unwrap()
        .with(resumable_tool())
        .unwrap();
    let engine = Engine::builder_arc(b.reopen().await)
        .registry(registry)
        .start()
        .await
        .unwrap();

    // The working task whose tool is gone fails, naming the tool.
    let r = finished(&engine, &hung_id).await;
    assert_eq!(r.status, TaskStatus::Failed, "{r:#?}");
    let e = error(&r);
    let message = e["message"].as_str().unwrap();
    assert!(message.contains("`hang`"), "{message}");

    // The working task resumes from its checkpoint.
    let r = finished(&engine, &resumable_id).await;
    assert_completed(&r, "resumed with 9");
    assert_eq!(count(&format!("{tag}/effect")), 1);
    assert_eq!(count(&format!("{tag}/after")), 2, "one run, one replay");

    // The parked task is still parked on the same request, and answers.
    let r = engine.get(&parked_id, None).await.unwrap();
    assert_eq!(r.status, TaskStatus::InputRequired);
    assert_eq!(r.pending, before.pending);
    let key = r.pending[0].key.clone();
    answer(
        &engine,
        &parked_id,
        json!({ key: accept(json!({"approve": true})) }),
    )
    .await;
    assert_completed(&finished(&engine, &parked_id).await, "doubled 10");
    assert_eq!(count(&tag), 1, "the checkpoint ran once across the restart");
}

/// A checkpoint, then a question.
#[task_tool]
async fn inline_flow(tag: String) -> Result<String, ToolError> {
    let v: u32 = checkpoint("prepare", || async {
        bump(&tag);
        Ok::<_, ToolError>(5)
    })
    .await?;
    let a: Approval = ask_user("Go on?").await?;
    Ok(format!("{v} approve={}", a.approve))
}

async fn inline_mode(b: Backend) {
    let engine = b
        .engine(Registry::new().with(inline_flow_tool()).unwrap())
        .await;
    let tag = tag();
    let args = obj(json!({"tag": tag}));
    let inline = |call: Call| call.capabilities(caps()).mode(CallMode::Inline);
    let first = engine
        .call(inline(Call::new("inline_flow", args.clone())))
        .await
        .unwrap();
    let CallOutcome::InputRequired { requests, journal } = first else {
        panic!("expected input_required, got {first:?}");
    };
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].request.method(), "elicitation/create");
    assert_eq!(journal.len(), 1);
    assert_eq!(
        (journal[0].kind, journal[0].name.as_str(), &journal[0].value),
        (StepKind::Checkpoint, "prepare", &json!(5))
    );
    assert_eq!(count(&tag), 1);

    let key = requests[0].key.clone();
    let answers = obj(json!({ key: accept(json!({"approve": true})) }));
    let second = engine
        .call(inline(Call::new("inline_flow", args)).resume(journal, answers))
        .await
        .unwrap();
    let CallOutcome::Finished(Ok(result)) = second else {
        panic!("expected a result, got {second:?}");
    };
    assert_eq!(result["content"][0]["text"], json!("5 approve=true"));
    assert_eq!(count(&tag), 1, "the checkpoint did not run again");
    // Inline runs create no task.
    assert!(b.store.unfinished().await.unwrap().is_empty());
}

/// Task ids: 128-bit hex, distinct. Store-independent, so memory only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_ids_are_32_hex_and_distinct() {
    // 10 000 creates as fast as they go: no rate limit.
    let mut limits = mcp_tasks_runtime::engine::Limits::default();
    limits.creates_per_second = f64::INFINITY;
    let engine = Engine::builder(MemoryStore::new())
        .limits(limits)
        .registry(Registry::new().with(quick_tool()).unwrap())
        .start()
        .await
        .unwrap();
    let mut seen = HashSet::new();
    for _ in 0..10_000 {
        let CallOutcome::Task(t) = engine.call(Call::new("quick", Map::new())).await.unwrap()
        else {
            panic!("a task-capable call with no inline window starts a task");
        };
        assert_eq!(t.id.len(), 32, "{}", t.id);
        assert!(
            t.id.bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)),
            "{}",
            t.id
        );
        assert!(seen.insert(t.id), "duplicate id");
    }
    assert_eq!(seen.len(), 10_000);
}

use std::sync::atomic::{AtomicUsize, Ordering};

/// Inline calls running now, and the most seen at once.
static INLINE_NOW: AtomicUsize = AtomicUsize::new(0);
static INLINE_MAX: AtomicUsize = AtomicUsize::new(0);

/// Busy for 50 ms, counting how many run at once.
#[task_tool(task = forbidden)]
async fn inline_gauge() -> String {
    let now = INLINE_NOW.fetch_add(1, Ordering::SeqCst) + 1;
    INLINE_MAX.fetch_max(now, Ordering::SeqCst);
    #[allow_nondeterminism]
    tokio::time::sleep(Duration::from_millis(50)).await;
    INLINE_NOW.fetch_sub(1, Ordering::SeqCst);
    "measured".into()
}

/// Inline calls have a limit of their own: beyond it, calls wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_calls_beyond_their_limit_wait() {
    let engine = Engine::builder(MemoryStore::new())
        .registry(Registry::new().with(inline_gauge_tool()).unwrap())
        .max_inline(2)
        .start()
        .await
        .unwrap();
    let calls: Vec<_> = (0..6)
        .map(|_| {
            let engine = engine.clone();
            tokio::spawn(async move { engine.call(Call::new("inline_gauge", Map::new())).await })
        })
        .collect();
    for call in calls {
        let outcome = call.await.unwrap().unwrap();
        assert!(
            matches!(outcome, CallOutcome::Finished(Ok(_))),
            "{outcome:?}"
        );
    }
    assert_eq!(INLINE_MAX.load(Ordering::SeqCst), 2, "at most two at once");
    assert_eq!(INLINE_NOW.load(Ordering::SeqCst), 0);
}

/// Runs each scenario on both stores.
macro_rules! engine_tests {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Backend::new(super::Kind::Memory).await).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let b = super::Backend::new(super::Kind::Sqlite).await;
                    assert_eq!(b.kind, super::Kind::Sqlite);
                    super::$name(b).await;
                }
            )*
        }
    };
}

engine_tests!(
    full_flow,
    decline_and_cancel_answers,
    partial_answers,
    answers_to_working_or_finished_tasks_are_ignored,
    concurrent_answers_to_one_key,
    non_determinism_fails_the_task,
    cancel_in_each_state,
    ttl_expiry,
    panics_fail_the_task,
    tool_errors,
    durable_sleep,
    short_sleep_waits_in_its_run,
    status_and_subscribe,
    bounded_concurrency,
    startup_recovery,
    inline_mode,
);
