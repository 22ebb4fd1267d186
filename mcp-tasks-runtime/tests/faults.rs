//! Faults the engine survives: a row the store cannot read is set aside
//! (its task fails with the reason) while the other tasks keep being served;
//! a run that gives up on a store error (its claim landed with the answer
//! lost, or its writes kept failing for longer than the engine retries them)
//! does not leave its task held by this instance forever, and neither does a
//! run that finds its lease lapsed while the store still holds it for this
//! instance. (Store writes that
//! fail and recover: see `postgres_contract.rs`, where the server really drops
//! the connections; and the simulation test.)

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use async_trait::async_trait;
use mcp_tasks_runtime::{
    Engine, Result, ToolError, checkpoint,
    store::{
        Appended, JournalEntry, MemoryStore, SqliteStore, Store, StoreError, TaskRecord,
        TaskStatus, Transition,
    },
    task_tool,
    tool::Registry,
};
use mcp_tasks_store_contract::{Forward, Forwarded};

/// Says hello.
#[task_tool]
async fn hello(name: String) -> String {
    format!("Hello, {name}!")
}

/// A working task of `hello`, as a process that died would have left it.
fn working(id: &str) -> TaskRecord {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let mut t = TaskRecord::new(id, "hello", i64::try_from(now).unwrap());
    t.arguments.insert("name".into(), serde_json::json!(id));
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_row_is_set_aside_and_the_rest_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    // Two working tasks left by an earlier process; one row gets damaged.
    let store = SqliteStore::open(&path).await.unwrap();
    store.create(working("good")).await.unwrap();
    store.create(working("bad")).await.unwrap();
    drop(store);
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute(
        "UPDATE tasks SET arguments = '{not json' WHERE id = 'bad'",
        [],
    )
    .unwrap();
    drop(c);

    let engine = Engine::builder(SqliteStore::open(&path).await.unwrap())
        .registry(Registry::new().with(hello_tool()).unwrap())
        .scan_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let good = engine
        .wait("good", None, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(good.status, TaskStatus::Completed, "{good:#?}");
    assert_eq!(good.result.unwrap()["content"][0]["text"], "Hello, good!");

    let begun = Instant::now();
    let bad = loop {
        match engine.get("bad", None).await {
            Ok(t) if t.status == TaskStatus::Failed => break t,
            _ => {}
        }
        assert!(begun.elapsed() < Duration::from_secs(10), "not set aside");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let message = bad.status_message.unwrap();
    assert!(
        message.contains("cannot be read") && message.contains("arguments"),
        "{message}"
    );
    assert_eq!(bad.error.unwrap().message, message);
    assert!(bad.arguments.is_empty());
}

/// What goes wrong in a [`Flaky`] store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The first claim of each task lands, and its answer is lost: the
    /// caller gets an error.
    LandsAndFails,
    /// The first claim of each task succeeds, and then every write under it
    /// fails (nothing lands).
    WritesFail,
    /// Nothing fails, but each renewal extends the leases a minute past what
    /// the engine asked: the store holds a task for the instance after the
    /// instance's own measure of the lease has run out.
    LongerRenewals,
}

/// A memory store where one [`Fault`] is made to happen; everything else
/// (every later claim, and the writes under it) works.
#[derive(Debug)]
struct Flaky {
    inner: Arc<MemoryStore>,
    fault: Fault,
    /// The fence of each task's first claim.
    first_fences: Mutex<HashMap<String, u64>>,
    /// Writes made to fail.
    failed: AtomicUsize,
    /// Renewals that landed.
    renewed: AtomicUsize,
    /// Held by a test, it keeps each renewal's answer (not its write) from
    /// the engine.
    renewal_answers: tokio::sync::Mutex<()>,
}

impl Flaky {
    fn new(fault: Fault) -> Self {
        Self {
            inner: Arc::default(),
            fault,
            first_fences: Mutex::default(),
            failed: AtomicUsize::new(0),
            renewed: AtomicUsize::new(0),
            renewal_answers: tokio::sync::Mutex::new(()),
        }
    }

    fn fail<T>(&self, what: &str) -> Result<T> {
        self.failed.fetch_add(1, Ordering::SeqCst);
        Err(StoreError::new(format!("injected fault: could not {what}")).into())
    }

    /// Whether a write by the holder of `fence` is made to fail.
    fn refused(&self, id: &str, fence: Option<u64>) -> bool {
        self.fault == Fault::WritesFail
            && fence.is_some()
            && self.first_fences.lock().unwrap().get(id).copied() == fence
    }
}

#[async_trait]
impl Forward for Flaky {
    type Inner = MemoryStore;

    fn inner(&self) -> &Arc<MemoryStore> {
        &self.inner
    }

    async fn append(&self, id: &str, entry: JournalEntry, fence: u64) -> Result<Appended> {
        if self.refused(id, Some(fence)) {
            return self.fail("append");
        }
        self.inner.append(id, entry, fence).await
    }

    async fn transition(
        &self,
        id: &str,
        change: Transition,
        now_ms: i64,
        fence: Option<u64>,
    ) -> Result<Option<TaskRecord>> {
        if self.refused(id, fence) {
            return self.fail("transition");
        }
        self.inner.transition(id, change, now_ms, fence).await
    }

    async fn transition_journaled(
        &self,
        id: &str,
        entries: Vec<JournalEntry>,
        change: Transition,
        now_ms: i64,
        fence: u64,
    ) -> Result<Option<TaskRecord>> {
        if self.refused(id, Some(fence)) {
            return self.fail("transition");
        }
        let inner = &self.inner;
        inner
            .transition_journaled(id, entries, change, now_ms, fence)
            .await
    }

    async fn claim(
        &self,
        id: &str,
        owner: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<Option<(TaskRecord, Vec<JournalEntry>)>> {
        let claimed = self.inner.claim(id, owner, now_ms, until_ms).await?;
        let Some((record, _)) = &claimed else {
            return Ok(claimed);
        };
        let first = {
            let mut fences = self.first_fences.lock().unwrap();
            let first = !fences.contains_key(id);
            fences.entry(id.to_owned()).or_insert(record.fence);
            first
        };
        if first && self.fault == Fault::LandsAndFails {
            return self.fail("claim");
        }
        Ok(claimed)
    }

    async fn renew(&self, owner: &str, now_ms: i64, until_ms: i64) -> Result<Vec<(String, u64)>> {
        let until_ms = if self.fault == Fault::LongerRenewals {
            until_ms + 60_000
        } else {
            until_ms
        };
        let held = self.inner.renew(owner, now_ms, until_ms).await?;
        self.renewed.fetch_add(1, Ordering::SeqCst);
        drop(self.renewal_answers.lock().await);
        Ok(held)
    }
}

/// Greets, after a journaled step.
#[task_tool]
async fn greet(name: String) -> Result<String, ToolError> {
    let greeting: String =
        checkpoint("greeting", || async { Ok::<_, ToolError>("Hi".to_owned()) }).await?;
    Ok(format!("{greeting}, {name}!"))
}

/// Runs `hello` and `greet` tasks, left `working` by a process that died, on
/// an engine over `store` with a short lease, and waits for them to end.
async fn run_left_tasks(store: Flaky) -> (Vec<TaskRecord>, usize) {
    let store = Arc::new(Forwarded(store));
    let mut left = working("plain");
    let mut stepped = working("stepped");
    stepped.tool = "greet".into();
    for task in [&mut left, &mut stepped] {
        store.create(task.clone()).await.unwrap();
    }
    let engine = Engine::builder_arc(store.clone())
        .registry(
            Registry::new()
                .with(hello_tool())
                .unwrap()
                .with(greet_tool())
                .unwrap(),
        )
        .lease(Duration::from_millis(300))
        .scan_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let mut ended = Vec::new();
    for id in ["plain", "stepped"] {
        ended.push(
            engine
                .wait(id, None, Duration::from_secs(20))
                .await
                .unwrap(),
        );
    }
    (ended, store.0.failed.load(Ordering::SeqCst))
}

fn assert_greeted(ended: &[TaskRecord]) {
    let texts: Vec<_> = ended
        .iter()
        .map(|t| {
            assert_eq!(t.status, TaskStatus::Completed, "{t:#?}");
            t.result.as_ref().unwrap()["content"][0]["text"].clone()
        })
        .collect();
    assert_eq!(texts, ["Hello, plain!", "Hi, stepped!"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_claim_landed_with_its_answer_lost_runs_again() {
    // The claim leases the task to this instance, but its run never
    // starts: the instance must not keep renewing a lease no run uses.
    let (ended, failed) = run_left_tasks(Flaky::new(Fault::LandsAndFails)).await;
    assert_eq!(failed, 2, "one lost claim per task");
    assert_greeted(&ended);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_writes_failed_past_the_retries_runs_again() {
    // Every write of the first run fails for longer than the engine retries
    // it (its step's value for `stepped`, its end for `plain`): the run
    // stops, still holding the lease, and the task runs again.
    let (ended, failed) = run_left_tasks(Flaky::new(Fault::WritesFail)).await;
    assert!(failed >= 2, "{failed} writes failed");
    assert_greeted(&ended);
}

/// Starts its step once, and waits in it for `GO`; a second run's step
/// returns at once.
#[task_tool]
async fn slow_greet(name: String) -> Result<String, ToolError> {
    let greeting: String = checkpoint("greeting", || async {
        if SLOW_STARTS.fetch_add(1, Ordering::SeqCst) == 0 {
            GO.notified().await;
        }
        Ok::<_, ToolError>("Hi".to_owned())
    })
    .await?;
    Ok(format!("{greeting}, {name}!"))
}

/// How many times `slow_greet`'s step started.
static SLOW_STARTS: AtomicUsize = AtomicUsize::new(0);
/// Wakes `slow_greet`'s first step.
static GO: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Waits for `what` to hold, for at most 20 s.
async fn until(what: &str, holds: impl Fn() -> bool) {
    let begun = Instant::now();
    while !holds() {
        assert!(begun.elapsed() < Duration::from_secs(20), "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_finds_its_lease_lapsed_while_the_store_holds_it_runs_again() {
    // The instance's measure of its lease runs out inside a step (the
    // renewal's answer came late), while the store, whose renewal landed,
    // still holds the task for this instance: the run stops with its step
    // dropped, and the task must not stay held with no run, its lease kept
    // live by the renewals.
    let store = Arc::new(Forwarded(Flaky::new(Fault::LongerRenewals)));
    let mut task = working("lapsed");
    task.tool = "slow_greet".into();
    store.create(task).await.unwrap();
    let clock = mcp_tasks_runtime::testing::TestClock::new();
    let engine = Engine::builder_arc(store.clone())
        .registry(Registry::new().with(slow_greet_tool()).unwrap())
        .clock(&clock)
        .lease(Duration::from_secs(1))
        .scan_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    until("the step starts", || {
        SLOW_STARTS.load(Ordering::SeqCst) == 1
    })
    .await;
    // A renewal lands after the claim: the store holds the task for a
    // minute more.
    let renewed = store.0.renewed.load(Ordering::SeqCst);
    until("a renewal lands", || {
        store.0.renewed.load(Ordering::SeqCst) > renewed
    })
    .await;
    let answers = store.0.renewal_answers.lock().await;
    // The engine's measure runs out; the store's does not.
    engine.advance_clock(Duration::from_millis(1_500));
    GO.notify_one();
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(answers);

    let ended = engine
        .wait("lapsed", None, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(ended.status, TaskStatus::Completed, "{ended:#?}");
    assert_eq!(ended.result.unwrap()["content"][0]["text"], "Hi, lapsed!");
    assert_eq!(
        SLOW_STARTS.load(Ordering::SeqCst),
        2,
        "the dropped step ran again, once"
    );
}
