//! The one way into the engine: a [`Call`] of a tool, answered with a
//! [`CallOutcome`]. Whether the call becomes a task, runs inline, or starts
//! inline and carries on as a task is decided here, once, from the tool's
//! policy and what the caller can take.

use std::{net::IpAddr, time::Duration};

use serde_json::{Map, Value};

use super::{Engine, keys, limits, runner::Start};
use crate::{
    error::{Error, Result, RpcError},
    id,
    input::InputCapabilities,
    journal::{JournalEntry, PendingInput},
    store::{TaskRecord, Transition},
    task::{Exit, Run, TaskCtx, TaskInfo},
    tool::{JsonObject, TaskPolicy, ToolFuture, ToolOutcome},
};

/// Whether the caller can take a task handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CallMode {
    /// The caller takes tasks (it declared the tasks extension): a
    /// task-capable tool answers with a task, unless it finishes or asks a
    /// question within the call's inline window.
    #[default]
    Task,
    /// The caller cannot take a task: the tool runs inline, its questions
    /// come back as [`CallOutcome::InputRequired`], and a `required` tool is
    /// refused with [`Error::TaskRequired`].
    Inline,
}

/// A call of a tool. Built with [`Call::new`] and its setters.
#[derive(Debug, Clone)]
#[must_use = "a call does nothing until passed to `Engine::call`"]
pub struct Call {
    pub(super) tool: String,
    pub(super) arguments: JsonObject,
    pub(super) principal: Option<String>,
    pub(super) client_addr: Option<IpAddr>,
    pub(super) capabilities: InputCapabilities,
    pub(super) mode: CallMode,
    pub(super) inline_window: Duration,
    pub(super) journal: Vec<JournalEntry>,
    pub(super) answers: Map<String, Value>,
    /// A later round of an inline call (see [`Call::resume`]).
    pub(super) resumed: bool,
    /// The id of the task this call creates, if it creates one: drawn when
    /// the engine takes the call, so that a quota can hold it.
    pub(super) task_id: Option<String>,
    /// The caller's idempotency key ([`Call::idempotency_key`]).
    pub(super) key: Option<String>,
}

impl Call {
    /// A call of `tool` with `arguments`, from a caller that takes tasks,
    /// declares no input capabilities, and has no inline window.
    pub fn new(tool: impl Into<String>, arguments: JsonObject) -> Self {
        Self {
            tool: tool.into(),
            arguments,
            principal: None,
            client_addr: None,
            capabilities: InputCapabilities::NONE,
            mode: CallMode::Task,
            inline_window: Duration::ZERO,
            journal: Vec::new(),
            answers: Map::new(),
            resumed: false,
            task_id: None,
            key: None,
        }
    }

    builder_setters! {
        /// Who calls: a task created by the call is visible to this principal
        /// only.
        pub fn principal(Option<String>) => principal;

        /// The address of the client making the call, when it has one (the
        /// MCP server passes the peer of the HTTP connection; stdio has none).
        /// A call without a principal counts against its address's create
        /// limits ([`Limits::creates_per_second`],
        /// [`Limits::max_unfinished_per_address`]), so that one anonymous
        /// client cannot lock out another; a call with neither counts with
        /// every other such call. A call with a principal counts against its
        /// principal, whatever its address.
        ///
        /// ```
        /// use mcp_tasks_runtime::engine::Call;
        ///
        /// let call = Call::new("hello", Default::default())
        ///     .client_addr(Some("192.0.2.7".parse().unwrap()));
        /// # drop(call);
        /// ```
        ///
        /// [`Limits::creates_per_second`]: super::Limits::creates_per_second
        /// [`Limits::max_unfinished_per_address`]: super::Limits::max_unfinished_per_address
        pub fn client_addr(Option<IpAddr>) => client_addr;

        /// What the caller can answer.
        pub fn capabilities(InputCapabilities) => capabilities;

        /// Whether the caller takes a task handle.
        pub fn mode(CallMode) => mode;

        /// For a task-capable call: run inline for up to this window first. A call
        /// that finishes in the window gets its result, one that asks a
        /// question gets [`CallOutcome::InputRequired`], and otherwise the call
        /// becomes a task when the window ends, with the steps in flight then
        /// still running: the same run carries on as the task's, and nothing
        /// runs twice. A question asked in flight
        /// ([`ask_in_flight`](crate::durable::ask_in_flight)) ends the window
        /// early: it needs a task to wait in.
        pub fn inline_window(Duration) => inline_window;
    }

