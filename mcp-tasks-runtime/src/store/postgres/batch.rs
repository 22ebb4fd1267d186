//! The writer: concurrent creates, journal appends and ends of runs,
//! gathered into one transaction of a few statements, so that they share a
//! commit (and its flush) and a couple of round trips.
//!
//! The store's hot writes do not take a connection each. They send a job to
//! the writer, one task of the store's, which takes every job waiting (up to
//! [`MAX_BATCH`]), one per task (a second job on a task already in the
//! batch waits for the next one), and writes them on one connection of the
//! pool, pipelined, while the batch before it may still be committing (at
//! most [`IN_FLIGHT`] at once, and [`IN_FLIGHT_FOR_CREATES`] more for a
//! batch that creates a task):
//!
//! 1. `BEGIN`, with the plans its statements keep
//!    ([`PLANNING`](transaction::PLANNING)); the rows of every task whose
//!    run it writes, locked in id order ([`LOCK_ROWS`](transaction::LOCK_ROWS)); the creates, one multi-row `INSERT`; the appends, one
//!    statement that reads each task's fence and journals the
//!    entries whose fence is their run's; the ends that finish their task
//!    (completed, failed, cancelled), one `UPDATE` that finishes each row
//!    still unfinished and not fenced off by a later claim, as the state
//!    machine would (a finish depends on nothing else in the row), with
//!    the feed's notices; the other ends' rows, read `FOR UPDATE` in id
//!    order;
//! 2. each of those ends applied to its record in memory, as its caller's
//!    own transaction did ([`TaskRecord::apply_fenced`]: a stale fence is
//!    refused, item by item);
//! 3. the changed rows, one multi-row `UPDATE` with the feed's notices; the
//!    entries journaled with them; `COMMIT`.
//!
//! A batch with no end but finishes sends all of it at once: one round
//! trip. Every caller is answered once the batch has committed, with its
//! own item's outcome: a create
//! whose id is taken fails alone, an append by a stale claim is refused
//! alone. If the transaction fails as a whole (a statement refused, the
//! connection lost, a deadlock), each caller is told to write alone
//! ([`Batched::Alone`]), as the store did before it had a writer, so that a
//! failure reaches only the writes it belongs to.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
};

use deadpool_postgres::{Object, Pool};
use tokio::sync::{Semaphore, mpsc, oneshot};

use self::transaction::Batch;
use crate::{
    error::Result,
    journal::JournalEntry,
    store::{Appended, StoreError, TaskRecord, Transition},
};

mod transaction;

/// The most jobs one transaction takes: it bounds how long a reply waits
/// behind the rest of its batch.
const MAX_BATCH: usize = 512;

/// How many batches are written at once: a write that comes while one
/// batch commits starts the next at once, rather than wait for that
/// commit; under load, what comes while both are busy joins the next.
const IN_FLIGHT: usize = 2;

/// How many more a batch that creates a task may take, when the others are
/// all busy: a create is answered only once committed, so it does not wait
/// behind the appends and ends of the tasks already running.
const IN_FLIGHT_FOR_CREATES: usize = 1;

/// A write's outcome from the writer.
pub(super) enum Batched<T, I> {
    /// Written in a batch (or refused, for this item alone).
    Done(Result<T>),
    /// The batch could not be written: the caller writes `I` alone.
    Alone(I),
}

/// A job's input and where its outcome goes.
struct Pending<I, T> {
    input: I,
    reply: oneshot::Sender<Batched<T, I>>,
}

impl<I, T> Pending<I, T> {
    fn done(self, outcome: Result<T>) {
        let _ = self.reply.send(Batched::Done(outcome));
    }

    fn alone(self) {
        let _ = self.reply.send(Batched::Alone(self.input));
    }
}

/// A run's journal write: the task, the entry, the run's fence.
pub(super) type AppendIn = (String, JournalEntry, u64);

/// An end of a run (or any transition): the task, the entries to journal
/// with it, the change, the time, the fence.
pub(super) type EndIn = (String, Vec<JournalEntry>, Transition, i64, Option<u64>);

enum Job {
    Create(Box<Pending<TaskRecord, ()>>),
    Append(Pending<AppendIn, Appended>),
    End(Pending<EndIn, Option<TaskRecord>>),
}

impl Job {
    fn task_id(&self) -> &str {
        match self {
            Self::Create(p) => &p.input.id,
            Self::Append(p) => &p.input.0,
            Self::End(p) => &p.input.0,
        }
    }

    fn creates(&self) -> bool {
        matches!(self, Self::Create(_))
    }

    fn alone(self) {
        match self {
            Self::Create(p) => p.alone(),
            Self::Append(p) => p.alone(),
            Self::End(p) => p.alone(),
        }
    }
}

