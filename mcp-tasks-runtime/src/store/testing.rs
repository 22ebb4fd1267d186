//! The store contract as a test kit: every behaviour a [`Store`] must
//! have, runnable against any store, including yours (feature `testing`).
//!
//! The behaviours cover creating and reading tasks, the journal, every
//! [`Transition`] and answer as [`TaskRecord::apply`] and
//! [`TaskRecord::answer`] define them (including the version counter),
//! concurrent callers, recovery (`unfinished`) and expiry. The runtime runs
//! them against [`MemoryStore`](super::MemoryStore),
//! [`SqliteStore`](super::SqliteStore) and, on a real server,
//! `PostgresStore`. A store that needs a server the machine may lack can
//! skip the behaviours with [`Fixture::skip`].
//!
//! To run them against your store, write one line in a test file:
//! [`store_contract_tests!`](crate::store_contract_tests) expands to one
//! `#[test]` per behaviour, named after it, so a failure names the
//! behaviour that broke. Each test gets a fresh store from your factory,
//! an async closure that returns a [`Fixture`]:
//!
//! ```
//! use mcp_tasks_runtime::store::{MemoryStore, testing::Fixture};
//!
//! mcp_tasks_runtime::store_contract_tests!(|| async { Fixture::new(MemoryStore::new()) });
//! # fn main() {}
//! ```
//!
//! A store that lives in a file keeps its directory alive with
//! [`Fixture::keep`]:
//!
//! ```
//! use mcp_tasks_runtime::store::{SqliteStore, testing::Fixture};
//!
//! async fn sqlite() -> Fixture {
//!     let dir = tempfile::tempdir().expect("a temporary directory");
//!     let store = SqliteStore::open(dir.path().join("tasks.db"))
//!         .await
//!         .expect("a store");
//!     Fixture::new(store).keep(dir)
//! }
//!
//! mcp_tasks_runtime::store_contract_tests!(sqlite);
//! # fn main() {}
//! ```
//!
//! The kit needs no test framework beyond `#[test]`: each test builds its
//! own Tokio runtime (two worker threads, so concurrent callers really run
//! at once).

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
pub use postgres::PostgresSchema;

use std::{any::Any, fmt, future::Future, io::Write as _, pin::Pin, sync::Arc};

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::{
    Appended, FormRequest, InputCapabilities, InputRequest, JournalEntry, Lease, ListCursor,
    PendingInput, SESSION_TTL, StepKind, Store, TaskRecord, TaskStatus, Transition,
};
use crate::error::{Error, Result, RpcError};

// ---------------------------------------------------------------------------
// Running behaviours.

/// A fresh store for one behaviour, and whatever must live as long as it
/// (a temporary directory, a server process, …).
///
/// ```
/// use mcp_tasks_runtime::store::{MemoryStore, testing::Fixture};
///
/// let fixture = Fixture::new(MemoryStore::new()).keep("anything that must outlive the store");
/// # drop(fixture);
/// ```
pub struct Fixture {
    // Dropped in this order: the store before what it depends on.
    /// The store, or why there is none (the behaviour is skipped).
    store: Result<Arc<dyn Store>, String>,
    guards: Vec<Box<dyn Any + Send>>,
}

impl Fixture {
    /// A fixture for `store`.
    ///
    /// ```
    /// use mcp_tasks_runtime::store::{MemoryStore, testing::Fixture};
    ///
    /// let fixture = Fixture::new(MemoryStore::new());
    /// # drop(fixture);
    /// ```
    pub fn new(store: impl Store) -> Self {
        Self {
            store: Ok(Arc::new(store)),
            guards: Vec::new(),
        }
    }

    /// No store: the behaviour is skipped, and [`run`] says so on stderr
    /// (`SKIPPED: <behaviour>: <reason>`, shown even though the test
    /// harness captures output) and passes. For stores that need
    /// a server the machine may not have; fail instead where the server must
    /// be there (on CI, say).
    ///
    /// ```
    /// use mcp_tasks_runtime::store::testing::{self, Fixture};
    ///
    /// testing::run("partial_then_full_answer", || async {
    ///     Fixture::skip("no server at 127.0.0.1:5432")
    /// });
    /// ```
    pub fn skip(reason: impl Into<String>) -> Self {
        Self {
            store: Err(reason.into()),
            guards: Vec::new(),
        }
    }

    /// Keeps `guard` alive until the behaviour has finished and the store
    /// has been dropped.
    ///
    /// ```
    /// use mcp_tasks_runtime::store::{MemoryStore, testing::Fixture};
    ///
    /// let dir = tempfile::tempdir().expect("a temporary directory");
    /// let fixture = Fixture::new(MemoryStore::new()).keep(dir);
    /// # drop(fixture);
    /// ```
    #[must_use]
    pub fn keep(mut self, guard: impl Any + Send) -> Self {
        self.guards.push(Box::new(guard));
        self
    }
}

impl fmt::Debug for Fixture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fixture")
            .field("store", &self.store)
            .field("guards", &self.guards.len())
            .finish()
    }
}

