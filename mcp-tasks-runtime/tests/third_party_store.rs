//! Stores written outside the crate, on its public API only, pass the store
//! contract kits.
//!
//! - `Delegating` wraps a `MemoryStore` in the kit's forwarding store,
//!   which forwards every method, its front door included.
//! - `MapStore` keeps its own rows and follows the public state machine,
//!   `TaskRecord::apply`, `TaskRecord::answer` and `TaskRecord::time_out`,
//!   for `transition`, `answer` and `time_out`: a store with no access to
//!   the runtime's internals can be correct. It implements the required
//!   methods only (the others are the trait's), and keeps tasks only: no
//!   front-door state.
//! - `MapFrontDoor` is front-door state of its own (spent tokens,
//!   sessions), for an engine over `MapStore`.
//!
//! An engine over `MapStore` serves tasks; its front door is in memory
//! unless one is given.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use async_trait::async_trait;
use mcp_tasks_runtime::{
    Engine, Result, ToolError, checkpoint,
    engine::{Call, CallOutcome},
    store::{
        Answered, Appended, FrontDoorStore, JournalEntry, ListCursor, MemoryStore, SESSION_TTL,
        Store, StoreError, TaskRecord, TaskStatus, Transition,
    },
    task_tool,
    tool::Registry,
};
use mcp_tasks_store_contract::{Fixture, Forwarded};
use serde_json::{Map, Value};

/// Forwards every call to a `MemoryStore`, its front door included.
type Delegating = Forwarded<Arc<MemoryStore>>;

/// Each task's row and its journal (ordered by position).
type Rows = HashMap<String, (TaskRecord, Vec<JournalEntry>)>;

/// A store of its own: rows in a map behind one lock, and the runtime's
/// state machine for every change. It implements the twelve required
/// methods; the others (`create_with_journal`, `claimable`, `overdue`,
/// `unfinished`, `next_expiry`, `list`, `count_unfinished`, ...) are the
/// trait's.
#[derive(Debug, Default)]
struct MapStore {
    rows: Mutex<Rows>,
}

impl MapStore {
    fn rows(&self) -> MutexGuard<'_, Rows> {
        // Every change is made on a copy and written back whole, so the map
        // behind a poisoned lock is consistent.
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Journals `entry` unless its position is taken: the first entry stays.
fn journal_once(journal: &mut Vec<JournalEntry>, entry: JournalEntry) -> Appended {
    match journal.binary_search_by_key(&entry.position, |e| e.position) {
        Ok(at) => Appended::Kept(journal[at].clone()),
        Err(at) => {
            journal.insert(at, entry);
            Appended::Recorded
        }
    }
}

#[async_trait]
impl Store for MapStore {
    async fn create(&self, task: TaskRecord) -> Result<()> {
        let mut rows = self.rows();
        if rows.contains_key(&task.id) {
            let context = format!("could not create task {}: it already exists", task.id);
            return Err(StoreError::new(context).into());
        }
        rows.insert(task.id.clone(), (task, Vec::new()));
        Ok(())
    }

    async fn get(&self, id: &str) -> Result<Option<TaskRecord>> {
        Ok(self.rows().get(id).map(|(task, _)| task.clone()))
    }

    async fn journal(&self, id: &str) -> Result<Vec<JournalEntry>> {
        Ok(self
            .rows()
            .get(id)
            .map(|(_, journal)| journal.clone())
            .unwrap_or_default())
    }

    async fn append(&self, id: &str, entry: JournalEntry, fence: u64) -> Result<Appended> {
        let mut rows = self.rows();
        let Some((_, journal)) = rows.get_mut(id).filter(|(task, _)| task.fence == fence) else {
            return Ok(Appended::Fenced);
        };
        Ok(journal_once(journal, entry))
    }

    async fn transition(
        &self,
        id: &str,
        change: Transition,
        now_ms: i64,
        fence: Option<u64>,
    ) -> Result<Option<TaskRecord>> {
        let mut rows = self.rows();
        let Some((task, _)) = rows.get_mut(id) else {
            return Ok(None);
        };
        let mut next = task.clone();
        if !next.apply_fenced(change, now_ms, fence) {
            return Ok(None);
        }
        *task = next.clone();
        Ok(Some(next))
    }

