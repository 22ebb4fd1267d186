//! The in-memory store: for tests and examples that need no durability. Every
//! task is lost when the process exits.

use std::{
    collections::{BTreeMap, HashMap, btree_map, hash_map},
    sync::Mutex,
};

use async_trait::async_trait;
use serde_json::{Map, Value};

use super::{
    Answered, Appended, FrontDoorStore, ListCursor, Store, StoreError, TaskRecord, Transition,
    front_door::stale_before,
};
use crate::{error::Result, journal::JournalEntry};

#[derive(Debug)]
struct Task {
    record: TaskRecord,
    journal: BTreeMap<u32, JournalEntry>,
}

/// A [`Store`] that keeps everything in memory. Not durable: use it in tests.
///
/// It is a [`FrontDoorStore`] too, and what an engine keeps front-door state
/// in when its task store keeps none.
#[derive(Debug, Default)]
pub struct MemoryStore {
    tasks: Mutex<HashMap<String, Task>>,
    /// Protocol sessions: state and when it was last written.
    sessions: Mutex<HashMap<String, (Value, i64)>>,
    /// Spent single-use tokens, and when their records expire.
    spent: Mutex<HashMap<String, i64>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Task>> {
        // No code panics while holding the lock, and every change is applied to
        // a clone first, so the data behind a poisoned lock is consistent.
        self.tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// [`Store::transition`], journaling `entries` (a taken position keeps
    /// its entry) when the change applies.
    fn transition_with(
        &self,
        id: &str,
        entries: Vec<JournalEntry>,
        change: Transition,
        now_ms: i64,
        fence: Option<u64>,
    ) -> Option<TaskRecord> {
        let mut tasks = self.lock();
        let task = tasks.get_mut(id)?;
        let mut next = task.record.clone();
        if !next.apply_fenced(change, now_ms, fence) {
            return None;
        }
        for entry in entries {
            task.journal.entry(entry.position).or_insert(entry);
        }
        task.record = next.clone();
        Some(next)
    }

    /// [`Store::answer`] and [`Store::time_out`]: applies `change` (which
    /// takes questions off the record and gives the entries to journal) to a
    /// copy, then keeps the entries and the copy.
    fn take_inputs(
        &self,
        id: &str,
        change: impl FnOnce(&mut TaskRecord) -> (Vec<JournalEntry>, bool),
    ) -> Option<Answered> {
        let mut tasks = self.lock();
        let task = tasks.get_mut(id)?;
        let mut record = task.record.clone();
        let (entries, runnable) = change(&mut record);
        let accepted = entries.len();
        for e in entries {
            task.journal.entry(e.position).or_insert(e);
        }
        task.record = record.clone();
        Some(Answered {
            record,
            accepted,
            runnable,
        })
    }

    /// At most `limit` of the tasks `keep` keeps after `after`, oldest first.
    fn page(
        &self,
        after: Option<&ListCursor>,
        limit: usize,
        keep: impl Fn(&TaskRecord) -> bool,
    ) -> Vec<TaskRecord> {
        let mut page: Vec<TaskRecord> = self
            .lock()
            .values()
            .map(|t| &t.record)
            .filter(|r| keep(r) && after.is_none_or(|c| c.precedes(r)))
            .cloned()
            .collect();
        page.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        page.truncate(limit);
        page
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Value, i64)>> {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn create(&self, task: TaskRecord) -> Result<()> {
        match self.lock().entry(task.id.clone()) {
            hash_map::Entry::Occupied(_) => Err(StoreError::new(format!(
                "could not create task {}: it already exists",
                task.id
            ))
            .into()),
            hash_map::Entry::Vacant(slot) => {
                slot.insert(Task {
                    record: task,
                    journal: BTreeMap::new(),
                });
                Ok(())
            }
        }
    }

    async fn get(&self, id: &str) -> Result<Option<TaskRecord>> {
        Ok(self.lock().get(id).map(|t| t.record.clone()))
    }

    async fn journal(&self, id: &str) -> Result<Vec<JournalEntry>> {
        Ok(self
            .lock()
            .get(id)
            .map(|t| t.journal.values().cloned().collect())
            .unwrap_or_default())
    }

    async fn append(&self, id: &str, entry: JournalEntry, fence: u64) -> Result<Appended> {
        let mut tasks = self.lock();
        let Some(task) = tasks.get_mut(id).filter(|t| t.record.fence == fence) else {
            return Ok(Appended::Fenced);
        };
        Ok(match task.journal.entry(entry.position) {
            btree_map::Entry::Occupied(kept) => Appended::Kept(kept.get().clone()),
            btree_map::Entry::Vacant(slot) => {
                slot.insert(entry);
                Appended::Recorded
            }
        })
    }

    async fn transition(
        &self,
        id: &str,
        change: Transition,
        now_ms: i64,
        fence: Option<u64>,
    ) -> Result<Option<TaskRecord>> {
        Ok(self.transition_with(id, Vec::new(), change, now_ms, fence))
    }

    async fn transition_journaled(
        &self,
        id: &str,
        entries: Vec<JournalEntry>,
        change: Transition,
        now_ms: i64,
        fence: u64,
    ) -> Result<Option<TaskRecord>> {
        Ok(self.transition_with(id, entries, change, now_ms, Some(fence)))
    }

    async fn claim(
        &self,
        id: &str,
        owner: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<Option<(TaskRecord, Vec<JournalEntry>)>> {
        let mut tasks = self.lock();
        let Some(task) = tasks.get_mut(id) else {
            return Ok(None);
        };
        if !task.record.claim(owner, now_ms, until_ms) {
            return Ok(None);
        }
        Ok(Some((
            task.record.clone(),
            task.journal.values().cloned().collect(),
        )))
    }

    async fn renew(&self, owner: &str, now_ms: i64, until_ms: i64) -> Result<Vec<(String, u64)>> {
        let mut held = Vec::new();
        for task in self.lock().values_mut() {
            if let Some(lease) = &mut task.record.lease
                && lease.owner == owner
                && lease.expires_at_ms > now_ms
            {
                // A late renewal (made before a claim that landed first) never
                // shortens a lease.
                lease.expires_at_ms = lease.expires_at_ms.max(until_ms);
                held.push((task.record.id.clone(), task.record.version));
            }
        }
        Ok(held)
    }

    async fn release(&self, owner: &str) -> Result<()> {
        for task in self.lock().values_mut() {
            if task.record.lease.as_ref().is_some_and(|l| l.owner == owner) {
                task.record.lease = None;
            }
        }
        Ok(())
    }

    async fn claimable(&self, now_ms: i64, limit: usize) -> Result<Vec<String>> {
        let mut due: Vec<&TaskRecord> = Vec::new();
        let tasks = self.lock();
        due.extend(
            tasks
                .values()
                .map(|t| &t.record)
                .filter(|r| r.claimable(now_ms)),
        );
        due.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        Ok(due.into_iter().take(limit).map(|r| r.id.clone()).collect())
    }

    async fn answer(
        &self,
        id: &str,
        responses: Map<String, Value>,
        now_ms: i64,
    ) -> Result<Option<Answered>> {
        Ok(self.take_inputs(id, |record| record.answer(responses, now_ms)))
    }

    async fn time_out(&self, id: &str, now_ms: i64) -> Result<Option<Answered>> {
        Ok(self.take_inputs(id, |record| record.time_out(now_ms)))
    }

    async fn overdue(&self, now_ms: i64, limit: usize) -> Result<Vec<String>> {
        let tasks = self.lock();
        let mut due: Vec<&TaskRecord> = tasks
            .values()
            .map(|t| &t.record)
            .filter(|r| r.overdue(now_ms))
            .collect();
        due.sort_by(|a, b| (a.wake_at_ms, &a.id).cmp(&(b.wake_at_ms, &b.id)));
        Ok(due.into_iter().take(limit).map(|r| r.id.clone()).collect())
    }

    async fn unfinished(&self) -> Result<Vec<TaskRecord>> {
        Ok(self
            .lock()
            .values()
            .filter(|t| !t.record.status.is_terminal())
            .map(|t| t.record.clone())
            .collect())
    }

    async fn purge_expired(&self, now_ms: i64, limit: usize) -> Result<Vec<String>> {
        let mut tasks = self.lock();
        let mut expired: Vec<(i64, String)> = tasks
            .iter()
            .filter_map(|(id, t)| {
                let at = t.record.expires_at_ms()?;
                (at <= now_ms).then(|| (at, id.clone()))
            })
            .collect();
        expired.sort_unstable();
        expired.truncate(limit);
        let expired: Vec<String> = expired.into_iter().map(|(_, id)| id).collect();
        for id in &expired {
            tasks.remove(id);
        }
        Ok(expired)
    }

    async fn count_unfinished(&self, principal: Option<&str>) -> Result<usize> {
        Ok(self
            .lock()
            .values()
            .filter(|t| {
                !t.record.status.is_terminal() && t.record.principal.as_deref() == principal
            })
            .count())
    }

    async fn next_expiry(&self) -> Result<Option<i64>> {
        Ok(self
            .lock()
            .values()
            .filter_map(|t| t.record.expires_at_ms())
            .min())
    }

    async fn list(
        &self,
        principal: Option<&str>,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>> {
        Ok(self.page(after, limit, |r| r.principal.as_deref() == principal))
    }

    async fn list_all(&self, after: Option<&ListCursor>, limit: usize) -> Result<Vec<TaskRecord>> {
        Ok(self.page(after, limit, |_| true))
    }

    fn front_door(self: std::sync::Arc<Self>) -> Option<std::sync::Arc<dyn FrontDoorStore>> {
        Some(self)
    }
}

/// Front-door state in memory: lost with the process, like the tasks.
#[async_trait]
impl FrontDoorStore for MemoryStore {
    async fn spend(&self, id: &str, expires_at_ms: i64, now_ms: i64) -> Result<bool> {
        let mut spent = self
            .spent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
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
        let stale = stale_before(now_ms);
        self.sessions().retain(|_, (_, touched)| *touched > stale);
        Ok(())
    }
}