/// Runs the behaviour named `behaviour` against a fresh store from
/// `factory`, on a Tokio runtime of its own; panics, naming what went
/// wrong, if the store breaks the contract. Call it from a plain `#[test]`
/// (not inside a runtime). [`store_contract_tests!`](crate::store_contract_tests)
/// writes one such test per behaviour.
///
/// ```
/// use mcp_tasks_runtime::store::{MemoryStore, testing::{self, Fixture}};
///
/// testing::run("partial_then_full_answer", || async {
///     Fixture::new(MemoryStore::new())
/// });
/// ```
///
/// # Panics
///
/// If the store breaks the behaviour, or no behaviour has that name.
pub fn run<F, Fut>(behaviour: &str, factory: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fixture>,
{
    let Some((_, check)) = BEHAVIOURS.iter().find(|(name, _)| *name == behaviour) else {
        let names: Vec<&str> = behaviours().collect();
        panic!(
            "no store behaviour is named `{behaviour}`; the behaviours are: {}",
            names.join(", ")
        );
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime for the store contract");
    runtime.block_on(async {
        let fixture = factory().await;
        match &fixture.store {
            Ok(store) => check(store.clone()).await,
            // Written to stderr itself, past the test harness's capture, so
            // that a skip shows even though the test passes.
            Err(reason) => {
                let _ = writeln!(std::io::stderr(), "SKIPPED: {behaviour}: {reason}");
            }
        }
        drop(fixture);
    });
}

/// The names of every behaviour, in the order they are listed.
///
/// ```
/// use mcp_tasks_runtime::store::testing;
///
/// assert!(testing::behaviours().any(|name| name == "terminal_states_never_change"));
/// ```
pub fn behaviours() -> impl Iterator<Item = &'static str> {
    BEHAVIOURS.iter().map(|(name, _)| *name)
}

type Behaviour = fn(Arc<dyn Store>) -> Pin<Box<dyn Future<Output = ()>>>;

crate::store_contract_tests!(@names [@table]);

/// One `#[test]` per behaviour of the [store contract](crate::store::testing),
/// each running it against a fresh store from `factory`.
///
/// `factory` is an expression for something you can call with no
/// arguments to get a future of a [`Fixture`](crate::store::testing::Fixture):
/// an async fn's path, or an async closure. It is evaluated once per test.
/// The tests are plain `#[test]` fns named after the behaviours; to run the
/// contract against two stores in one file, invoke the macro in two modules.
/// (The arms that start with `@` are the macro's own plumbing.)
///
/// ```
/// use mcp_tasks_runtime::store::{MemoryStore, testing::Fixture};
///
/// mod memory {
///     use super::*;
///     mcp_tasks_runtime::store_contract_tests!(|| async { Fixture::new(MemoryStore::new()) });
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! store_contract_tests {
    // The one list of behaviours, handed to the arm named in brackets.
    (@names [$($arm:tt)*]) => {
        $crate::store_contract_tests!($($arm)*
            create_get_round_trip,
            create_refuses_an_existing_id,
            concurrent_creates_fail_only_the_duplicate,
            journal_is_ordered_and_keeps_the_first_entry,
            journal_of_a_missing_task,
            status_message,
            park_and_sleep,
            request_cancel_on_a_running_task,
            request_cancel_on_parked_and_sleeping_tasks,
            park_or_sleep_after_a_cancel_request_cancels,
            finishing_transitions,
            terminal_states_never_change,
            updated_at_never_goes_back,
            transition_of_a_missing_task,
            answer_ignores_unknown_keys,
            partial_then_full_answer,
            answer_on_working_or_terminal_task_is_ignored,
            concurrent_answers_to_one_key_accept_exactly_one,
            concurrent_answers_to_different_keys_all_land,
            unfinished_lists_working_and_input_required,
            purge_deletes_expired_tasks_and_their_journals_only,
            next_expiry_is_the_earliest_deadline,
            create_with_journal_lands_task_and_journal_together,
            version_starts_at_zero,
            version_survives_a_round_trip,
            version_counts_each_change_once,
            refused_changes_leave_the_version,
            list_pages_a_principals_tasks_in_creation_order,
            sessions_round_trip_and_are_forgotten,
            purge_deletes_stale_sessions_only,
            claim_takes_a_runnable_task_no_live_lease_holds,
            claim_moves_the_fence_and_refuses_the_old_holder,
            fenced_append_keeps_the_first_entry_and_says_so,
            renew_extends_live_leases_and_drops_lapsed_ones,
            release_frees_an_instances_tasks,
            claimable_lists_due_unheld_working_tasks_oldest_first,
            park_sleep_and_finish_release_the_lease,
        );
    };
    // Inside the kit: the table `run` looks behaviours up in.
    (@table $($name:ident,)+) => {
        /// Every behaviour, by name.
        const BEHAVIOURS: &[(&str, Behaviour)] = &[
            $((::core::stringify!($name), |store| ::std::boxed::Box::pin($name(store)))),+
        ];
    };
    (@tests $factory:expr; $($name:ident,)+) => {
        $(
            #[test]
            fn $name() {
                $crate::store::testing::run(::core::stringify!($name), $factory);
            }
        )+
    };
    ($factory:expr $(,)?) => {
        $crate::store_contract_tests!(@names [@tests $factory;]);
    };
}

// ---------------------------------------------------------------------------
// Builders.

const T0: i64 = 1_700_000_000_000;

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

/// A plain working task with every optional field empty.
fn task(id: &str) -> TaskRecord {
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
/// use mcp_tasks_runtime::store::{MemoryStore, Store, testing::full_task};
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

fn pending(key: &str, position: u32) -> PendingInput {
    PendingInput {
        key: key.to_owned(),
        position,
        kind: StepKind::Ask,
        name: format!("Approval{position}"),
        request: InputRequest::Form(FormRequest {
            message: format!("go {key}?"),
            requested_schema: obj(json!({"type": "object"})),
        }),
    }
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
fn accept(content: impl Serialize) -> Value {
    json!({"action": "accept", "content": {"value": content}})
}

fn with(id: &str, f: impl FnOnce(&mut TaskRecord)) -> TaskRecord {
    let mut t = task(id);
    f(&mut t);
    t
}

/// A task parked on `keys`, at positions 10, 11, …
fn parked(id: &str, keys: &[&str]) -> TaskRecord {
    with(id, |t| {
        t.status = TaskStatus::InputRequired;
        t.pending = keys
            .iter()
            .zip(10..)
            .map(|(k, position)| pending(k, position))
            .collect();
    })
}

const ALL_STATUSES: [TaskStatus; 5] = [
    TaskStatus::Working,
    TaskStatus::InputRequired,
    TaskStatus::Completed,
    TaskStatus::Failed,
    TaskStatus::Cancelled,
];

const TERMINAL: [TaskStatus; 3] = [
    TaskStatus::Completed,
    TaskStatus::Failed,
    TaskStatus::Cancelled,
];

fn every_transition() -> Vec<Transition> {
    vec![
        Transition::StatusMessage("something new".into()),
        Transition::Park(vec![pending("late", 1)]),
        Transition::Sleep { wake_at_ms: T0 + 1 },
        Transition::RequestCancel,
        Transition::Complete(obj(json!({"content": []}))),
        Transition::Fail(RpcError::internal("late")),
        Transition::Cancel,
    ]
}

const CANCELLED_MESSAGE: &str = "The task was cancelled.";
const COMPLETED_MESSAGE: &str = "The task completed.";

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

fn store_error<T: std::fmt::Debug>(r: Result<T>) -> String {
    match r {
        Err(Error::Store(e)) => e.to_string(),
        other => panic!("expected a store error, got {other:?}"),
    }
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

// ---------------------------------------------------------------------------
// Create and get.

async fn create_get_round_trip(store: Arc<dyn Store>) {
    let full = full_task("full");
    create(&store, &full).await;
    assert_eq!(store.get("full").await.unwrap(), Some(full));

    let plain = task("plain");
    create(&store, &plain).await;
    assert_eq!(store.get("plain").await.unwrap(), Some(plain));

    for status in ALL_STATUSES {
        let t = with(status.as_str(), |t| {
            t.status = status;
            t.created_at_ms = -5; // before 1970 is still a time
            t.updated_at_ms = i64::MAX;
            t.ttl_ms = Some(0);
        });
        create(&store, &t).await;
        assert_eq!(get(&store, status.as_str()).await, t);
    }

    assert_eq!(store.get("missing").await.unwrap(), None);
    assert_eq!(store.get("").await.unwrap(), None);
}

async fn create_refuses_an_existing_id(store: Arc<dyn Store>) {
    let first = task("dup");
    create(&store, &first).await;
    let e = entry(0, StepKind::Checkpoint, "a", json!(1));
    store.append("dup", e.clone(), 0).await.unwrap();

    let second = with("dup", |t| t.tool = "other".into());
    let message = store_error(store.create(second).await);
    assert!(message.contains("dup"), "{message}");

    assert_eq!(get(&store, "dup").await, first);
    assert_eq!(store.journal("dup").await.unwrap(), vec![e]);
}

async fn concurrent_creates_fail_only_the_duplicate(store: Arc<dyn Store>) {
    create(&store, &task("taken")).await;
    let mut calls = Vec::new();
    for i in 0..100 {
        let id = if i == 50 {
            "taken".to_owned()
        } else {
            format!("new-{i}")
        };
        let store = store.clone();
        calls.push(tokio::spawn(async move {
            (
                id.clone(),
                store.create(with(&id, |t| t.tool = "mine".into())).await,
            )
        }));
    }
    let mut failed = Vec::new();
    for call in calls {
        let (id, r) = call.await.unwrap();
        if r.is_err() {
            failed.push(id);
        }
    }
    assert_eq!(failed, ["taken"]);
    assert_eq!(get(&store, "taken").await.tool, "deploy");
    for i in (0..100).filter(|i| *i != 50) {
        assert_eq!(get(&store, &format!("new-{i}")).await.tool, "mine");
    }
}

// ---------------------------------------------------------------------------
// Journal.

async fn journal_is_ordered_and_keeps_the_first_entry(store: Arc<dyn Store>) {
    create(&store, &task("a")).await;
    create(&store, &task("b")).await;
    let e2 = entry(2, StepKind::Sleep, "sleep", json!(T0 + 10));
    let e0 = entry(0, StepKind::Checkpoint, "fetch", json!({"rows": [1, 2, 3]}));
    let e1 = entry(1, StepKind::Ask, "Approval", json!({"action": "accept"}));
    for e in [&e2, &e0, &e1] {
        store.append("a", e.clone(), 0).await.unwrap();
    }
    assert_eq!(
        store.journal("a").await.unwrap(),
        vec![e0.clone(), e1.clone(), e2.clone()]
    );

    // A replayed step records again at the same position: the first stays.
    store
        .append(
            "a",
            entry(1, StepKind::Checkpoint, "other", json!("second")),
            0,
        )
        .await
        .unwrap();
    assert_eq!(
        store.journal("a").await.unwrap(),
        vec![e0.clone(), e1.clone(), e2.clone()]
    );

    // Every kind, every JSON shape and the largest position round-trip.
    let kinds = [
        StepKind::Checkpoint,
        StepKind::Ask,
        StepKind::Sample,
        StepKind::Roots,
        StepKind::Now,
        StepKind::Uuid,
        StepKind::Sleep,
    ];
    let values = [
        json!(null),
        json!(false),
        json!(-1.5),
        json!("ü ✓"),
        json!([]),
        json!({"k": [null]}),
        json!(u64::MAX),
    ];
    let mut expected = vec![e0, e1, e2];
    for (i, (kind, value)) in kinds.into_iter().zip(values).enumerate() {
        let e = entry(3 + i as u32, kind, &format!("step {i}"), value);
        store.append("a", e.clone(), 0).await.unwrap();
        expected.push(e);
    }
    let last = entry(u32::MAX, StepKind::Uuid, "id", json!("0f0e"));
    store.append("a", last.clone(), 0).await.unwrap();
    expected.push(last);
    assert_eq!(store.journal("a").await.unwrap(), expected);

    // Journals do not mix.
    let b0 = entry(0, StepKind::Now, "now", json!(T0));
    store.append("b", b0.clone(), 0).await.unwrap();
    assert_eq!(store.journal("b").await.unwrap(), vec![b0]);
    assert_eq!(store.journal("a").await.unwrap(), expected);
}

async fn journal_of_a_missing_task(store: Arc<dyn Store>) {
    assert_eq!(store.journal("ghost").await.unwrap(), vec![]);
    // An append for a task that is gone is dropped, not an error.
    store
        .append("ghost", entry(0, StepKind::Checkpoint, "x", json!(1)), 0)
        .await
        .unwrap();
    assert_eq!(store.journal("ghost").await.unwrap(), vec![]);
    create(&store, &task("ghost")).await;
    assert_eq!(store.journal("ghost").await.unwrap(), vec![]);
}

// ---------------------------------------------------------------------------
// Transitions.

/// Applies `change` and checks that the returned and the stored task both
/// equal `expected`, one version after the task before the change (the
/// version of `expected` itself is not looked at).
async fn expect_change(
    store: &Arc<dyn Store>,
    id: &str,
    change: Transition,
    now: i64,
    expected: &TaskRecord,
) {
    let before = get(store, id).await;
    let expected = TaskRecord {
        version: before.version + 1,
        ..expected.clone()
    };
    let got = store
        .transition(id, change.clone(), now, None)
        .await
        .unwrap();
    assert_eq!(got.as_ref(), Some(&expected), "{change:?}");
    assert_eq!(get(store, id).await, expected, "{change:?}");
}

/// Applies `change` and checks that nothing changed.
async fn expect_no_change(store: &Arc<dyn Store>, id: &str, change: Transition, now: i64) {
    let before = get(store, id).await;
    let got = store
        .transition(id, change.clone(), now, None)
        .await
        .unwrap();
    assert_eq!(got, None, "{change:?} on {:?}", before.status);
    assert_eq!(get(store, id).await, before, "{change:?}");
}

async fn status_message(store: Arc<dyn Store>) {
    let t = task("t");
    create(&store, &t).await;
    let mut expected = t.clone();
    expected.status_message = Some("halfway".into());
    expected.updated_at_ms = T0 + 10;
    expect_change(
        &store,
        "t",
        Transition::StatusMessage("halfway".into()),
        T0 + 10,
        &expected,
    )
    .await;
    // The same message again changes nothing.
    expect_no_change(
        &store,
        "t",
        Transition::StatusMessage("halfway".into()),
        T0 + 20,
    )
    .await;

    // Parked tasks take messages too.
    let p = parked("p", &["k"]);
    create(&store, &p).await;
    let mut expected = p.clone();
    expected.status_message = Some("still waiting".into());
    expected.updated_at_ms = T0 + 1;
    expect_change(
        &store,
        "p",
        Transition::StatusMessage("still waiting".into()),
        T0 + 1,
        &expected,
    )
    .await;
}

async fn park_and_sleep(store: Arc<dyn Store>) {
    let t = task("t");
    create(&store, &t).await;

    let mut asleep = t.clone();
    asleep.wake_at_ms = Some(T0 + 5_000);
    asleep.updated_at_ms = T0 + 1;
    expect_change(
        &store,
        "t",
        Transition::Sleep {
            wake_at_ms: T0 + 5_000,
        },
        T0 + 1,
        &asleep,
    )
    .await;

    // Parking a sleeping task clears its timer.
    let requests = vec![pending("k1", 4), pending("k2", 5)];
    let mut parked = asleep.clone();
    parked.status = TaskStatus::InputRequired;
    parked.pending = requests.clone();
    parked.wake_at_ms = None;
    parked.updated_at_ms = T0 + 2;
    expect_change(&store, "t", Transition::Park(requests), T0 + 2, &parked).await;
}

async fn request_cancel_on_a_running_task(store: Arc<dyn Store>) {
    let t = task("t");
    create(&store, &t).await;
    let mut expected = t.clone();
    expected.cancel_requested = true;
    expected.updated_at_ms = T0 + 1;
    expect_change(&store, "t", Transition::RequestCancel, T0 + 1, &expected).await;
    assert_eq!(get(&store, "t").await.status, TaskStatus::Working);
    // A second request changes nothing.
    expect_no_change(&store, "t", Transition::RequestCancel, T0 + 2).await;
}

async fn request_cancel_on_parked_and_sleeping_tasks(store: Arc<dyn Store>) {
    let p = with("parked", |t| {
        t.status = TaskStatus::InputRequired;
        t.pending = vec![pending("k", 1)];
        t.status_message = Some("Waiting".into());
    });
    create(&store, &p).await;
    let mut expected = p.clone();
    expected.status = TaskStatus::Cancelled;
    expected.pending = vec![];
    expected.status_message = Some(CANCELLED_MESSAGE.into());
    expected.updated_at_ms = T0 + 1;
    expect_change(
        &store,
        "parked",
        Transition::RequestCancel,
        T0 + 1,
        &expected,
    )
    .await;

    let s = with("sleeping", |t| t.wake_at_ms = Some(T0 + 1_000));
    create(&store, &s).await;
    let mut expected = s.clone();
    expected.status = TaskStatus::Cancelled;
    expected.wake_at_ms = None;
    expected.status_message = Some(CANCELLED_MESSAGE.into());
    expected.updated_at_ms = T0 + 1;
    expect_change(
        &store,
        "sleeping",
        Transition::RequestCancel,
        T0 + 1,
        &expected,
    )
    .await;

    for status in TERMINAL {
        create(&store, &with(status.as_str(), |t| t.status = status)).await;
        expect_no_change(&store, status.as_str(), Transition::RequestCancel, T0 + 1).await;
    }

    // A timer that has fired: the task may be running again, so it is only
    // asked to stop.
    let woke = with("woke", |t| t.wake_at_ms = Some(T0));
    create(&store, &woke).await;
    let mut expected = woke.clone();
    expected.cancel_requested = true;
    expected.updated_at_ms = T0 + 1;
    expect_change(&store, "woke", Transition::RequestCancel, T0 + 1, &expected).await;
}

async fn park_or_sleep_after_a_cancel_request_cancels(store: Arc<dyn Store>) {
    for (id, change) in [
        ("park", Transition::Park(vec![pending("k", 2)])),
        ("sleep", Transition::Sleep { wake_at_ms: T0 + 9 }),
    ] {
        let t = with(id, |t| t.cancel_requested = true);
        create(&store, &t).await;
        let mut expected = t.clone();
        expected.status = TaskStatus::Cancelled;
        expected.status_message = Some(CANCELLED_MESSAGE.into());
        expected.updated_at_ms = T0 + 4;
        expect_change(&store, id, change, T0 + 4, &expected).await;
    }
}

async fn finishing_transitions(store: Arc<dyn Store>) {
    // Each finish from a running, a parked and a sleeping task.
    let starts = [
        task("run"),
        parked("park", &["k"]),
        with("sleep", |t| t.wake_at_ms = Some(T0 + 50)),
    ];
    for start in &starts {
        let result = obj(json!({"content": [{"type": "text", "text": "done"}], "isError": false}));
        let id = format!("{}-complete", start.id);
        let t = TaskRecord {
            id: id.clone(),
            status_message: Some("working on it".into()),
            ..start.clone()
        };
        create(&store, &t).await;
        let mut expected = t.clone();
        expected.status = TaskStatus::Completed;
        expected.status_message = Some(COMPLETED_MESSAGE.into());
        expected.result = Some(result.clone());
        expected.pending = vec![];
        expected.wake_at_ms = None;
        expected.updated_at_ms = T0 + 7;
        expect_change(&store, &id, Transition::Complete(result), T0 + 7, &expected).await;

        // A failure's message becomes the status message.
        let error = RpcError::internal("it broke").with_data(json!({"step": 2}));
        let id = format!("{}-fail", start.id);
        let t = TaskRecord {
            id: id.clone(),
            status_message: Some("working on it".into()),
            ..start.clone()
        };
        create(&store, &t).await;
        let mut expected = t.clone();
        expected.status = TaskStatus::Failed;
        expected.error = Some(error.clone());
        expected.status_message = Some("it broke".into());
        expected.pending = vec![];
        expected.wake_at_ms = None;
        expected.updated_at_ms = T0 + 7;
        expect_change(&store, &id, Transition::Fail(error), T0 + 7, &expected).await;

        let id = format!("{}-cancel", start.id);
        let t = TaskRecord {
            id: id.clone(),
            ..start.clone()
        };
        create(&store, &t).await;
        let mut expected = t.clone();
        expected.status = TaskStatus::Cancelled;
        expected.status_message = Some(CANCELLED_MESSAGE.into());
        expected.pending = vec![];
        expected.wake_at_ms = None;
        expected.updated_at_ms = T0 + 7;
        expect_change(&store, &id, Transition::Cancel, T0 + 7, &expected).await;
    }
}

async fn terminal_states_never_change(store: Arc<dyn Store>) {
    for status in TERMINAL {
        let t = with(status.as_str(), |t| {
            t.status = status;
            t.status_message = Some("final".into());
            t.result = Some(obj(json!({"content": []})));
        });
        create(&store, &t).await;
        for change in every_transition() {
            expect_no_change(&store, status.as_str(), change, T0 + 100).await;
        }
        assert_eq!(get(&store, status.as_str()).await, t);
    }
    // A task that reached a terminal state through the store stays there.
    create(&store, &task("done")).await;
    store
        .transition(
            "done",
            Transition::Complete(obj(json!({"content": []}))),
            T0 + 1,
            None,
        )
        .await
        .unwrap()
        .unwrap();
    for change in every_transition() {
        expect_no_change(&store, "done", change, T0 + 100).await;
    }
}

async fn updated_at_never_goes_back(store: Arc<dyn Store>) {
    let t = with("t", |t| t.updated_at_ms = T0 + 1_000);
    create(&store, &t).await;
    let mut expected = t.clone();
    expected.status_message = Some("clock skew".into());
    expect_change(
        &store,
        "t",
        Transition::StatusMessage("clock skew".into()),
        T0,
        &expected,
    )
    .await;
}

async fn transition_of_a_missing_task(store: Arc<dyn Store>) {
    for change in every_transition() {
        assert_eq!(
            store.transition("ghost", change, T0, None).await.unwrap(),
            None
        );
    }
    assert_eq!(store.get("ghost").await.unwrap(), None);
}

// ---------------------------------------------------------------------------
// Answers.

async fn answer_ignores_unknown_keys(store: Arc<dyn Store>) {
    let t = parked("t", &["k1", "k2"]);
    create(&store, &t).await;
    let a = store
        .answer("t", obj(json!({"nope": {"action": "accept"}})), T0 + 5)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a.accepted, 0);
    assert!(!a.runnable);
    assert_eq!(a.record, t);
    assert_eq!(get(&store, "t").await, t);
    assert_eq!(store.journal("t").await.unwrap(), vec![]);

    assert_eq!(
        store
            .answer("ghost", obj(json!({"k1": {"action": "accept"}})), T0)
            .await
            .unwrap(),
        None
    );
}

async fn partial_then_full_answer(store: Arc<dyn Store>) {
    let t = parked("t", &["k1", "k2"]);
    create(&store, &t).await;
    let v1 = json!({"action": "accept", "content": {"approve": true}});
    let a = store
        .answer(
            "t",
            obj(json!({"k1": v1, "unknown": {"action": "accept"}})),
            T0 + 5,
        )
        .await
        .unwrap()
        .unwrap();
    let mut expected = t.clone();
    expected.pending = vec![pending("k2", 11)];
    expected.updated_at_ms = T0 + 5;
    expected.version = 1;
    assert_eq!((a.accepted, a.runnable), (1, false));
    assert_eq!(a.record, expected);
    assert_eq!(get(&store, "t").await, expected);
    let j1 = entry(10, StepKind::Ask, "Approval10", v1);
    assert_eq!(store.journal("t").await.unwrap(), vec![j1.clone()]);

    let v2 = json!({"action": "decline"});
    let a = store
        .answer("t", obj(json!({"k2": v2})), T0 + 6)
        .await
        .unwrap()
        .unwrap();
    expected.pending = vec![];
    expected.status = TaskStatus::Working;
    expected.updated_at_ms = T0 + 6;
    expected.version = 2;
    assert_eq!((a.accepted, a.runnable), (1, true));
    assert_eq!(a.record, expected);
    assert_eq!(get(&store, "t").await, expected);
    let j2 = entry(11, StepKind::Ask, "Approval11", v2);
    assert_eq!(
        store.journal("t").await.unwrap(),
        vec![j1.clone(), j2.clone()]
    );

    // The key is answered: a late duplicate is ignored.
    let a = store
        .answer("t", obj(json!({"k1": {"action": "cancel"}})), T0 + 7)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((a.accepted, a.runnable), (0, false));
    assert_eq!(get(&store, "t").await, expected);
    assert_eq!(store.journal("t").await.unwrap(), vec![j1, j2]);
}

async fn answer_on_working_or_terminal_task_is_ignored(store: Arc<dyn Store>) {
    let mut ids = vec![];
    for status in [
        TaskStatus::Working,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ] {
        // Even with a request on record, only `input_required` takes answers.
        let t = with(status.as_str(), |t| {
            t.status = status;
            t.pending = vec![pending("k", 1)];
        });
        create(&store, &t).await;
        let a = store
            .answer(
                status.as_str(),
                obj(json!({"k": {"action": "accept"}})),
                T0 + 1,
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!((a.accepted, a.runnable), (0, false), "{status:?}");
        assert_eq!(a.record, t);
        assert_eq!(get(&store, status.as_str()).await, t);
        assert_eq!(store.journal(status.as_str()).await.unwrap(), vec![]);
        ids.push(status.as_str());
    }
    assert_eq!(ids.len(), 4);
}

async fn concurrent_answers_to_one_key_accept_exactly_one(store: Arc<dyn Store>) {
    create(&store, &parked("t", &["k"])).await;
    let calls: Vec<_> = (0..100)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let a = store
                    .answer("t", obj(json!({"k": accept(i)})), T0 + 1)
                    .await
                    .unwrap()
                    .unwrap();
                (i, a)
            })
        })
        .collect();
    let mut winners = vec![];
    for call in calls {
        let (i, a) = call.await.unwrap();
        match a.accepted {
            0 => assert!(!a.runnable),
            1 => {
                assert!(a.runnable);
                winners.push(i);
            }
            n => panic!("{n} responses accepted for one key"),
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    assert_eq!(
        store.journal("t").await.unwrap(),
        vec![entry(10, StepKind::Ask, "Approval10", accept(winners[0]))]
    );
    let t = get(&store, "t").await;
    assert_eq!(t.status, TaskStatus::Working);
    assert!(t.pending.is_empty());
    assert_eq!(t.version, 1, "only the accepted answer counts");
}

async fn concurrent_answers_to_different_keys_all_land(store: Arc<dyn Store>) {
    let keys: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    create(&store, &parked("t", &key_refs)).await;
    let calls: Vec<_> = keys
        .iter()
        .cloned()
        .map(|k| {
            let store = store.clone();
            tokio::spawn(async move {
                let response = obj(json!({ k.clone(): accept(&k) }));
                store.answer("t", response, T0 + 1).await.unwrap().unwrap()
            })
        })
        .collect();
    let mut runnable = 0;
    for call in calls {
        let a = call.await.unwrap();
        assert_eq!(a.accepted, 1);
        runnable += usize::from(a.runnable);
    }
    assert_eq!(
        runnable, 1,
        "exactly the last answer makes the task runnable"
    );
    let journal = store.journal("t").await.unwrap();
    let expected: Vec<JournalEntry> = (0..20)
        .map(|i| {
            entry(
                10 + i,
                StepKind::Ask,
                &format!("Approval{}", 10 + i),
                accept(format!("k{i}")),
            )
        })
        .collect();
    assert_eq!(journal, expected);
    let t = get(&store, "t").await;
    assert_eq!(t.status, TaskStatus::Working);
    assert_eq!(t.version, 20, "one version per accepted answer");
}

// ---------------------------------------------------------------------------
// Recovery and expiry.

async fn unfinished_lists_working_and_input_required(store: Arc<dyn Store>) {
    assert_eq!(store.unfinished().await.unwrap(), vec![]);
    let tasks = vec![
        task("running"),
        with("sleeping", |t| t.wake_at_ms = Some(T0 + 10)),
        with("cancelling", |t| t.cancel_requested = true),
        parked("parked", &["k"]),
        with("completed", |t| t.status = TaskStatus::Completed),
        with("failed", |t| t.status = TaskStatus::Failed),
        with("cancelled", |t| t.status = TaskStatus::Cancelled),
    ];
    for t in &tasks {
        create(&store, t).await;
    }
    let mut got = store.unfinished().await.unwrap();
    got.sort_by(|a, b| a.id.cmp(&b.id));
    let mut expected: Vec<TaskRecord> = tasks
        .into_iter()
        .filter(|t| !t.status.is_terminal())
        .collect();
    expected.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(got, expected);

    // Finishing one removes it from the list.
    store
        .transition("running", Transition::Cancel, T0 + 1, None)
        .await
        .unwrap()
        .unwrap();
    let ids = sorted(
        store
            .unfinished()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.id)
            .collect(),
    );
    assert_eq!(ids, ["cancelling", "parked", "sleeping"]);
}

async fn purge_deletes_expired_tasks_and_their_journals_only(store: Arc<dyn Store>) {
    let now = T0 + 2_000;
    let tasks = [
        with("expired", |t| t.ttl_ms = Some(500)),
        with("due-now", |t| t.ttl_ms = Some(2_000)), // expires exactly at `now`
        with("due-later", |t| t.ttl_ms = Some(2_001)),
        task("forever"),
        with("finished", |t| {
            t.status = TaskStatus::Completed;
            t.ttl_ms = Some(1_200);
        }),
        with("old-but-long", |t| {
            t.created_at_ms = T0 - 1_000_000;
            t.ttl_ms = Some(1_002_001);
        }),
    ];
    for t in &tasks {
        create(&store, t).await;
        for p in 0..3 {
            store
                .append(&t.id, entry(p, StepKind::Checkpoint, "s", json!(p)), 0)
                .await
                .unwrap();
        }
    }

    assert_eq!(
        store.purge_expired(T0 + 499).await.unwrap(),
        Vec::<String>::new()
    );
    let purged = sorted(store.purge_expired(now).await.unwrap());
    assert_eq!(purged, ["due-now", "expired", "finished"]);
    for id in &purged {
        assert_eq!(store.get(id).await.unwrap(), None, "{id}");
        assert_eq!(store.journal(id).await.unwrap(), vec![], "{id}");
    }
    for t in tasks.iter().filter(|t| !purged.contains(&t.id)) {
        assert_eq!(&get(&store, &t.id).await, t);
        assert_eq!(store.journal(&t.id).await.unwrap().len(), 3, "{}", t.id);
    }
    assert_eq!(
        store.purge_expired(now).await.unwrap(),
        Vec::<String>::new()
    );

    // The journal went with the task: a new task under the same id starts empty.
    create(&store, &task("expired")).await;
    assert_eq!(store.journal("expired").await.unwrap(), vec![]);

    let purged = sorted(store.purge_expired(i64::MAX).await.unwrap());
    assert_eq!(purged, ["due-later", "old-but-long"]);
    assert!(store.get("forever").await.unwrap().is_some());
}

async fn next_expiry_is_the_earliest_deadline(store: Arc<dyn Store>) {
    assert_eq!(store.next_expiry().await.unwrap(), None);
    create(&store, &task("forever")).await;
    assert_eq!(store.next_expiry().await.unwrap(), None);

    create(&store, &with("b", |t| t.ttl_ms = Some(5_000))).await;
    assert_eq!(store.next_expiry().await.unwrap(), Some(T0 + 5_000));
    create(&store, &with("a", |t| t.ttl_ms = Some(3_000))).await;
    create(&store, &with("c", |t| t.ttl_ms = Some(4_000))).await;
    // Finished tasks expire too.
    create(
        &store,
        &with("d", |t| {
            t.status = TaskStatus::Failed;
            t.created_at_ms = T0 + 3_000;
            t.ttl_ms = Some(500);
        }),
    )
    .await;
    assert_eq!(store.next_expiry().await.unwrap(), Some(T0 + 3_000));

    assert_eq!(store.purge_expired(T0 + 3_000).await.unwrap(), ["a"]);
    assert_eq!(store.next_expiry().await.unwrap(), Some(T0 + 3_500));
    assert_eq!(
        sorted(store.purge_expired(T0 + 10_000).await.unwrap()),
        ["b", "c", "d"]
    );
    assert_eq!(store.next_expiry().await.unwrap(), None);
}

/// A call that began inline carries on as a task: the task and the journal it
/// starts from land together, and a duplicate id leaves no partial journal.
async fn create_with_journal_lands_task_and_journal_together(store: Arc<dyn Store>) {
    let journal = vec![
        entry(
            0,
            StepKind::Ask,
            "Name",
            json!({"action": "accept", "content": {"name": "Ada"}}),
        ),
        entry(1, StepKind::Checkpoint, "build", json!({"id": 7})),
    ];
    store
        .create_with_journal(task("handed-off"), journal.clone())
        .await
        .unwrap();
    assert_eq!(
        store.get("handed-off").await.unwrap(),
        Some(task("handed-off"))
    );
    assert_eq!(store.journal("handed-off").await.unwrap(), journal);

    let err = store
        .create_with_journal(
            task("handed-off"),
            vec![entry(2, StepKind::Now, "now", json!(1))],
        )
        .await;
    assert!(err.is_err(), "a second task with the same id is refused");
    assert_eq!(store.journal("handed-off").await.unwrap(), journal);
}

// ---------------------------------------------------------------------------
// The version counter.

/// A new task is at version 0, and a store keeps it there until a change.
async fn version_starts_at_zero(store: Arc<dyn Store>) {
    let t = TaskRecord::new("fresh", "deploy", T0);
    assert_eq!(t.version, 0);
    create(&store, &t).await;
    assert_eq!(get(&store, "fresh").await.version, 0);
    let listed = store.unfinished().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].version, 0);
}