    async fn claim(
        &self,
        id: &str,
        owner: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<Option<(TaskRecord, Vec<JournalEntry>)>> {
        let mut rows = self.rows();
        let Some((task, journal)) = rows.get_mut(id) else {
            return Ok(None);
        };
        Ok(task
            .claim(owner, now_ms, until_ms)
            .then(|| (task.clone(), journal.clone())))
    }

    async fn renew(&self, owner: &str, now_ms: i64, until_ms: i64) -> Result<Vec<(String, u64)>> {
        let mut held = Vec::new();
        for (task, _) in self.rows().values_mut() {
            if let Some(lease) = task
                .lease
                .as_mut()
                .filter(|l| l.owner == owner && l.expires_at_ms > now_ms)
            {
                // A renewal never shortens a lease (one made before a claim
                // that landed first would).
                lease.expires_at_ms = lease.expires_at_ms.max(until_ms);
                held.push((task.id.clone(), task.version));
            }
        }
        Ok(held)
    }

    async fn release(&self, owner: &str) -> Result<()> {
        for (task, _) in self.rows().values_mut() {
            if task.lease.as_ref().is_some_and(|l| l.owner == owner) {
                task.lease = None;
            }
        }
        Ok(())
    }

    async fn answer(
        &self,
        id: &str,
        responses: Map<String, Value>,
        now_ms: i64,
    ) -> Result<Option<Answered>> {
        let mut rows = self.rows();
        let Some((task, journal)) = rows.get_mut(id) else {
            return Ok(None);
        };
        let mut record = task.clone();
        let (entries, runnable) = record.answer(responses, now_ms);
        let accepted = entries.len();
        for entry in entries {
            journal_once(journal, entry);
        }
        *task = record.clone();
        Ok(Some(Answered {
            record,
            accepted,
            runnable,
        }))
    }

    async fn time_out(&self, id: &str, now_ms: i64) -> Result<Option<Answered>> {
        let mut rows = self.rows();
        let Some((task, journal)) = rows.get_mut(id) else {
            return Ok(None);
        };
        let mut record = task.clone();
        let (entries, runnable) = record.time_out(now_ms);
        let accepted = entries.len();
        for entry in entries {
            journal_once(journal, entry);
        }
        *task = record.clone();
        Ok(Some(Answered {
            record,
            accepted,
            runnable,
        }))
    }

    async fn purge_expired(&self, now_ms: i64, limit: usize) -> Result<Vec<String>> {
        let mut rows = self.rows();
        let mut expired: Vec<(i64, String)> = rows
            .values()
            .filter_map(|(task, _)| {
                let at = task.expires_at_ms()?;
                (at <= now_ms).then(|| (at, task.id.clone()))
            })
            .collect();
        expired.sort_unstable();
        let expired: Vec<String> = expired.into_iter().take(limit).map(|(_, id)| id).collect();
        for id in &expired {
            rows.remove(id);
        }
        Ok(expired)
    }

    async fn list_all(&self, after: Option<&ListCursor>, limit: usize) -> Result<Vec<TaskRecord>> {
        let mut page: Vec<TaskRecord> = self
            .rows()
            .values()
            .map(|(task, _)| task)
            .filter(|t| after.is_none_or(|c| c.precedes(t)))
            .cloned()
            .collect();
        page.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        page.truncate(limit);
        Ok(page)
    }
}

/// Front-door state of its own: spent tokens and sessions, in maps.
#[derive(Debug, Default)]
struct MapFrontDoor {
    /// Sessions: state and when it was written.
    sessions: Mutex<HashMap<String, (Value, i64)>>,
    /// Spent single-use tokens, and when their records expire.
    spent: Mutex<HashMap<String, i64>>,
}

impl MapFrontDoor {
    fn sessions(&self) -> MutexGuard<'_, HashMap<String, (Value, i64)>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl FrontDoorStore for MapFrontDoor {
    async fn spend(&self, id: &str, expires_at_ms: i64, now_ms: i64) -> Result<bool> {
        let mut spent = self.spent.lock().unwrap_or_else(PoisonError::into_inner);
        spent.retain(|_, until| *until > now_ms);
        Ok(spent.insert(id.to_owned(), expires_at_ms).is_none())
    }

    async fn put_session(&self, id: &str, state: Value, now_ms: i64) -> Result<()> {
        self.sessions().insert(id.to_owned(), (state, now_ms));
        Ok(())
    }

    async fn get_session(&self, id: &str) -> Result<Option<Value>> {
        Ok(self.sessions().get(id).map(|(state, _)| state.clone()))
    }

    async fn delete_session(&self, id: &str) -> Result<()> {
        self.sessions().remove(id);
        Ok(())
    }