    /// The caller's idempotency key: a call that creates a task with a key
    /// returns the task an earlier call with the same key, tool and
    /// principal created, for as long as that task is kept, on any instance
    /// sharing the store, and a repeat with other arguments is refused
    /// ([`Error::IdempotencyKey`]). The key must be 16 to 255 visible ASCII
    /// characters, and random: without a principal, whoever sends it finds
    /// the task. A keyed call creates its task at once (no inline window),
    /// so that the store, not a race, decides which call runs. A call that
    /// creates no task (inline) ignores its key.
    ///
    /// ```
    /// use mcp_tasks_runtime::engine::Call;
    ///
    /// let call = Call::new("deploy", Default::default())
    ///     .idempotency_key("3f2a9c1e-7b4d-4e8a-9f6c-2d1b0a9e8c7f");
    /// # drop(call);
    /// ```
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// A later round of an inline call: the journal the earlier rounds
    /// recorded and the answers to the last round's questions, by key.
    /// Recorded steps are not run again.
    pub fn resume(mut self, journal: Vec<JournalEntry>, answers: Map<String, Value>) -> Self {
        self.journal = journal;
        self.answers = answers;
        self.resumed = true;
        self
    }
}

/// How a [`Call`] was answered.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum CallOutcome {
    /// A task: durable before this returns (running, or already finished
    /// when a `required` tool finished within the inline window).
    Task(Box<TaskRecord>),
    /// The tool ran inline and finished.
    Finished(ToolOutcome),
    /// The tool ran inline and asked the caller something: answer the
    /// questions and call again with [`Call::resume`] and this journal.
    InputRequired {
        /// The questions.
        requests: Vec<PendingInput>,
        /// The journal so far (to carry in an integrity-protected `requestState`).
        journal: Vec<JournalEntry>,
    },
}

impl Engine {
    /// Calls a tool. The arguments are decoded once; bad ones are refused
    /// before anything runs or is stored.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTool`]; [`Error::InvalidArguments`] naming the field
    /// (or an argument the tool's closed input schema does not list);
    /// [`Error::LimitExceeded`] naming the [`Limits`](super::Limits) field;
    /// [`Error::TaskRequired`] for a `required` tool called in
    /// [`CallMode::Inline`]; [`Error::ShuttingDown`] for a new call (not a
    /// [`Call::resume`]) once the engine drains ([`Engine::admit_call`]);
    /// store failures.
    pub async fn call(&self, mut call: Call) -> Result<CallOutcome> {
        if !call.resumed {
            self.admit_call()?;
        }
        // The tools as they are now: this call keeps its tool to its end,
        // whatever `Engine::set_registry` does meanwhile.
        let tools = self.inner.tools.current();
        let entry = tools
            .get(&call.tool)
            .ok_or_else(|| Error::UnknownTool(call.tool.clone()))?;
        let tool = entry.descriptor();
        self.check_call(&call, entry.definition())?;
        let fut = tool
            .prepare(call.arguments.clone(), &self.inner.state)
            .map_err(|message| Error::InvalidArguments {
                tool: call.tool.clone(),
                message,
            })?;
        let policy = tool.policy();
        if call.mode == CallMode::Inline && policy == TaskPolicy::Required {
            return Err(Error::TaskRequired(call.tool));
        }
        let as_task = call.mode == CallMode::Task && policy != TaskPolicy::Forbidden;
        let keyed = as_task && call.key.is_some();
        if as_task {
            let id = match &call.key {
                Some(key) => {
                    keys::check(key)?;
                    let id = keys::task_id(call.principal.as_deref(), &call.tool, key);
                    if let Some(record) = self.keyed_task(&call, &id).await? {
                        return Ok(CallOutcome::Task(Box::new(record)));
                    }
                    id
                }
                None => id::random_hex(),
            };
            self.check_creates(&call, &id).await?;
            call.task_id = Some(id);
        }
        if as_task && (call.inline_window.is_zero() || keyed) && !call.resumed {
            let record = self.start_task(&call, fut).await?;
            return Ok(CallOutcome::Task(Box::new(record)));
        }
        let window = as_task.then_some(call.inline_window);
        let (exit, journal) = match self.run_inline(&mut call, fut, window).await? {
            Inline::Ended(exit, journal) => (exit, journal),
            Inline::BecameTask(record) => return Ok(CallOutcome::Task(record)),
        };
        let exit = self.cap_inline(exit, &journal);
        Ok(match exit {
            Exit::Done(outcome) if as_task && policy == TaskPolicy::Required => {
                // A required tool always answers with a task: here one that
                // is already finished.
                let end = match outcome {
                    Ok(result) => Transition::Complete(result),
                    Err(error) => Transition::Fail(error),
                };
                CallOutcome::Task(Box::new(self.finished_task(&call, end).await?))
            }
            Exit::Done(outcome) => CallOutcome::Finished(outcome),
            // The fn ended itself cancelled (`ToolError::cancelled`).
            Exit::Cancelled if as_task && policy == TaskPolicy::Required => CallOutcome::Task(
                Box::new(self.finished_task(&call, Transition::Cancel).await?),
            ),
            // Inline there is no task to end: the caller gets a tool error
            // that says so (outside the run, `failure` ends nothing).
            Exit::Cancelled => {
                CallOutcome::Finished(crate::tool::output::failure(&crate::ToolError::cancelled()))
            }
            Exit::Park(requests) => CallOutcome::InputRequired { requests, journal },
            Exit::Fail(e) => CallOutcome::Finished(Err(e)),
            // An inline run waits out its timers in place and has no record
            // to be cancelled or ended through.
            other @ (Exit::Sleep(_) | Exit::Ended | Exit::Lost | Exit::Replayed) => {
                CallOutcome::Finished(Err(RpcError::internal(format!(
                    "the tool stopped unexpectedly: {other:?}"
                ))))
            }
        })
    }

