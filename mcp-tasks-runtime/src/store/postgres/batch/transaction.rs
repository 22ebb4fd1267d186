//! One batch's transaction: its statements, the values they bind, and
//! each item's outcome once it has committed (the writer that gathers the
//! jobs and runs the batches is the parent module).

use std::collections::{HashMap, HashSet};

use deadpool_postgres::Object;
use futures::future::try_join_all;
use tokio_postgres::{Row, Statement, types::ToSql};

use self::columns::{Appends, Changed, Entries, Finishes, NewTasks};
use super::{AppendIn, EndIn, Job, Pending};
use crate::{
    error::Result,
    store::{
        Appended, StoreError, TaskRecord,
        postgres::feed,
        sql::{self, task_columns},
    },
};

mod columns;

/// How the batch's statements are planned, for its transaction only: one
/// plan a statement, kept (`force_generic_plan`; by default Postgres plans
/// a statement whose parameters are arrays anew at every execution), and
/// made with the tables' indexes (`enable_seqscan` off). A plan is made
/// once and kept until the tables' statistics change; one made while
/// `tasks` was small would scan the whole table for its few rows, long
/// after it has grown.
pub(super) const PLANNING: &str = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true), \
    set_config('enable_seqscan', 'off', true)";

/// Locks the rows of the tasks `$1` whose runs the batch writes, in id
/// order, before any of its statements writes one: every other writer that
/// locks many rows (a lease renewal, another batch) takes them in the same
/// order, so that none waits for another while holding a row it wants.
/// Locked statement by statement (the appends', then the finishes', then
/// the other ends'), a batch and a renewal could each hold a row the other
/// waits for, until Postgres broke the cycle after `deadlock_timeout`
/// (1 s by default) by failing one.
pub(super) const LOCK_ROWS: &str =
    "SELECT id FROM tasks WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE";

/// Many new tasks, `$1` to `$22` arrays of their columns (as [`NewTasks`]
/// binds them), one element a task. Answers the ids inserted.
const INSERT_TASKS: &str = "INSERT INTO tasks (id, tool, arguments, client_capabilities, \
    principal, created_at_ms, ttl_ms, poll_interval_ms, tool_version, expires_at_ms, status, \
    status_message, updated_at_ms, pending, wake_at_ms, cancel_requested, result, error, version, \
    lease_owner, lease_expires_at_ms, fence) SELECT * FROM unnest($1::text[], $2::text[], \
    $3::text[], $4::text[], $5::text[], $6::int8[], $7::int8[], $8::int8[], $9::int8[], \
    $10::int8[], $11::text[], $12::text[], $13::int8[], $14::text[], $15::int8[], $16::bool[], \
    $17::text[], $18::text[], $19::int8[], $20::text[], $21::int8[], $22::int8[]) \
    ON CONFLICT (id) DO NOTHING RETURNING id";

/// The feed's notices (`$2`, one a new task) on channel `$1`.
const NOTIFY: &str = "SELECT pg_notify($1, n) FROM unnest($2::text[]) AS n";

/// Many runs' journal writes (the arrays `$1` to `$6`: task, position,
/// kind, name, value, the run's fence): each task's row is read (the batch
/// holds it locked, [`LOCK_ROWS`]), and its entry written only if the fence
/// is its run's and the position is free. Answers, an item a row (`n` from 1 in
/// the arrays' order): the task's fence (`NULL` if it is gone), and whether
/// it wrote.
const APPEND_FENCED: &str = "WITH input AS (SELECT * FROM unnest($1::text[], $2::int8[], \
    $3::text[], $4::text[], $5::text[], $6::int8[]) WITH ORDINALITY \
    AS i(task_id, position, kind, name, value, fence, n)), \
    task AS (SELECT id, fence FROM tasks WHERE id = ANY($1)), \
    added AS (INSERT INTO journal (task_id, position, kind, name, value) \
    SELECT i.task_id, i.position, i.kind, i.name, i.value FROM input i \
    JOIN task t ON t.id = i.task_id AND t.fence = i.fence \
    ON CONFLICT (task_id, position) DO NOTHING RETURNING task_id) \
    SELECT i.n, t.fence, EXISTS (SELECT 1 FROM added a WHERE a.task_id = i.task_id) \
    FROM input i LEFT JOIN task t ON t.id = i.task_id";

