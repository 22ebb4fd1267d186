//! What the behaviours share: records to store, and the checks they repeat.

pub(super) use std::sync::Arc;

pub(super) use serde::Serialize;
pub(super) use serde_json::{Map, Value, json};

pub(super) use mcp_tasks_runtime::question::{FormRequest, InputCapabilities, InputRequest};
pub(super) use mcp_tasks_runtime::store::{
    Answered, Appended, JournalEntry, Lease, ListCursor, PageFrom, PendingInput, SESSION_TTL,
    StepKind, Store, TaskFilter, TaskRecord, TaskStatus, TaskSummary, Transition,
};
pub(super) use mcp_tasks_runtime::{Error, Result, tool::RpcError};

// ---------------------------------------------------------------------------
// Builders.

pub(super) const T0: i64 = 1_700_000_000_000;

pub(super) fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

/// A plain working task with every optional field empty.
pub(super) fn task(id: &str) -> TaskRecord {
    TaskRecord {
        status_message: None,
        ..TaskRecord::new(id, "deploy", T0)
    }
}

/// A task with every field set to something other than its default (and
/// text, numbers and JSON at their awkward edges), for round-trip tests of
/// your own, e.g. that a durable store reads back what it wrote after a
/// restart.
///
/// ```
/// use mcp_tasks_runtime::store::{MemoryStore, Store};
/// use mcp_tasks_store_contract::full_task;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mcp_tasks_runtime::Result<()> {
/// let store = MemoryStore::new();
/// store.create(full_task("t1")).await?;
/// assert_eq!(store.get("t1").await?, Some(full_task("t1")));
/// # Ok(())
/// # }
/// ```
pub fn full_task(id: &str) -> TaskRecord {
    TaskRecord {
        id: id.to_owned(),
        tool: "rollout_ü".into(),
        tool_version: u32::MAX,
        arguments: obj(json!({
            "service": "api",
            "replicas": 3,
            "big": u64::MAX,
            "small": i64::MIN,
            "ratio": 0.1,
            "flags": [true, false, null],
            "nested": {"text": "héllo ✓ \"quoted\" \n newline", "empty": {}},
        })),
        client_capabilities: {
            let mut c = InputCapabilities::NONE;
            c.elicitation = true;
            c.sampling = true;
            c
        },
        principal: Some("alice@example.com".into()),
        status: TaskStatus::InputRequired,
        status_message: Some("Waiting for approval…".into()),
        created_at_ms: T0,
        updated_at_ms: T0 + 5,
        ttl_ms: Some(3_600_000),
        poll_interval_ms: Some(i64::MAX as u64),
        pending: vec![pending("k1", 3), pending("k2", 7)],
        wake_at_ms: Some(T0 + 60_000),
        cancel_requested: true,
        result: Some(obj(
            json!({"content": [{"type": "text", "text": "ok"}], "isError": false}),
        )),
        error: Some(RpcError::internal("boom").with_data(json!({"at": 4}))),
        version: 41,
        lease: Some(Lease {
            owner: "instance-7".into(),
            expires_at_ms: T0 + 30_000,
        }),
        fence: 12,
    }
}

pub(super) fn pending(key: &str, position: u32) -> PendingInput {
    PendingInput {
        key: key.to_owned(),
        position,
        kind: StepKind::Ask,
        name: format!("Approval{position}"),
        request: InputRequest::Form(FormRequest {
            message: format!("go {key}?"),
            requested_schema: obj(json!({"type": "object"})),
        }),
        deadline_ms: None,
        race: None,
        in_flight: false,
        answer: None,
    }
}

pub(super) fn entry(position: u32, kind: StepKind, name: &str, value: Value) -> JournalEntry {
    JournalEntry {
        position,
        kind,
        name: name.to_owned(),
        value,
    }
}

/// An elicitation answer carrying `content`.
pub(super) fn accept(content: impl Serialize) -> Value {
    json!({"action": "accept", "content": {"value": content}})
}

pub(super) fn with(id: &str, f: impl FnOnce(&mut TaskRecord)) -> TaskRecord {
    let mut t = task(id);
    f(&mut t);
    t
}

/// Task `id` of `principal` (`None`: created without one), created at `at`.
pub(super) fn owned(id: &str, principal: Option<&str>, at: i64) -> TaskRecord {
    with(id, |t| {
        t.principal = principal.map(str::to_owned);
        t.created_at_ms = at;
    })
}