/// The handle to the store's writer, started on the first write (on the
/// runtime of that write), and again if that runtime has gone.
#[derive(Default)]
pub(super) struct Writer {
    jobs: Mutex<Option<mpsc::UnboundedSender<Job>>>,
}

impl Writer {
    /// Creates `task`; `notice` is the feed's payload when it is to be
    /// announced.
    pub(super) async fn create(
        &self,
        pool: &Pool,
        channel: &str,
        task: TaskRecord,
    ) -> Batched<(), TaskRecord> {
        self.send(pool, channel, task, |p| Job::Create(Box::new(p)))
            .await
    }

    pub(super) async fn append(
        &self,
        pool: &Pool,
        channel: &str,
        input: AppendIn,
    ) -> Batched<Appended, AppendIn> {
        self.send(pool, channel, input, Job::Append).await
    }

    pub(super) async fn end(
        &self,
        pool: &Pool,
        channel: &str,
        input: EndIn,
    ) -> Batched<Option<TaskRecord>, EndIn> {
        self.send(pool, channel, input, Job::End).await
    }

    async fn send<I, T>(
        &self,
        pool: &Pool,
        channel: &str,
        input: I,
        job: fn(Pending<I, T>) -> Job,
    ) -> Batched<T, I> {
        let (reply, answer) = oneshot::channel();
        let mut pending = job(Pending { input, reply });
        {
            let mut jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
            for _ in 0..2 {
                let sender = jobs.get_or_insert_with(|| start(pool.clone(), channel.to_owned()));
                match sender.send(pending) {
                    Ok(()) => break,
                    // The writer's runtime is gone: start another.
                    Err(mpsc::error::SendError(back)) => {
                        pending = back;
                        *jobs = None;
                    }
                }
            }
        }
        answer.await.unwrap_or_else(|_| {
            Batched::Done(Err(StoreError::new(
                "the Postgres store's writer stopped before the write was done",
            )
            .into()))
        })
    }
}

/// Starts the writer's task.
fn start(pool: Pool, channel: String) -> mpsc::UnboundedSender<Job> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
    let channel: Arc<str> = channel.into();
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let for_creates = Arc::new(Semaphore::new(IN_FLIGHT_FOR_CREATES));
    tokio::spawn(async move {
        let mut next: Vec<Job> = Vec::new();
        loop {
            if next.is_empty() {
                match rx.recv().await {
                    Some(job) => next.push(job),
                    None => return,
                }
            }
            // What comes while every slot is busy joins this batch; a
            // create may take the slot kept for creates.
            let slot = loop {
                let creates = next.iter().any(Job::creates);
                let free = slots.clone().try_acquire_owned().or_else(|e| {
                    if creates {
                        for_creates.clone().try_acquire_owned()
                    } else {
                        Err(e)
                    }
                });
                if let Ok(slot) = free {
                    break slot;
                }
                tokio::select! {
                    slot = slots.clone().acquire_owned() => match slot {
                        Ok(slot) => break slot,
                        Err(_) => return,
                    },
                    slot = for_creates.clone().acquire_owned(), if creates => match slot {
                        Ok(slot) => break slot,
                        Err(_) => return,
                    },
                    job = rx.recv(), if !creates && next.len() < MAX_BATCH => match job {
                        Some(job) => next.push(job),
                        None => return,
                    },
                }
            };
            while next.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(job) => next.push(job),
                    Err(_) => break,
                }
            }
            // One job a task: the rest wait for the next batch.
            let mut ids = HashSet::new();
            let (batch, later): (Vec<Job>, Vec<Job>) = std::mem::take(&mut next)
                .into_iter()
                .partition(|job| ids.insert(job.task_id().to_owned()));
            next = later;
            let (pool, channel) = (pool.clone(), channel.clone());
            tokio::spawn(async move {
                write(&pool, &channel, batch).await;
                drop(slot);
            });
        }
    });
    tx
}

/// Writes `jobs` in one transaction and answers them.
async fn write(pool: &Pool, channel: &str, jobs: Vec<Job>) {
    let Ok(client) = pool.get().await else {
        // No connection: each caller tries, and says why it failed.
        jobs.into_iter().for_each(Job::alone);
        return;
    };
    let mut batch = Batch::default();
    for job in jobs {
        batch.add(job);
    }
    if batch.is_empty() {
        return;
    }
    match batch.run(&client, channel).await {
        Ok(outcomes) => batch.answer(outcomes),
        Err(_) => {
            // Leave the connection outside any transaction; if even that
            // fails, it is not put back in the pool.
            if client.batch_execute("ROLLBACK").await.is_err() {
                let _ = Object::take(client);
            }
            batch.alone();
        }
    }
}