/// The rows of the tasks `$1`, locked until the batch commits, in id order
/// (so that two batches lock the rows they share in the same order).
const SELECT_FOR_UPDATE: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM tasks WHERE id = ANY($1) ORDER BY id FOR UPDATE"
);

/// The write-back of many changed tasks (`$1` to `$13` arrays, as
/// `rows::UPDATE_STATE` binds one), with the feed's notice of each (`$14`,
/// on channel `$15`), sent at commit.
const UPDATE_TASKS: &str = "WITH input AS (SELECT * FROM unnest($1::text[], $2::text[], \
    $3::text[], $4::int8[], $5::text[], $6::int8[], $7::bool[], $8::text[], $9::text[], \
    $10::int8[], $11::text[], $12::int8[], $13::int8[], $14::text[]) AS i(id, status, \
    status_message, updated_at_ms, pending, wake_at_ms, cancel_requested, result, error, \
    version, lease_owner, lease_expires_at_ms, fence, notice)), \
    changed AS (UPDATE tasks SET status = i.status, status_message = i.status_message, \
    updated_at_ms = i.updated_at_ms, pending = i.pending, wake_at_ms = i.wake_at_ms, \
    cancel_requested = i.cancel_requested, result = i.result, error = i.error, \
    version = i.version, lease_owner = i.lease_owner, \
    lease_expires_at_ms = i.lease_expires_at_ms, fence = i.fence \
    FROM input i WHERE tasks.id = i.id RETURNING i.notice) \
    SELECT pg_notify($15, notice) FROM changed";

/// Many runs' ends that finish their task (completed, failed or
/// cancelled, nothing to journal), in one statement with no read before it:
/// the arrays `$1` to `$8` (task, status, status message, pending, result,
/// error, the time, the run's fence). Each row is finished as
/// [`TaskRecord::apply`] finishes it, only while it is neither finished nor
/// fenced off (a row that another transaction held is checked again once
/// it is free), and the feed's notice of each goes on channel `$9`.
/// Answers the rows finished; the writer of any other (gone, finished,
/// fenced off, or with a status this build cannot read) writes alone,
/// reading the row first, to be told which.
const FINISH_TASKS: &str = concat!(
    "WITH input AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], \
    $5::text[], $6::text[], $7::int8[], $8::int8[]) AS i(id, status, status_message, pending, \
    result, error, now_ms, fence)), \
    changed AS (UPDATE tasks SET status = i.status, status_message = i.status_message, \
    pending = i.pending, result = i.result, error = i.error, wake_at_ms = NULL, \
    lease_owner = NULL, lease_expires_at_ms = NULL, \
    updated_at_ms = GREATEST(tasks.updated_at_ms, i.now_ms), version = tasks.version + 1 \
    FROM input i WHERE tasks.id = i.id AND tasks.status IN ('working', 'input_required') \
    AND tasks.fence = i.fence RETURNING tasks.*) \
    SELECT ",
    task_columns!(),
    ", pg_notify($9, id || ' changed') FROM changed"
);

/// Journals many entries of tasks the batch holds locked; a position taken
/// keeps its first entry.
const INSERT_ENTRIES: &str = "INSERT INTO journal (task_id, position, kind, name, value) \
    SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::text[], $5::text[]) \
    ON CONFLICT (task_id, position) DO NOTHING";

/// One batch: its jobs, and what they bind.
#[derive(Default)]
pub(super) struct Batch {
    creates: Vec<Pending<TaskRecord, ()>>,
    new: NewTasks,
    /// The feed's notices of the new tasks that are claimable.
    notices: Vec<String>,
    appends: Vec<Pending<AppendIn, Appended>>,
    appended: Appends,
    /// The ends that finish their task (one statement, no read first).
    finishes: Vec<Pending<EndIn, Option<TaskRecord>>>,
    finished: Finishes,
    /// The other ends (their rows read `FOR UPDATE`, applied here).
    ends: Vec<Pending<EndIn, Option<TaskRecord>>>,
    end_ids: Vec<String>,
}

/// A batch's outcomes, item by item, once it has committed.
pub(super) struct Outcomes {
    /// The ids of the tasks created (the others' ids were taken).
    created: HashSet<String>,
    /// Each append's, in order; `None` when the position was taken (the
    /// caller reads what it holds).
    appended: Vec<Option<Appended>>,
    /// Each finishing end's, in order; `None` when it did not finish its
    /// task (its writer writes alone, to be told why).
    finished: Vec<Option<Result<Option<TaskRecord>>>>,
    /// Each other end's, in order.
    ended: Vec<Result<Option<TaskRecord>>>,
}