/// A task parked on `keys`, at positions 10, 11, …
pub(super) fn parked(id: &str, keys: &[&str]) -> TaskRecord {
    with(id, |t| {
        t.status = TaskStatus::InputRequired;
        t.pending = keys
            .iter()
            .zip(10..)
            .map(|(k, position)| pending(k, position))
            .collect();
    })
}

pub(super) const ALL_STATUSES: [TaskStatus; 5] = [
    TaskStatus::Working,
    TaskStatus::InputRequired,
    TaskStatus::Completed,
    TaskStatus::Failed,
    TaskStatus::Cancelled,
];

pub(super) const TERMINAL: [TaskStatus; 3] = [
    TaskStatus::Completed,
    TaskStatus::Failed,
    TaskStatus::Cancelled,
];

pub(super) fn every_transition() -> Vec<Transition> {
    vec![
        Transition::StatusMessage("something new".into()),
        Transition::Park(vec![pending("late", 1)]),
        Transition::Sleep { wake_at_ms: T0 + 1 },
        Transition::RequestCancel,
        Transition::Complete(obj(json!({"content": []}))),
        Transition::Fail(RpcError::internal("late")),
        Transition::Cancel,
        Transition::Release,
    ]
}

pub(super) const CANCELLED_MESSAGE: &str = "The task was cancelled.";
pub(super) const COMPLETED_MESSAGE: &str = "The task completed.";

pub(super) async fn create(store: &Arc<dyn Store>, t: &TaskRecord) {
    store.create(t.clone()).await.unwrap();
}

/// Claims task `id` for `owner` at `now` until `until`, which must succeed.
pub(super) async fn claimed(
    store: &Arc<dyn Store>,
    id: &str,
    owner: &str,
    now: i64,
    until: i64,
) -> (TaskRecord, Vec<JournalEntry>) {
    let claim = store.claim(id, owner, now, until).await.unwrap();
    claim.unwrap_or_else(|| panic!("{owner} could not claim {id}"))
}

pub(super) async fn get(store: &Arc<dyn Store>, id: &str) -> TaskRecord {
    store
        .get(id)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("task {id} is missing"))
}

/// Applies `change` (no fence), which must take, and returns the task
/// after it.
pub(super) async fn changed(
    store: &Arc<dyn Store>,
    id: &str,
    change: Transition,
    now: i64,
) -> TaskRecord {
    let what = format!("{change:?} on task {id}");
    let after = store.transition(id, change, now, None).await.unwrap();
    after.unwrap_or_else(|| panic!("{what} was refused"))
}

/// Answers task `id` with `responses` at `now`; the task must exist.
pub(super) async fn answered(
    store: &Arc<dyn Store>,
    id: &str,
    responses: Value,
    now: i64,
) -> Answered {
    let answered = store.answer(id, obj(responses), now).await.unwrap();
    answered.unwrap_or_else(|| panic!("task {id} is missing"))
}

pub(super) fn store_error<T: std::fmt::Debug>(r: Result<T>) -> String {
    match r {
        Err(Error::Store(e)) => e.to_string(),
        other => panic!("expected a store error, got {other:?}"),
    }
}

pub(super) fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

/// Applies `change` at `now` and checks that the returned and the stored
/// task both equal the task before it, one version on, updated at `now`
/// and then changed by `edit`.
pub(super) async fn expect_change(
    store: &Arc<dyn Store>,
    id: &str,
    change: Transition,
    now: i64,
    edit: impl FnOnce(&mut TaskRecord),
) {
    let mut expected = get(store, id).await;
    expected.version += 1;
    expected.updated_at_ms = now;
    edit(&mut expected);
    let got = store
        .transition(id, change.clone(), now, None)
        .await
        .unwrap();
    assert_eq!(got.as_ref(), Some(&expected), "{change:?}");
    assert_eq!(get(store, id).await, expected, "{change:?}");
}

/// Applies `change` and checks that nothing changed.
pub(super) async fn expect_no_change(
    store: &Arc<dyn Store>,
    id: &str,
    change: Transition,
    now: i64,
) {
    let before = get(store, id).await;
    let got = store
        .transition(id, change.clone(), now, None)
        .await
        .unwrap();
    assert_eq!(got, None, "{change:?} on {:?}", before.status);
    assert_eq!(get(store, id).await, before, "{change:?}");
}
