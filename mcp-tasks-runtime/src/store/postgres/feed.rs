//! The change feed: Postgres `LISTEN`/`NOTIFY`.
//!
//! Every write that changes a task notifies the store's channel with the
//! task's id, inside its transaction, so the notification goes out when (and
//! only if) the change commits ([`notify`]). One connection of its own
//! listens and hands the changes to the engines sharing the store
//! ([`Change`]); when it loses the server it reconnects, and tells them to
//! look for what they may have missed. Where `LISTEN` cannot work (the
//! server refuses it, or [`FAILURES_BEFORE_POLLING`] tries in a row could
//! not connect, or lost the connection within [`HELD`] of listening), it
//! says so in the log, once, and falls back to polling: it tells the
//! engines to look again every [`POLL`], and goes on trying to listen
//! until a `LISTEN` holds for [`HELD`].
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

/// How often `LISTEN` is tried again where the server refused it.
const LISTEN_AGAIN: Duration = Duration::from_secs(60);

/// How many tries in a row that do not listen (no connection, or one lost
/// within [`HELD`] of its `LISTEN`) make the feed poll.
const FAILURES_BEFORE_POLLING: u32 = 3;

/// How long a `LISTEN` must hold before the feed stops polling.
const HELD: Duration = Duration::from_secs(10);

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
            polling: false,
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
    /// It listened until the connection was lost, for this long.
    Lost(Duration),
    /// It could not connect.
    Unreachable(tokio_postgres::Error),
    /// It connected, but lost the connection before `LISTEN` was answered:
    /// why.
    Cut(String),
    /// The server refused `LISTEN` itself.
    Refused(tokio_postgres::Error),
}

/// What the feed's task holds.
struct Listener {
    config: Config,
    channel: String,
    tx: broadcast::Sender<Change>,
    health: Arc<Health>,
    /// Whether the feed polls: `LISTEN` did not work here, and has not held
    /// for [`HELD`] since.
    polling: bool,
}

impl Listener {
    /// Listens until `stop` closes, reconnecting with a growing pause; polls
    /// where `LISTEN` cannot work.
    async fn run(mut self, tls: impl PostgresTls, mut stop: watch::Receiver<()>) {
        let mut pause = Duration::from_millis(100);
        let mut listen_at = tokio::time::Instant::now();
        let mut failures = 0;
        loop {
            if tokio::time::Instant::now() >= listen_at {
                let outcome = tokio::select! {
                    _ = stop.changed() => return,
                    outcome = self.listen_once(&tls) => outcome,
                };
                let (why, again) = match outcome {
                    Listened::Lost(held) => {
                        self.health.lost();
                        if held >= HELD {
                            (failures, pause) = (0, Duration::from_millis(100));
                            (None, pause)
                        } else {
                            let why = format!("the connection was lost {held:.1?} after LISTEN");
                            (Some(why), pause)
                        }
                    }
                    Listened::Unreachable(e) => {
                        self.health.lost();
                        (Some(e.to_string()), pause)
                    }
                    Listened::Cut(e) => (Some(format!("LISTEN was not answered: {e}")), pause),
                    Listened::Refused(e) => {
                        failures = FAILURES_BEFORE_POLLING;
                        let why = format!(
                            "LISTEN is refused ({e}): a pooler in transaction mode, or a \
                             server without it"
                        );
                        (Some(why), LISTEN_AGAIN)
                    }
                };
                if let Some(why) = why {
                    failures += 1;
                    if failures >= FAILURES_BEFORE_POLLING && !self.polling {
                        self.polling = true;
                        tracing::warn!(
                            error = %why,
                            tries = failures,
                            every = ?POLL,
                            "Postgres change feed: cannot listen (`tries` tries in a row); \
                             falling back to polling: the engines look for changes every \
                             `every` until a LISTEN holds"
                        );
                    }
                }
                listen_at = tokio::time::Instant::now() + again;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            let wait = if self.polling {
                POLL
            } else {
                listen_at.saturating_duration_since(tokio::time::Instant::now())
            };
            tokio::select! {
                _ = stop.changed() => return,
                () = tokio::time::sleep(wait) => {}
            }
            if self.polling {
                let _ = self.tx.send(Change::Missed);
            }
        }
    }

    /// One listening connection, until it is lost.
    async fn listen_once(&mut self, tls: &impl PostgresTls) -> Listened {
        let (client, mut connection) = match self.config.connect(tls.clone()).await {
            Ok(pair) => pair,
            Err(e) => {
                if !self.polling {
                    tracing::warn!(error = %e, "Postgres change feed: could not connect");
                }
                return Listened::Unreachable(e);
            }
        };
        self.health.back();
        let mut messages = stream::poll_fn(move |cx| connection.poll_message(cx));
        // The connection must be polled for LISTEN to complete.
        let listened = {
            let listen = format!("LISTEN {}", self.channel);
            let listening = client.batch_execute(&listen);
            let mut listening = std::pin::pin!(listening);
            loop {
                tokio::select! {
                    done = &mut listening => break done,
                    message = messages.next() => match message {
                        Some(Ok(_)) => {}
                        Some(Err(e)) => return Listened::Cut(e.to_string()),
                        None => return Listened::Cut("the connection closed".to_owned()),
                    },
                }
            }
        };
        match listened {
            Ok(()) => {}
            // The server answered, refusing it.
            Err(e) if e.code().is_some() => return Listened::Refused(e),
            Err(e) => return Listened::Cut(e.to_string()),
        }
        let since = tokio::time::Instant::now();
        // Anything committed while no one listened: look again.
        let _ = self.tx.send(Change::Missed);
        let held = tokio::time::sleep(HELD);
        let mut held = std::pin::pin!(held);
        loop {
            let message = tokio::select! {
                message = messages.next() => message,
                () = &mut held, if self.polling => {
                    self.polling = false;
                    tracing::info!("Postgres change feed: LISTEN holds again; polling stops");
                    continue;
                }
            };
            match message {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if let Some(change) = parse(n.payload()) {
                        let _ = self.tx.send(change);
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    if !self.polling {
                        tracing::warn!(error = %e, "Postgres change feed: connection lost");
                    }
                    break;
                }
                None => break,
            }
        }
        drop(client);
        Listened::Lost(since.elapsed())
    }
}
