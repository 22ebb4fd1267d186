//! The Postgres store's front-door state: spent `requestState`s and
//! protocol sessions, in the same schema as the tasks (tables
//! `spent_states` and `sessions`), shared by every instance.

use async_trait::async_trait;
use deadpool_postgres::GenericClient;
use serde_json::Value;

use super::{
    PostgresStore,
    rows::{execute, query},
};
use crate::{
    error::Result,
    store::{
        FrontDoorStore,
        error::Context,
        front_door::{session_state, stale_before},
    },
};

const UPSERT_SESSION: &str = "INSERT INTO sessions (id, state, updated_at_ms) VALUES ($1, $2, $3) \
    ON CONFLICT (id) DO UPDATE SET state = excluded.state, updated_at_ms = excluded.updated_at_ms";

const SELECT_SESSION: &str = "SELECT state FROM sessions WHERE id = $1";

const DELETE_SESSIONS: &str = "DELETE FROM sessions WHERE id = $1 OR updated_at_ms < $2";

#[async_trait]
impl FrontDoorStore for PostgresStore {
    async fn spend(&self, id: &str, expires_at_ms: i64, now_ms: i64) -> Result<bool> {
        let client = self
            .client_to_write(|| "could not record a spent requestState".to_owned())
            .await?;
        spend(&client, id, expires_at_ms, now_ms).await
    }

    async fn put_session(&self, id: &str, state: Value, now_ms: i64) -> Result<()> {
        let client = self
            .client_to_write(|| format!("could not save session {id}"))
            .await?;
        upsert_session(&client, id, &state.to_string(), now_ms).await
    }

    async fn get_session(&self, id: &str) -> Result<Option<Value>> {
        let client = self
            .client(|| format!("could not read session {id}"))
            .await?;
        session_state(id, select_session(&client, id).await?)
    }

    async fn delete_session(&self, id: &str) -> Result<()> {
        let client = self
            .client_to_write(|| format!("could not delete session {id}"))
            .await?;
        delete_sessions(&client, Some(id), i64::MIN).await
    }

    async fn purge_sessions(&self, now_ms: i64) -> Result<()> {
        let client = self
            .client_to_write(|| "could not delete the stale sessions".to_owned())
            .await?;
        delete_sessions(&client, None, stale_before(now_ms)).await
    }
}

/// Writes a session's state.
async fn upsert_session(c: &impl GenericClient, id: &str, state: &str, now_ms: i64) -> Result<()> {
    execute(c, UPSERT_SESSION, &[&id, &state, &now_ms])
        .await
        .context(|| format!("could not save session {id}"))?;
    Ok(())
}

/// Reads a session's state.
async fn select_session(c: &impl GenericClient, id: &str) -> Result<Option<String>> {
    let what = || format!("could not read session {id}");
    let rows = query(c, SELECT_SESSION, &[&id]).await.context(what)?;
    Ok(rows
        .first()
        .map(|r| r.try_get(0))
        .transpose()
        .context(what)?)
}

/// Deletes a session; with `before`, every session untouched since then.
async fn delete_sessions(c: &impl GenericClient, id: Option<&str>, before: i64) -> Result<()> {
    execute(c, DELETE_SESSIONS, &[&id, &before])
        .await
        .context(|| "could not delete sessions")?;
    Ok(())
}

/// Records a spent token; `true` the first time. Deletes expired records.
async fn spend(c: &impl GenericClient, id: &str, expires_at_ms: i64, now_ms: i64) -> Result<bool> {
    let what = || "could not record a spent requestState".to_owned();
    execute(
        c,
        "DELETE FROM spent_states WHERE expires_at_ms <= $1",
        &[&now_ms],
    )
    .await
    .context(what)?;
    let inserted = execute(
        c,
        "INSERT INTO spent_states (id, expires_at_ms) VALUES ($1, $2) \
         ON CONFLICT (id) DO NOTHING",
        &[&id, &expires_at_ms],
    )
    .await
    .context(what)?;
    Ok(inserted == 1)
}