    async fn purge_sessions(&self, now_ms: i64) -> Result<()> {
        let stale = now_ms - i64::try_from(SESSION_TTL.as_millis()).unwrap_or(i64::MAX);
        self.sessions().retain(|_, (_, at)| *at > stale);
        Ok(())
    }
}

mod delegating {
    use super::{Delegating, Fixture};

    mcp_tasks_store_contract::store_contract_tests!(|| async {
        Fixture::new(Delegating::default())
    });
}

mod map_store {
    use super::{Fixture, MapStore};

    mcp_tasks_store_contract::store_contract_tests!(|| async { Fixture::new(MapStore::default()) });
}

mod delegating_front_door {
    use super::{Delegating, Fixture};

    mcp_tasks_store_contract::front_door_contract_tests!(|| async {
        Fixture::new(Delegating::default())
    });
}

mod map_front_door {
    use super::{Fixture, MapFrontDoor};

    mcp_tasks_store_contract::front_door_contract_tests!(|| async {
        Fixture::front_door(MapFrontDoor::default())
    });
}

/// Journals one step, then greets.
#[task_tool]
async fn greet(name: String) -> std::result::Result<String, ToolError> {
    let greeting: String = checkpoint("greeting", || async {
        Ok::<_, ToolError>(format!("Hello, {name}!"))
    })
    .await?;
    Ok(greeting)
}

/// An engine over `store` serving `greet`.
async fn engine_over(store: Arc<MapStore>, front_door: Option<Arc<dyn FrontDoorStore>>) -> Engine {
    let mut builder =
        Engine::builder_arc(store).registry(Registry::new().with(greet_tool()).unwrap());
    if let Some(front_door) = front_door {
        builder = builder.front_door_arc(front_door);
    }
    builder.start().await.unwrap()
}

/// Runs `greet` to its end on `engine`; returns the task's id.
async fn greet_ada(engine: &Engine) -> String {
    let args = serde_json::json!({"name": "Ada"});
    let call = Call::new("greet", args.as_object().cloned().unwrap());
    let Ok(CallOutcome::Task(task)) = engine.call(call).await else {
        panic!("the call did not start a task");
    };
    let done = engine
        .wait(&task.id, None, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.status, TaskStatus::Completed, "{done:?}");
    assert_eq!(done.result.unwrap()["content"][0]["text"], "Hello, Ada!");
    task.id
}

/// A task store that keeps no front-door state serves tasks, and the
/// engine keeps its front door in memory: a `requestState` is spent once,
/// and another engine (another process) does not see it spent.
#[tokio::test]
async fn a_task_store_without_a_front_door_serves_tasks_with_one_in_memory() {
    let store = Arc::new(MapStore::default());
    let engine = engine_over(store.clone(), None).await;
    let id = greet_ada(&engine).await;
    let journal = store.journal(&id).await.unwrap();
    assert!(journal.iter().any(|e| e.name == "greeting"), "{journal:?}");

    let front_door = engine.front_door();
    assert!(front_door.spend("state-1", i64::MAX, 0).await.unwrap());
    assert!(!front_door.spend("state-1", i64::MAX, 0).await.unwrap());
    front_door
        .put_session("s1", serde_json::json!({}), 0)
        .await
        .unwrap();
    assert!(front_door.get_session("s1").await.unwrap().is_some());

    let other = engine_over(store, None).await;
    assert!(
        other
            .front_door()
            .spend("state-1", i64::MAX, 0)
            .await
            .unwrap()
    );
    assert_eq!(other.front_door().get_session("s1").await.unwrap(), None);
}

/// Engines given one front door share it: a `requestState` spent through
/// one is spent for the other, and a session one keeps the other finds.
#[tokio::test]
async fn engines_given_a_front_door_share_it() {
    let store = Arc::new(MapStore::default());
    let shared: Arc<dyn FrontDoorStore> = Arc::new(MapFrontDoor::default());
    let one = engine_over(store.clone(), Some(shared.clone())).await;
    let two = engine_over(store, Some(shared.clone())).await;
    greet_ada(&one).await;

    assert!(
        one.front_door()
            .spend("state-1", i64::MAX, 0)
            .await
            .unwrap()
    );
    assert!(
        !two.front_door()
            .spend("state-1", i64::MAX, 0)
            .await
            .unwrap()
    );
    let state = serde_json::json!({"protocolVersion": "2025-11-25"});
    one.front_door()
        .put_session("s1", state.clone(), 0)
        .await
        .unwrap();
    assert_eq!(
        two.front_door().get_session("s1").await.unwrap(),
        Some(state.clone())
    );
    assert_eq!(shared.get_session("s1").await.unwrap(), Some(state));
}