/// The store keeps the version it is given and the one a change makes.
async fn version_survives_a_round_trip(store: Arc<dyn Store>) {
    for version in [1, 41, i64::MAX as u64] {
        let id = format!("v{version}");
        create(&store, &with(&id, |t| t.version = version)).await;
        assert_eq!(get(&store, &id).await.version, version);
    }
    create(&store, &with("moved", |t| t.version = 7)).await;
    let after = store
        .transition(
            "moved",
            Transition::StatusMessage("on".into()),
            T0 + 1,
            None,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.version, 8);
    assert_eq!(get(&store, "moved").await.version, 8);
    let mut waiting = parked("answered", &["k"]);
    waiting.version = 3;
    create(&store, &waiting).await;
    let a = store
        .answer("answered", obj(json!({"k": accept(1)})), T0 + 1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a.record.version, 4);
    assert_eq!(get(&store, "answered").await.version, 4);
}

/// Each change is one version; an answer that accepts several responses at
/// once is one change.
async fn version_counts_each_change_once(store: Arc<dyn Store>) {
    create(&store, &task("t")).await;
    let changes = [
        Transition::StatusMessage("1".into()),
        Transition::Sleep { wake_at_ms: T0 + 1 },
        Transition::StatusMessage("2".into()),
        Transition::Park(vec![pending("a", 1), pending("b", 2), pending("c", 3)]),
    ];
    for (i, change) in changes.into_iter().enumerate() {
        let after = store
            .transition("t", change, T0, None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(after.version, i as u64 + 1);
    }
    let a = store
        .answer("t", obj(json!({"a": accept(1), "b": accept(2)})), T0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((a.accepted, a.record.version), (2, 5));
    let a = store
        .answer("t", obj(json!({"c": accept(3)})), T0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((a.accepted, a.runnable, a.record.version), (1, true, 6));
    let done = store
        .transition("t", Transition::Cancel, T0, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.version, 7);
    assert_eq!(get(&store, "t").await.version, 7);
}

/// A change that is refused, and an answer that accepts nothing, leave the
/// version where it was.
async fn refused_changes_leave_the_version(store: Arc<dyn Store>) {
    create(&store, &with("t", |t| t.version = 5)).await;
    store
        .transition("t", Transition::StatusMessage("same".into()), T0, None)
        .await
        .unwrap()
        .unwrap();
    store
        .transition("t", Transition::RequestCancel, T0, None)
        .await
        .unwrap()
        .unwrap();
    // The same message again, a second cancel request.
    for change in [
        Transition::StatusMessage("same".into()),
        Transition::RequestCancel,
    ] {
        assert_eq!(store.transition("t", change, T0, None).await.unwrap(), None);
    }
    assert_eq!(get(&store, "t").await.version, 7);

    // Answers to a task that is not waiting, or to keys it is not waiting on.
    let a = store
        .answer("t", obj(json!({"k": accept(1)})), T0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((a.accepted, a.record.version), (0, 7));
    let mut waiting = parked("p", &["k"]);
    waiting.version = 2;
    create(&store, &waiting).await;
    let a = store
        .answer(
            "p",
            obj(json!({"other": accept(1), "k": "not an object"})),
            T0,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!((a.accepted, a.record.version), (0, 2));
    assert_eq!(get(&store, "p").await.version, 2);

    // A terminal task refuses everything.
    store
        .transition("t", Transition::Cancel, T0, None)
        .await
        .unwrap()
        .unwrap();
    for change in every_transition() {
        assert_eq!(store.transition("t", change, T0, None).await.unwrap(), None);
    }
    assert_eq!(get(&store, "t").await.version, 8);
}

// ---------------------------------------------------------------------------
// Listing and sessions.

/// `list` pages through one principal's tasks (finished ones included),
/// oldest first, ties broken by id; other principals' tasks never show.
async fn list_pages_a_principals_tasks_in_creation_order(store: Arc<dyn Store>) {
    let mine = |id: &str, at: i64| {
        with(id, |t| {
            t.principal = Some("alice".into());
            t.created_at_ms = at;
        })
    };
    for t in [
        mine("c", T0 + 2),
        mine("a", T0 + 1),
        mine("b", T0 + 1),
        mine("d", T0 + 3),
    ] {
        create(&store, &t).await;
    }
    create(&store, &with("bobs", |t| t.principal = Some("bob".into()))).await;
    create(&store, &task("anon")).await;
    store
        .transition("a", Transition::Cancel, T0 + 5, None)
        .await
        .unwrap();

    let ids = |page: &[TaskRecord]| page.iter().map(|t| t.id.clone()).collect::<Vec<_>>();
    let first = store.list(Some("alice"), None, 3).await.unwrap();
    assert_eq!(ids(&first), ["a", "b", "c"]);
    assert_eq!(
        first[0].status,
        TaskStatus::Cancelled,
        "finished tasks are listed"
    );
    let cursor = ListCursor::after(&first[2]);
    let rest = store.list(Some("alice"), Some(&cursor), 3).await.unwrap();
    assert_eq!(ids(&rest), ["d"]);
    let end = ListCursor::after(&rest[0]);
    assert!(
        store
            .list(Some("alice"), Some(&end), 3)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        ids(&store.list(Some("bob"), None, 10).await.unwrap()),
        ["bobs"]
    );
    assert_eq!(ids(&store.list(None, None, 10).await.unwrap()), ["anon"]);
    assert!(
        store
            .list(Some("carol"), None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A session's state comes back as written, a later write replaces it, and
/// a deleted session is gone.
async fn sessions_round_trip_and_are_forgotten(store: Arc<dyn Store>) {
    assert_eq!(store.get_session("s1").await.unwrap(), None);
    let state = json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}});
    store.put_session("s1", state.clone(), T0).await.unwrap();
    store
        .put_session("s2", json!({"other": true}), T0)
        .await
        .unwrap();
    assert_eq!(store.get_session("s1").await.unwrap(), Some(state));
    store
        .put_session("s1", json!({"again": 1}), T0 + 1)
        .await
        .unwrap();
    assert_eq!(
        store.get_session("s1").await.unwrap(),
        Some(json!({"again": 1}))
    );
    store.delete_session("s1").await.unwrap();
    assert_eq!(store.get_session("s1").await.unwrap(), None);
    store.delete_session("s1").await.unwrap();
    assert_eq!(
        store.get_session("s2").await.unwrap(),
        Some(json!({"other": true}))
    );
}

/// The sweep deletes sessions untouched for [`SESSION_TTL`], and no others.
async fn purge_deletes_stale_sessions_only(store: Arc<dyn Store>) {
    let ttl = i64::try_from(SESSION_TTL.as_millis()).unwrap();
    store.put_session("old", json!({}), T0).await.unwrap();
    store.put_session("new", json!({}), T0 + ttl).await.unwrap();
    store.purge_expired(T0 + ttl + 1).await.unwrap();
    assert_eq!(store.get_session("old").await.unwrap(), None);
    assert_eq!(store.get_session("new").await.unwrap(), Some(json!({})));
}

// ---------------------------------------------------------------------------
// Ownership: claims, leases and fencing.

const LEASE: i64 = 10_000;

/// A working task nobody holds is claimed once: the first claim wins, and
/// the fence moves on; the claim returns the journal too.
async fn claim_takes_a_runnable_task_no_live_lease_holds(store: Arc<dyn Store>) {
    create(&store, &task("t")).await;
    store
        .append("t", entry(0, StepKind::Checkpoint, "a", json!(1)), 0)
        .await
        .unwrap();
    let (claimed, journal) = store
        .claim("t", "a", T0, T0 + LEASE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.fence, 1);
    assert_eq!(
        claimed.lease,
        Some(Lease {
            owner: "a".into(),
            expires_at_ms: T0 + LEASE
        })
    );
    assert_eq!(journal, [entry(0, StepKind::Checkpoint, "a", json!(1))]);
    assert_eq!(get(&store, "t").await, claimed);
    assert!(
        store
            .claim("t", "b", T0 + 1, T0 + LEASE)
            .await
            .unwrap()
            .is_none(),
        "a holds it"
    );
    // Parked, asleep, finished and missing tasks are not claimed.
    create(&store, &parked("p", &["k"])).await;
    create(&store, &with("s", |t| t.wake_at_ms = Some(T0 + 5))).await;
    create(&store, &with("f", |t| t.status = TaskStatus::Completed)).await;
    for id in ["p", "s", "f", "gone"] {
        assert!(
            store
                .claim(id, "a", T0, T0 + LEASE)
                .await
                .unwrap()
                .is_none(),
            "{id}"
        );
    }
    assert!(
        store
            .claim("s", "a", T0 + 5, T0 + LEASE)
            .await
            .unwrap()
            .is_some(),
        "due now"
    );
}

/// Once a lease lapses another instance claims the task, and from then on
/// the old holder's writes are refused: its appends report `Fenced` and its
/// transitions change nothing.
async fn claim_moves_the_fence_and_refuses_the_old_holder(store: Arc<dyn Store>) {
    create(&store, &task("t")).await;
    let (a, _) = store
        .claim("t", "a", T0, T0 + LEASE)
        .await
        .unwrap()
        .unwrap();
    let (b, _) = store
        .claim("t", "b", T0 + LEASE, T0 + 2 * LEASE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((a.fence, b.fence), (1, 2));
    let stale = store
        .append(
            "t",
            entry(0, StepKind::Checkpoint, "a", json!("a")),
            a.fence,
        )
        .await
        .unwrap();
    assert_eq!(stale, Appended::Fenced);
    let done = Transition::Complete(obj(json!({"content": []})));
    assert_eq!(
        store
            .transition("t", done.clone(), T0 + LEASE + 1, Some(a.fence))
            .await
            .unwrap(),
        None
    );
    assert_eq!(get(&store, "t").await.status, TaskStatus::Working);
    assert!(store.journal("t").await.unwrap().is_empty());
    // The new holder writes.
    let fresh = store
        .append(
            "t",
            entry(0, StepKind::Checkpoint, "b", json!("b")),
            b.fence,
        )
        .await
        .unwrap();
    assert_eq!(fresh, Appended::Recorded);
    let ended = store
        .transition("t", done, T0 + LEASE + 2, Some(b.fence))
        .await
        .unwrap();
    assert_eq!(ended.map(|r| r.status), Some(TaskStatus::Completed));
    // Unfenced changes (a cancel request) are not a holder's, and pass.
    create(&store, &task("u")).await;
    store.claim("u", "a", T0, T0 + LEASE).await.unwrap();
    let asked = store
        .transition("u", Transition::RequestCancel, T0 + 1, None)
        .await
        .unwrap();
    assert!(asked.is_some_and(|r| r.cancel_requested));
    // A task that is gone is fenced off too.
    let gone = store
        .append("gone", entry(0, StepKind::Checkpoint, "x", json!(0)), 1)
        .await
        .unwrap();
    assert_eq!(gone, Appended::Fenced);
}

/// A journal position keeps its first entry; a second append at it, by the
/// holder, gets the stored entry back to go on with.
async fn fenced_append_keeps_the_first_entry_and_says_so(store: Arc<dyn Store>) {
    create(&store, &task("t")).await;
    let (t, _) = store
        .claim("t", "a", T0, T0 + LEASE)
        .await
        .unwrap()
        .unwrap();
    let first = entry(3, StepKind::Checkpoint, "build", json!({"id": "b-1"}));
    let again = entry(3, StepKind::Checkpoint, "build", json!({"id": "b-2"}));
    assert_eq!(
        store.append("t", first.clone(), t.fence).await.unwrap(),
        Appended::Recorded
    );
    assert_eq!(
        store.append("t", again, t.fence).await.unwrap(),
        Appended::Kept(first.clone())
    );
    assert_eq!(store.journal("t").await.unwrap(), [first]);
}

/// `renew` extends the owner's live leases only, and names the tasks it
/// still holds with their versions; a lapsed lease is not revived.
async fn renew_extends_live_leases_and_drops_lapsed_ones(store: Arc<dyn Store>) {
    for id in ["a1", "a2", "b1"] {
        create(&store, &task(id)).await;
    }
    store.claim("a1", "a", T0, T0 + LEASE).await.unwrap();
    store.claim("a2", "a", T0, T0 + 100).await.unwrap();
    store.claim("b1", "b", T0, T0 + LEASE).await.unwrap();
    store
        .transition("a1", Transition::StatusMessage("on".into()), T0 + 1, None)
        .await
        .unwrap();
    let mut held = store.renew("a", T0 + 200, T0 + 5 * LEASE).await.unwrap();
    held.sort();
    assert_eq!(held, [("a1".to_owned(), 1)], "a2's lease had lapsed");
    assert_eq!(
        get(&store, "a1").await.lease.unwrap().expires_at_ms,
        T0 + 5 * LEASE
    );
    assert_eq!(
        get(&store, "a2").await.lease.unwrap().expires_at_ms,
        T0 + 100
    );
    assert_eq!(
        get(&store, "b1").await.lease.unwrap().expires_at_ms,
        T0 + LEASE
    );
    assert!(
        store
            .renew("nobody", T0, T0 + LEASE)
            .await
            .unwrap()
            .is_empty()
    );
}

/// `release` frees every lease of one instance at once.
async fn release_frees_an_instances_tasks(store: Arc<dyn Store>) {
    for id in ["a1", "b1"] {
        create(&store, &task(id)).await;
    }
    store.claim("a1", "a", T0, T0 + LEASE).await.unwrap();
    store.claim("b1", "b", T0, T0 + LEASE).await.unwrap();
    store.release("a").await.unwrap();
    assert_eq!(get(&store, "a1").await.lease, None);
    assert!(get(&store, "b1").await.lease.is_some());
    assert_eq!(store.claimable(T0 + 1, 10).await.unwrap(), ["a1"]);
    let (taken, _) = store
        .claim("a1", "c", T0 + 1, T0 + LEASE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(taken.fence, 2);
}

/// `claimable` lists the working tasks that are due and held by no live
/// lease, oldest first, up to the limit.
async fn claimable_lists_due_unheld_working_tasks_oldest_first(store: Arc<dyn Store>) {
    let at = |id: &str, ms: i64| with(id, |t| t.created_at_ms = ms);
    create(&store, &at("new", T0 + 3)).await;
    create(&store, &at("old", T0 + 1)).await;
    create(&store, &at("mid", T0 + 2)).await;
    create(
        &store,
        &with("asleep", |t| t.wake_at_ms = Some(T0 + 10 * LEASE)),
    )
    .await;
    create(
        &store,
        &with("awake", |t| {
            t.created_at_ms = T0 + 4;
            t.wake_at_ms = Some(T0 + 5);
        }),
    )
    .await;
    create(&store, &parked("parked", &["k"])).await;
    create(&store, &with("done", |t| t.status = TaskStatus::Failed)).await;
    create(&store, &at("held", T0)).await;
    store.claim("held", "a", T0, T0 + LEASE).await.unwrap();
    assert_eq!(
        store.claimable(T0 + 10, 10).await.unwrap(),
        ["old", "mid", "new", "awake"]
    );
    assert_eq!(store.claimable(T0 + 10, 2).await.unwrap(), ["old", "mid"]);
    // Once the lease lapses, the held task is claimable again.
    assert_eq!(store.claimable(T0 + LEASE, 1).await.unwrap(), ["held"]);
}

/// Parking, sleeping and finishing let go of the lease: such a task holds
/// no instance.
async fn park_sleep_and_finish_release_the_lease(store: Arc<dyn Store>) {
    let changes = [
        Transition::Park(vec![pending("k", 1)]),
        Transition::Sleep {
            wake_at_ms: T0 + 100,
        },
        Transition::Complete(obj(json!({"content": []}))),
        Transition::Fail(RpcError::internal("no")),
        Transition::Cancel,
    ];
    for (i, change) in changes.into_iter().enumerate() {
        let id = format!("t{i}");
        create(&store, &task(&id)).await;
        let (t, _) = store
            .claim(&id, "a", T0, T0 + LEASE)
            .await
            .unwrap()
            .unwrap();
        let after = store
            .transition(&id, change, T0 + 1, Some(t.fence))
            .await
            .unwrap();
        assert_eq!(after.map(|r| r.lease), Some(None), "{id}");
        assert_eq!(get(&store, &id).await.lease, None, "{id}");
    }
}