    /// Refuses, before anything runs, a call over the size limits or with
    /// an argument a closed input schema does not list.
    fn check_call(&self, call: &Call, definition: &JsonObject) -> Result<()> {
        let config = &self.inner.config.limits;
        limits::check_size(
            "max_argument_bytes",
            "the arguments",
            limits::json_len(&call.arguments),
            config.max_argument_bytes,
        )?;
        config.check_answers(&call.answers)?;
        let empty = JsonObject::new();
        let schema = definition
            .get("inputSchema")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        if let Some(key) = limits::unknown_argument(schema, &call.arguments) {
            let known: Vec<String> = schema
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| p.keys().map(|k| format!("`{k}`")).collect())
                .unwrap_or_default();
            let takes = if known.is_empty() {
                "it takes no arguments".to_owned()
            } else {
                format!("it takes {}", known.join(", "))
            };
            return Err(Error::InvalidArguments {
                tool: call.tool.clone(),
                message: format!("unknown argument `{key}`: {takes}"),
            });
        }
        Ok(())
    }

    /// Refuses a call that may create a task (as `id`) when its caller
    /// ([`limits::Quota`]) has too many unfinished ones, or creates them too
    /// fast.
    async fn check_creates(&self, call: &Call, id: &str) -> Result<()> {
        let config = &self.inner.config.limits;
        let now = self.inner.clock.now_ms();
        let quota = limits::Quota::of(call.principal.as_deref(), call.client_addr);
        if let Err(wait) =
            self.inner
                .create_rate
                .take(&quota, now, config.creates_per_second, config.create_burst)
        {
            return Err(Error::LimitExceeded {
                limit: "creates_per_second",
                message: format!(
                    "too many calls: at most {} per second (a burst of {}) for one caller; \
                     retry in {wait} ms (creates_per_second)",
                    config.creates_per_second, config.create_burst
                ),
                retry_after_ms: Some(wait),
            });
        }
        match (&quota, quota.principal()) {
            (_, Some(principal)) => self.check_unfinished(principal, now).await,
            (limits::Quota::Address(addr), None) => self.check_unfinished_at(*addr, id, now).await,
            (_, None) => Ok(()),
        }
    }

    /// Refuses a task of `principal`'s over
    /// [`Limits::max_unfinished_per_principal`](super::Limits::max_unfinished_per_principal).
    async fn check_unfinished(&self, principal: Option<&str>, now: i64) -> Result<()> {
        let limit = self.inner.config.limits.max_unfinished_per_principal;
        if self.inner.unfinished.take(principal, now, limit) {
            return Ok(());
        }
        let unfinished = self.inner.store.count_unfinished(principal).await?;
        if !self
            .inner
            .unfinished
            .counted(principal, now, unfinished, limit)
        {
            return Err(Error::LimitExceeded {
                limit: "max_unfinished_per_principal",
                message: format!(
                    "too many unfinished tasks: this caller has {unfinished}, the limit is {limit} \
                     (max_unfinished_per_principal); wait for some to finish or cancel them"
                ),
                retry_after_ms: None,
            });
        }
        Ok(())
    }

    /// Refuses task `id` of a call from `addr` without a principal over
    /// [`Limits::max_unfinished_per_address`](super::Limits::max_unfinished_per_address).
    async fn check_unfinished_at(&self, addr: IpAddr, id: &str, now: i64) -> Result<()> {
        let limit = self.inner.config.limits.max_unfinished_per_address;
        let Err(held) = self.inner.by_address.take(addr, id, now, limit) else {
            return Ok(());
        };
        let unfinished = self.inner.store.unfinished_among(&held).await?;
        match self
            .inner
            .by_address
            .weeded(addr, &held, &unfinished, id, now, limit)
        {
            Ok(()) => Ok(()),
            Err(count) => Err(Error::LimitExceeded {
                limit: "max_unfinished_per_address",
                message: format!(
                    "too many unfinished tasks: this client address has {count}, the limit is \
                     {limit} (max_unfinished_per_address); wait for some to finish or cancel them"
                ),
                retry_after_ms: None,
            }),
        }
    }

    /// An inline run's exit, failed when its result or a journaled step
    /// is over the size limits.
    fn cap_inline(&self, exit: Exit, journal: &[JournalEntry]) -> Exit {
        if let Some(error) = self.oversized(journal) {
            return Exit::Fail(error);
        }
        match exit {
            Exit::Done(Ok(result)) => Exit::Done(self.inner.cap_result(result)),
            other => other,
        }
    }

    /// The error of the first step in `journal` whose value is over
    /// [`Limits::max_journal_entry_bytes`](super::Limits::max_journal_entry_bytes).
    fn oversized(&self, journal: &[JournalEntry]) -> Option<RpcError> {
        let max = self.inner.config.limits.max_journal_entry_bytes;
        journal.iter().find_map(|entry| {
            let len = limits::json_len(&entry.value);
            (len > max).then(|| {
                limits::size_error(
                    "max_journal_entry_bytes",
                    &format!("the value of step `{}`", entry.name),
                    len,
                    max,
                )
            })
        })
    }

    /// Stores a new task and starts it: `fut` is the call's prepared run.
    async fn start_task(&self, call: &Call, fut: ToolFuture) -> Result<TaskRecord> {
        let mut record = self.new_record(call);
        // Created claimed by this instance, which runs it, when a worker is
        // free here; otherwise left for whichever instance is free first
        // (the store's feed, or the scans, announce it).
        let config = &self.inner.config;
        let free = self.inner.permits.available_permits() > 0;
        if free {
            let until = record.created_at_ms.saturating_add(config.lease_ms());
            record.claim(&config.owner, record.created_at_ms, until);
        }
        if let Err(e) = self.inner.store.create(record.clone()).await {
            // A keyed call that lost the race to create its task gets the
            // task that won, which runs where it was created.
            let stored = match call.key {
                Some(_) => self.keyed_task(call, &record.id).await?,
                None => None,
            };
            let ours = stored.as_ref().is_none_or(|s| {
                (s.created_at_ms, &s.lease) == (record.created_at_ms, &record.lease)
            });
            // The task may have been stored, leased to this instance, with
            // its answer lost: it is followed as a run given up here is.
            if ours && record.lease.is_some() {
                self.inner.watch.give_up(&record.id);
            }
            return stored.ok_or(e);
        }
        self.created(&record);
        let start = match record.lease {
            Some(_) => Start::Fresh {
                record: Box::new(record.clone()),
                fut,
            },
            None => Start::Resume,
        };
        self.inner.spawn(record.id.clone(), start);
        Ok(record)
    }

    /// Says that `record` was created.
    fn created(&self, record: &TaskRecord) {
        tracing::info!(task = %id::task_ref(&record.id), tool = %record.tool, "task created");
        crate::metrics::created(&record.tool);
        self.inner.timers.expires(record.expires_at_ms());
    }

    /// Stores the task an inline call becomes, claimed by this instance,
    /// with `journal`, what its run recorded so far.
    async fn become_task(&self, call: &Call, journal: Vec<JournalEntry>) -> Result<TaskRecord> {
        let mut record = self.new_record(call);
        let config = &self.inner.config;
        let until = record.created_at_ms.saturating_add(config.lease_ms());
        record.claim(&config.owner, record.created_at_ms, until);
        let store = &self.inner.store;
        let created = if journal.is_empty() {
            store.create(record.clone()).await
        } else {
            store.create_with_journal(record.clone(), journal).await
        };
        if let Err(e) = created {
            // It may have been stored, its answer lost: leased here with no
            // run, it is followed as a run given up here is.
            self.inner.watch.give_up(&record.id);
            return Err(e);
        }
        self.created(&record);
        Ok(record)
    }

    /// Stores a task that already ended with `end`.
    async fn finished_task(&self, call: &Call, end: Transition) -> Result<TaskRecord> {
        let mut record = self.new_record(call);
        record.apply(end, record.created_at_ms);
        self.inner.store.create(record.clone()).await?;
        crate::metrics::created(&record.tool);
        crate::metrics::finished(&record.tool, record.status.as_str(), 0);
        self.inner.timers.expires(record.expires_at_ms());
        Ok(record)
    }

    /// A fresh `working` record for `call` with the tool's (or the engine's)
    /// TTL and poll interval.
    fn new_record(&self, call: &Call) -> TaskRecord {
        let config = &self.inner.config;
        let tools = self.inner.tools.current();
        let tool = tools.get(&call.tool).map(|t| t.descriptor());
        let ttl = tool.and_then(|d| d.ttl()).or(config.default_ttl);
        let poll = tool
            .and_then(|d| d.poll_interval())
            .unwrap_or(config.default_poll_interval);
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let mut record = TaskRecord::new(
            call.task_id.clone().unwrap_or_else(id::random_hex),
            call.tool.clone(),
            self.inner.clock.now_ms(),
        );
        record.arguments = call.arguments.clone();
        record.client_capabilities = call.capabilities;
        record.principal = call.principal.clone();
        record.ttl_ms = ttl.map(millis);
        record.poll_interval_ms = Some(millis(poll));
        record.tool_version = tool.map_or(1, |d| d.version());
        record
    }
}

