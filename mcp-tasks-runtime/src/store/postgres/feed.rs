//! The change feed: Postgres `LISTEN`/`NOTIFY`.
//!
//! Every write that changes a task notifies the store's channel with the
//! task's id, inside its transaction, so the notification goes out when (and
//! only if) the change commits ([`notify`]). One connection of its own
//! listens and hands the changes to the engines sharing the store
//! ([`Change`]); when it loses the server it reconnects, and tells them to
//! look for what they may have missed. Where `LISTEN` itself is refused, it
//! says so in the log and falls back to polling: it tells the engines to
//! look again every [`POLL`].
//!
//! It also keeps the store's [`Health`]: the listening connection is the
//! first to see the database go, and the first connection made again (its
//! own or the pool's) ends the outage.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

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

/// How often the engines are told to look again when `LISTEN` is refused.
const POLL: Duration = Duration::from_secs(1);

/// How often `LISTEN` is tried again while the feed polls.
const LISTEN_AGAIN: Duration = Duration::from_secs(60);

/// Whether the store has its database: since when it has been without it,
/// if it is. Counts each outage in the metrics when it ends
/// (`mcp_tasks_store_reconnects_total`, `mcp_tasks_store_unavailable_seconds`).
#[derive(Debug, Default)]
pub(super) struct Health {
    down_since: Mutex<Option<Instant>>,
}

impl Health {
    /// A connection was lost, or could not be made.
    pub(super) fn lost(&self) {
        let mut down = self.down_since.lock().unwrap_or_else(|e| e.into_inner());
        if down.is_none() {
            *down = Some(Instant::now());
            tracing::warn!("Postgres store: the database cannot be reached");
        }
    }

    /// A connection was made.
    pub(super) fn back(&self) {
        let since = self
            .down_since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(since) = since {
            let down = since.elapsed();
            crate::metrics::store_reconnected(down);
            tracing::warn!(after = ?down, "Postgres store: the database answers again");
        }
    }
}

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
    /// Starts listening on `channel` over a connection of its own, keeping
    /// `health`.
    pub(super) fn start(
        config: Config,
        tls: impl PostgresTls,
        channel: String,
        health: Arc<Health>,
    ) -> Self {
        let (tx, _) = broadcast::channel(CAPACITY);
        let (stop_tx, stop) = watch::channel(());
        let listener = Listener {
            config,
            channel,
            tx: tx.clone(),
            health,
        };
        tokio::spawn(listener.run(tls, stop));
        Self { tx, _stop: stop_tx }
    }

    /// A receiver of the changes from now on.
    pub(super) fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.tx.subscribe()
    }
}

/// How one listening connection ended.
enum Listened {
    /// It listened until the connection was lost.
    Lost,
    /// It could not connect.
    Unreachable,
    /// The server refused `LISTEN` itself.
    Refused(tokio_postgres::Error),
}

/// What the feed's task holds.
struct Listener {
    config: Config,
    channel: String,
    tx: broadcast::Sender<Change>,
    health: Arc<Health>,
}

impl Listener {
    /// Listens until `stop` closes, reconnecting with a growing pause; polls
    /// where `LISTEN` is refused.
    async fn run(self, tls: impl PostgresTls, mut stop: watch::Receiver<()>) {
        let mut pause = Duration::from_millis(100);
        let mut listen_at = tokio::time::Instant::now();
        let mut polling = false;
        loop {
            let outcome = if tokio::time::Instant::now() >= listen_at {
                tokio::select! {
                    _ = stop.changed() => return,
                    outcome = self.listen_once(&tls) => Some(outcome),
                }
            } else {
                None
            };
            match outcome {
                Some(Listened::Lost) => {
                    self.health.lost();
                    pause = Duration::from_millis(100);
                }
                Some(Listened::Unreachable) => self.health.lost(),
                Some(Listened::Refused(e)) => {
                    if !polling {
                        tracing::warn!(
                            error = %e,
                            every = ?POLL,
                            "Postgres change feed: LISTEN is refused here (a pooler in \
                             transaction mode, or a server without it); falling back to \
                             polling: the engines look for changes every `every`"
                        );
                    }
                    polling = true;
                    listen_at = tokio::time::Instant::now() + LISTEN_AGAIN;
                }
                None => {}
            }
            let wait = if polling { POLL } else { pause };
            tokio::select! {
                _ = stop.changed() => return,
                () = tokio::time::sleep(wait) => {}
            }
            if polling {
                let _ = self.tx.send(Change::Missed);
            } else {
                pause = (pause * 2).min(Duration::from_secs(5));
            }
        }
    }

    /// One listening connection, until it is lost.
    async fn listen_once(&self, tls: &impl PostgresTls) -> Listened {
        let (client, mut connection) = match self.config.connect(tls.clone()).await {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(error = %e, "Postgres change feed: could not connect");
                return Listened::Unreachable;
            }
        };
        let mut messages = stream::poll_fn(move |cx| connection.poll_message(cx));
        // The connection must be polled for LISTEN to complete.
        let listened = {
            let listen = format!("LISTEN {}", self.channel);
            let listening = client.batch_execute(&listen);
            let mut listening = std::pin::pin!(listening);
            loop {
                tokio::select! {
                    done = &mut listening => break done,
                    message = messages.next() => if message.is_none_or(|m| m.is_err()) {
                        return Listened::Lost;
                    },
                }
            }
        };
        match listened {
            Ok(()) => {}
            // The server answered, refusing it.
            Err(e) if e.code().is_some() => return Listened::Refused(e),
            Err(e) => {
                tracing::warn!(error = %e, "Postgres change feed: LISTEN failed");
                return Listened::Lost;
            }
        }
        self.health.back();
        // Anything committed while no one listened: look again.
        let _ = self.tx.send(Change::Missed);
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if let Some(change) = parse(n.payload()) {
                        let _ = self.tx.send(change);
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
        Listened::Lost
    }
}
