//! Faults the engine survives: a row the store cannot read is set aside
//! (its task fails with the reason) while the other tasks keep being served;
//! a run that gives up on a store error (its claim landed with the answer
//! lost, or its writes kept failing for longer than the engine retries them)
//! does not leave its task held by this instance forever. (Store writes that
//! fail and recover: see `postgres_contract.rs`, where the server really drops
//! the connections; and the simulation test.)

use std::{
    collections::HashMap,
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use async_trait::async_trait;
use mcp_tasks_runtime::{
    Engine, Result, ToolError, checkpoint,
    store::{
        Answered, Appended, Change, JournalEntry, ListCursor, MemoryStore, SqliteStore, Store,
        StoreError, TaskRecord, TaskStatus, Transition,
    },
    task_tool,
    tool::Registry,
};
use serde_json::{Map, Value};

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

/// How the first claim of each task goes wrong in a [`Flaky`] store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FirstClaim {
    /// It lands, and its answer is lost: the caller gets an error.
    LandsAndFails,
    /// It succeeds, and then every write under it fails (nothing lands).
    WritesFail,
}

/// A memory store where the first claim of each task goes wrong; every
/// later claim, and the writes under it, work.
#[derive(Debug)]
struct Flaky {
    inner: MemoryStore,
    first: FirstClaim,
    /// The fence of each task's first claim.
    first_fences: Mutex<HashMap<String, u64>>,
    /// Writes made to fail.
    failed: AtomicUsize,
}

impl Flaky {
    fn new(first: FirstClaim) -> Self {
        Self {
            inner: MemoryStore::new(),
            first,
            first_fences: Mutex::default(),
            failed: AtomicUsize::new(0),
        }
    }

    fn fail<T>(&self, what: &str) -> Result<T> {
        self.failed.fetch_add(1, Ordering::SeqCst);
        Err(StoreError::new(format!("injected fault: could not {what}")).into())
    }

    /// Whether a write by the holder of `fence` is made to fail.
    fn refused(&self, id: &str, fence: Option<u64>) -> bool {
        self.first == FirstClaim::WritesFail
            && fence.is_some()
            && self.first_fences.lock().unwrap().get(id).copied() == fence
    }
}

#[async_trait]
impl Store for Flaky {
    async fn create(&self, task: TaskRecord) -> Result<()> {
        self.inner.create(task).await
    }

    async fn create_with_journal(
        &self,
        task: TaskRecord,
        journal: Vec<JournalEntry>,
    ) -> Result<()> {
        self.inner.create_with_journal(task, journal).await
    }

    async fn get(&self, id: &str) -> Result<Option<TaskRecord>> {
        self.inner.get(id).await
    }

    async fn versions(&self, ids: &[String]) -> Result<Vec<(String, u64)>> {
        self.inner.versions(ids).await
    }

    async fn journal(&self, id: &str) -> Result<Vec<JournalEntry>> {
        self.inner.journal(id).await
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
        if first && self.first == FirstClaim::LandsAndFails {
            return self.fail("claim");
        }
        Ok(claimed)
    }

    async fn renew(&self, owner: &str, now_ms: i64, until_ms: i64) -> Result<Vec<(String, u64)>> {
        self.inner.renew(owner, now_ms, until_ms).await
    }

    async fn release(&self, owner: &str) -> Result<()> {
        self.inner.release(owner).await
    }

    async fn claimable(&self, now_ms: i64, limit: usize) -> Result<Vec<String>> {
        self.inner.claimable(now_ms, limit).await
    }

    async fn answer(
        &self,
        id: &str,
        responses: Map<String, Value>,
        now_ms: i64,
    ) -> Result<Option<Answered>> {
        self.inner.answer(id, responses, now_ms).await
    }

    async fn time_out(&self, id: &str, now_ms: i64) -> Result<Option<Answered>> {
        self.inner.time_out(id, now_ms).await
    }

    async fn overdue(&self, now_ms: i64, limit: usize) -> Result<Vec<String>> {
        self.inner.overdue(now_ms, limit).await
    }

    async fn unfinished(&self) -> Result<Vec<TaskRecord>> {
        self.inner.unfinished().await
    }

    async fn purge_expired(&self, now_ms: i64) -> Result<Vec<String>> {
        self.inner.purge_expired(now_ms).await
    }

    async fn next_expiry(&self) -> Result<Option<i64>> {
        self.inner.next_expiry().await
    }

    async fn list(
        &self,
        principal: Option<&str>,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>> {
        self.inner.list(principal, after, limit).await
    }

    async fn list_all(&self, after: Option<&ListCursor>, limit: usize) -> Result<Vec<TaskRecord>> {
        self.inner.list_all(after, limit).await
    }

    async fn count_unfinished(&self, principal: Option<&str>) -> Result<usize> {
        self.inner.count_unfinished(principal).await
    }

    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<Change>> {
        self.inner.changes()
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
    let store = std::sync::Arc::new(store);
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
    (ended, store.failed.load(Ordering::SeqCst))
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
    let (ended, failed) = run_left_tasks(Flaky::new(FirstClaim::LandsAndFails)).await;
    assert_eq!(failed, 2, "one lost claim per task");
    assert_greeted(&ended);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_writes_failed_past_the_retries_runs_again() {
    // Every write of the first run fails for longer than the engine retries
    // it (its step's value for `stepped`, its end for `plain`): the run
    // stops, still holding the lease, and the task runs again.
    let (ended, failed) = run_left_tasks(Flaky::new(FirstClaim::WritesFail)).await;
    assert!(failed >= 2, "{failed} writes failed");
    assert_greeted(&ended);
}
