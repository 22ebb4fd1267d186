//! The change feed: Postgres `LISTEN`/`NOTIFY`.
//!
//! Every write that changes a task notifies the store's channel with the
//! task's id, inside its transaction, so the notification goes out when (and
//! only if) the change commits ([`notify`]). One connection of its own
//! listens and hands the changes to the engines sharing the store
//! ([`Change`]); when it loses the server it reconnects, and tells them to
//! look for what they may have missed.

use std::time::Duration;

use deadpool_postgres::GenericClient;
use futures::{StreamExt, stream};
use tokio::sync::{broadcast, watch};
use tokio_postgres::{AsyncMessage, Config};

use super::tls::PostgresTls;

use crate::{
    error::Result,
    store::{Change, TaskRecord, error::Context},
};

/// How many changes wait for a slow receiver before it is told it lagged.
const CAPACITY: usize = 4096;

/// The channel the store's writes notify.
pub(super) fn channel(schema: &str) -> String {
    format!("mcp_tasks_{schema}")
}

/// Notifies `channel` of a change to `record`, within the caller's
/// transaction, with its [`payload`].
pub(super) async fn notify(
    c: &impl GenericClient,
    channel: &str,
    record: &TaskRecord,
    now_ms: i64,
) -> Result<()> {
    let payload = payload(record, now_ms);
    let stmt = c
        .prepare_cached("SELECT pg_notify($1, $2)")
        .await
        .context(|| format!("could not announce a change to task {}", record.id))?;
    c.execute(&stmt, &[&channel, &payload])
        .await
        .context(|| format!("could not announce a change to task {}", record.id))?;
    Ok(())
}

/// The notice of a change to `record`: its id, then `run` when the task is
/// now claimable (a free instance should run it), else `changed`.
pub(super) fn payload(record: &TaskRecord, now_ms: i64) -> String {
    let hint = if record.claimable(now_ms) {
        "run"
    } else {
        "changed"
    };
    format!("{} {hint}", record.id)
}

/// Notifies `channel` that the tasks `ids` are gone (purged), so that the
/// instances following them see them end. Sent when the caller's statement
/// or transaction commits.
pub(super) async fn notify_gone(
    c: &impl GenericClient,
    channel: &str,
    ids: &[String],
) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let what = || {
        format!(
            "could not announce that {} expired tasks are gone",
            ids.len()
        )
    };
    let stmt = c
        .prepare_cached("SELECT pg_notify($1, id || ' changed') FROM unnest($2::text[]) AS id")
        .await
        .context(what)?;
    c.execute(&stmt, &[&channel, &ids]).await.context(what)?;
    Ok(())
}

/// Reads a notification's payload.
fn parse(payload: &str) -> Option<Change> {
    let (id, hint) = payload.split_once(' ')?;
    Some(match hint {
        "run" => Change::Runnable(id.to_owned()),
        _ => Change::Changed(id.to_owned()),
    })
}

/// The listener: started by the store, ended when the store is dropped
/// (`stop`'s sender goes away).
#[derive(Debug)]
pub(super) struct Feed {
    tx: broadcast::Sender<Change>,
    _stop: watch::Sender<()>,
}

impl Feed {
    /// Starts listening on `channel` over a connection of its own.
    pub(super) fn start(config: Config, tls: impl PostgresTls, channel: String) -> Self {
        let (tx, _) = broadcast::channel(CAPACITY);
        let (stop_tx, stop) = watch::channel(());
        tokio::spawn(listen(config, tls, channel, tx.clone(), stop));
        Self { tx, _stop: stop_tx }
    }

    /// A receiver of the changes from now on.
    pub(super) fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.tx.subscribe()
    }
}

/// Listens until `stop` closes, reconnecting with a growing pause.
async fn listen(
    config: Config,
    tls: impl PostgresTls,
    channel: String,
    tx: broadcast::Sender<Change>,
    mut stop: watch::Receiver<()>,
) {
    let mut pause = Duration::from_millis(100);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            served = listen_once(&config, &tls, &channel, &tx) => {
                if served {
                    pause = Duration::from_millis(100);
                }
            }
        }
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// One listening connection, until it is lost; returns whether it got as
/// far as listening.
async fn listen_once(
    config: &Config,
    tls: &impl PostgresTls,
    channel: &str,
    tx: &broadcast::Sender<Change>,
) -> bool {
    let (client, mut connection) = match config.connect(tls.clone()).await {
        Ok(pair) => pair,
        Err(e) => {
            tracing::warn!(error = %e, "Postgres change feed: could not connect");
            return false;
        }
    };
    let mut messages = stream::poll_fn(move |cx| connection.poll_message(cx));
    // The connection must be polled for LISTEN to complete.
    let listened = {
        let listening = async {
            client
                .batch_execute(&format!("LISTEN {channel}"))
                .await
                .map_err(|e| tracing::warn!(error = %e, "Postgres change feed: LISTEN failed"))
        };
        let mut listening = std::pin::pin!(listening);
        loop {
            tokio::select! {
                done = &mut listening => break done.is_ok(),
                message = messages.next() => if message.is_none_or(|m| m.is_err()) {
                    break false;
                },
            }
        }
    };
    if !listened {
        return false;
    }
    // Anything committed while no one listened: look again.
    let _ = tx.send(Change::Missed);
    while let Some(message) = messages.next().await {
        match message {
            Ok(AsyncMessage::Notification(n)) => {
                if let Some(change) = parse(n.payload()) {
                    let _ = tx.send(change);
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "Postgres change feed: connection lost");
                break;
            }
        }
    }
    drop(client);
    true
}