impl Batch {
    /// Takes `job` in, binding its values; one that cannot be encoded is
    /// answered at once.
    pub(super) fn add(&mut self, job: Job) {
        match job {
            Job::Create(p) => match self.new.push(&p.input) {
                Ok(()) => {
                    let now = crate::clock::now_ms();
                    if p.input.claimable(now) {
                        self.notices.push(feed::payload(&p.input, now));
                    }
                    self.creates.push(*p);
                }
                Err(e) => p.done(Err(e.into())),
            },
            Job::Append(p) => {
                let (id, entry, fence) = &p.input;
                match sql::to_json(id, "journal value", &entry.value) {
                    Ok(value) => {
                        self.appended.entries.push(id, entry, value);
                        self.appended.fence.push(sql::clamp(*fence));
                        self.appends.push(p);
                    }
                    Err(e) => p.done(Err(e.into())),
                }
            }
            Job::End(p) => match self.finished.push(&p.input) {
                Ok(true) => self.finishes.push(p),
                Ok(false) => {
                    self.end_ids.push(p.input.0.clone());
                    self.ends.push(p);
                }
                Err(e) => p.done(Err(e.into())),
            },
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.creates.is_empty()
            && self.appends.is_empty()
            && self.finishes.is_empty()
            && self.ends.is_empty()
    }

    /// Answers every caller with its item's outcome.
    pub(super) fn answer(self, o: Outcomes) {
        for p in self.creates {
            let id = &p.input.id;
            let outcome = if o.created.contains(id) {
                Ok(())
            } else {
                Err(
                    StoreError::new(format!("could not create task {id}: it already exists"))
                        .into(),
                )
            };
            p.done(outcome);
        }
        for (p, outcome) in self.appends.into_iter().zip(o.appended) {
            match outcome {
                Some(outcome) => p.done(Ok(outcome)),
                None => p.alone(),
            }
        }
        for (p, outcome) in self.finishes.into_iter().zip(o.finished) {
            match outcome {
                Some(outcome) => p.done(outcome),
                None => p.alone(),
            }
        }
        for (p, outcome) in self.ends.into_iter().zip(o.ended) {
            p.done(outcome);
        }
    }

    /// Tells every caller to write alone.
    pub(super) fn alone(self) {
        self.creates.into_iter().for_each(Pending::alone);
        self.appends.into_iter().for_each(Pending::alone);
        self.finishes.into_iter().for_each(Pending::alone);
        self.ends.into_iter().for_each(Pending::alone);
    }

    /// Runs the batch's transaction on `c`; its items' outcomes once it has
    /// committed. An error: the transaction did not commit (or may not
    /// have), and the caller rolls back.
    pub(super) async fn run(
        &self,
        c: &Object,
        channel: &str,
    ) -> Result<Outcomes, tokio_postgres::Error> {
        let statements = try_join_all(
            [
                "BEGIN",
                PLANNING,
                LOCK_ROWS,
                "COMMIT",
                INSERT_TASKS,
                NOTIFY,
                APPEND_FENCED,
                FINISH_TASKS,
                SELECT_FOR_UPDATE,
                UPDATE_TASKS,
                INSERT_ENTRIES,
            ]
            .map(|sql| c.prepare_cached(sql)),
        )
        .await?;
        let [
            begin,
            planning,
            lock,
            commit,
            insert,
            notify,
            append,
            finish,
            select,
            update,
            journal,
        ] = <[Statement; 11]>::try_from(statements).unwrap_or_else(|_| unreachable!());
        let channel = &channel;
        let new = self.new.params();
        let notices: [&(dyn ToSql + Sync); 2] = [channel, &self.notices];
        let (a, e) = (&self.appended, &self.appended.entries);
        let appends: [&(dyn ToSql + Sync); 6] = [
            &e.task_id,
            &e.position,
            &e.kind,
            &e.name,
            &e.value,
            &a.fence,
        ];
        let finishes = self.finished.params(channel);
        let ids: [&(dyn ToSql + Sync); 1] = [&self.end_ids];
        // The rows to lock: those of every append, finish and other end.
        let rows: Vec<&str> = self
            .appends
            .iter()
            .map(|p| p.input.0.as_str())
            .chain(self.finishes.iter().map(|p| p.input.0.as_str()))
            .chain(self.end_ids.iter().map(String::as_str))
            .collect();
        let held: [&(dyn ToSql + Sync); 1] = [&rows];
        // Sent together, in this order (each is sent when first polled);
        // the commit too when there is no end to apply in between.
        let (_, _, _, created, _, appended, finished, selected, _) = futures::try_join!(
            c.execute(&begin, &[]),
            c.query(&planning, &[]),
            when(!rows.is_empty(), c.query(&lock, &held)),
            when(!self.creates.is_empty(), c.query(&insert, &new)),
            when(!self.notices.is_empty(), c.execute(&notify, &notices)),
            when(!self.appends.is_empty(), c.query(&append, &appends)),
            when(!self.finishes.is_empty(), c.query(&finish, &finishes)),
            when(!self.ends.is_empty(), c.query(&select, &ids)),
            when(self.ends.is_empty(), c.execute(&commit, &[])),
        )?;
        let (ended, changed, entries) = self.apply(selected.unwrap_or_default());
        if !self.ends.is_empty() {
            let (update_params, entry_params) = (changed.params(channel), entries.params());
            futures::try_join!(
                when(!changed.id.is_empty(), c.execute(&update, &update_params)),
                when(
                    !entries.task_id.is_empty(),
                    c.execute(&journal, &entry_params)
                ),
                c.execute(&commit, &[]),
            )?;
        }
        // Committed: no error from here on (the answers' columns are
        // typed by the statements; an item whose answer is missing is
        // written again alone, or refused as a duplicate).
        let created = created
            .unwrap_or_default()
            .iter()
            .filter_map(|row| row.try_get(0).ok())
            .collect();
        let mut outcomes = vec![None; self.appends.len()];
        for row in appended.unwrap_or_default() {
            let Ok((n, fence, wrote)) = (|| {
                Ok::<_, tokio_postgres::Error>((
                    row.try_get::<_, i64>(0)?,
                    row.try_get::<_, Option<i64>>(1)?,
                    row.try_get::<_, bool>(2)?,
                ))
            })() else {
                continue;
            };
            let i = usize::try_from(n - 1).unwrap_or(usize::MAX);
            let (Some(slot), Some(own)) = (outcomes.get_mut(i), self.appended.fence.get(i)) else {
                continue;
            };
            *slot = if fence != Some(*own) {
                Some(Appended::Fenced)
            } else if wrote {
                Some(Appended::Recorded)
            } else {
                None
            };
        }
        let mut finished: HashMap<String, Result<TaskRecord>> = finished
            .unwrap_or_default()
            .iter()
            .filter_map(|row| Some((row.try_get::<_, String>(0).ok()?, sql::decode_task(row))))
            .collect();
        let finished = self
            .finishes
            .iter()
            .map(|p| Some(finished.remove(&p.input.0)?.map(Some)))
            .collect();
        Ok(Outcomes {
            created,
            appended: outcomes,
            finished,
            ended,
        })
    }

    /// Applies each end to its task's row, as read in `selected`: the
    /// outcome of each (in the order of `self.ends`), and the rows and
    /// entries to write.
    fn apply(&self, selected: Vec<Row>) -> (Vec<Result<Option<TaskRecord>>>, Changed, Entries) {
        let mut rows: HashMap<String, Result<TaskRecord>> = selected
            .iter()
            .filter_map(|row| Some((row.try_get::<_, String>(0).ok()?, sql::decode_task(row))))
            .collect();
        let (mut changed, mut entries) = (Changed::default(), Entries::default());
        let outcomes = self
            .ends
            .iter()
            .map(|p| {
                let (id, staged, change, now_ms, fence) = &p.input;
                let Some(mut record) = rows.remove(id).transpose()? else {
                    return Ok(None);
                };
                if !record.apply_fenced(change.clone(), *now_ms, *fence) {
                    return Ok(None);
                }
                let mut values = Vec::with_capacity(staged.len());
                for e in staged {
                    values.push(sql::to_json(id, "journal value", &e.value)?);
                }
                changed.push(&record, *now_ms)?;
                for (e, value) in staged.iter().zip(values) {
                    entries.push(id, e, value);
                }
                Ok(Some(record))
            })
            .collect();
        (outcomes, changed, entries)
    }
}

/// `f`'s output if `cond`, without polling it otherwise.
async fn when<T, E>(cond: bool, f: impl Future<Output = Result<T, E>>) -> Result<Option<T>, E> {
    if cond { f.await.map(Some) } else { Ok(None) }
}