/// How an inline run ended.
enum Inline {
    /// It ended in the call: how, and its whole journal.
    Ended(Exit, Vec<JournalEntry>),
    /// Its window ended first (or a question asked in flight needed a
    /// task): it goes on as this task.
    BecameTask(Box<TaskRecord>),
}

impl Engine {
    /// Runs a call inline: to its end when there is no `window`; otherwise
    /// for at most `window`, after which the same run goes on as the call's
    /// task, the steps in flight still running.
    async fn run_inline(
        &self,
        call: &mut Call,
        fut: ToolFuture,
        window: Option<Duration>,
    ) -> Result<Inline> {
        let inner = &self.inner;
        // The semaphore is never closed; were it, the call would run anyway.
        let permit = inner.inline_permits.clone().acquire_owned().await;
        let run = Run {
            task_id: String::new(),
            journal: std::mem::take(&mut call.journal),
            caps: call.capabilities,
            recorder: None,
            record: None,
            answers: std::mem::take(&mut call.answers),
            holder: None,
            let_go: None,
            info: TaskInfo::inline(&call.tool, call.principal.as_deref()),
            clock: inner.clock.clone(),
            max_entries: inner.max_journal_entries(),
            sleep_in_process_ms: inner.config.sleep_in_process_ms(),
        };
        let Some(window) = window else {
            let ctx = TaskCtx::new(run);
            let exit = ctx.drive(fut).await;
            return Ok(Inline::Ended(exit, ctx.take_journal()));
        };
        let ctx = TaskCtx::in_window(run);
        let mut driving = {
            let ctx = ctx.clone();
            Box::pin(async move { ctx.drive(fut).await })
        };
        let Some(hurry) = &ctx.hurry else {
            unreachable!("a context in a window can be hurried")
        };
        tokio::select! {
            biased;
            exit = &mut driving => return Ok(Inline::Ended(exit, ctx.take_journal())),
            () = tokio::time::sleep(window) => {}
            () = hurry.notified() => {}
        }
        // From here a step's value waits for the task to record it.
        let journal = ctx.moving();
        // A step recorded inline over the size limits fails the call, as it
        // would have at its end; on an error the run is dropped here,
        // mid-step: the call failed.
        if let Some(error) = self.oversized(&journal) {
            return Ok(Inline::Ended(Exit::Fail(error), journal));
        }
        let record = self.become_task(call, journal).await?;
        inner.carry_on(&record, ctx, driving, permit);
        Ok(Inline::BecameTask(Box::new(record)))
    }
}
