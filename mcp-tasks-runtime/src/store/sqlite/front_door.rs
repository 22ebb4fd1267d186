//! The SQLite store's front-door state: spent `requestState`s and protocol
//! sessions, in the same file as the tasks (tables `spent_states` and
//! `sessions`).

use async_trait::async_trait;
use rusqlite::{Connection, params};
use serde_json::Value;

use super::SqliteStore;
use crate::{
    error::Result,
    store::{
        FrontDoorStore,
        error::Context,
        front_door::{session_state, stale_before},
    },
};

#[async_trait]
impl FrontDoorStore for SqliteStore {
    async fn spend(&self, id: &str, expires_at_ms: i64, now_ms: i64) -> Result<bool> {
        let id = id.to_owned();
        self.call(move |c| spend(c, &id, expires_at_ms, now_ms))
            .await
    }

    async fn put_session(&self, id: &str, state: Value, now_ms: i64) -> Result<()> {
        let id = id.to_owned();
        let state = state.to_string();
        self.call(move |c| upsert_session(c, &id, &state, now_ms))
            .await
    }

    async fn get_session(&self, id: &str) -> Result<Option<Value>> {
        let key = id.to_owned();
        session_state(id, self.read(move |c| select_session(c, &key)).await?)
    }

    async fn delete_session(&self, id: &str) -> Result<()> {
        let id = id.to_owned();
        self.call(move |c| delete_sessions(c, Some(&id), i64::MIN))
            .await
    }

    async fn purge_sessions(&self, now_ms: i64) -> Result<()> {
        let stale = stale_before(now_ms);
        self.call(move |c| delete_sessions(c, None, stale)).await
    }
}

/// Writes a session's state.
fn upsert_session(c: &Connection, id: &str, state: &str, now_ms: i64) -> Result<()> {
    c.prepare_cached(
        "INSERT INTO sessions (id, state, updated_at_ms) VALUES (?1, ?2, ?3) \
         ON CONFLICT (id) DO UPDATE SET state = excluded.state, updated_at_ms = excluded.updated_at_ms",
    )
    .and_then(|mut s| s.execute(params![id, state, now_ms]))
    .context(|| format!("could not save session {id}"))?;
    Ok(())
}

/// Reads a session's state.
fn select_session(c: &Connection, id: &str) -> Result<Option<String>> {
    let what = || format!("could not read session {id}");
    let mut stmt = c
        .prepare_cached("SELECT state FROM sessions WHERE id = ?1")
        .context(what)?;
    let mut rows = stmt.query([id]).context(what)?;
    match rows.next().context(what)? {
        Some(row) => Ok(Some(row.get(0).context(what)?)),
        None => Ok(None),
    }
}

/// Deletes a session; with `before`, every session untouched since then.
fn delete_sessions(c: &Connection, id: Option<&str>, before: i64) -> Result<()> {
    c.prepare_cached("DELETE FROM sessions WHERE id = ?1 OR updated_at_ms < ?2")
        .and_then(|mut s| s.execute(params![id, before]))
        .context(|| "could not delete sessions".to_owned())?;
    Ok(())
}

/// Records a spent token; `true` the first time. Deletes expired records.
fn spend(c: &Connection, id: &str, expires_at_ms: i64, now_ms: i64) -> Result<bool> {
    let what = || "could not record a spent requestState".to_owned();
    c.prepare_cached("DELETE FROM spent_states WHERE expires_at_ms <= ?1")
        .and_then(|mut s| s.execute(params![now_ms]))
        .context(what)?;
    let inserted = c
        .prepare_cached(
            "INSERT INTO spent_states (id, expires_at_ms) VALUES (?1, ?2) \
             ON CONFLICT (id) DO NOTHING",
        )
        .and_then(|mut s| s.execute(params![id, expires_at_ms]))
        .context(what)?;
    Ok(inserted == 1)
}
