//! Any MCP server's tools as durable tasks.
//!
//! A [`Gateway`] connects to an upstream MCP server (a command spoken to over
//! stdio, or a Streamable HTTP URL), reads its tools, and hands the runtime a
//! [`Registry`] in which each of them is a task tool: the engine, its stores,
//! its front door, limits, auth and fleet serve them as they serve any
//! `#[task_tool]`. The upstream needs no change: its tools and schemas are
//! shown to clients as the upstream gave them, and each call runs upstream
//! as the task's one step. What is not a task (the tools whose policy is
//! `forbidden`, and the upstream's prompts, resources and completions) is
//! passed upstream as it comes by [`Gateway::passthrough`], which the
//! front door serves beside the task tools.
//!
//! The crate's binary, `mcp-tasks-gateway` (`cargo install
//! mcp-tasks-gateway`; `--help` lists its options), is all of this behind
//! an mcp-tasks server's command line (the `cli` feature, on by default;
//! `default-features = false` leaves the library alone, without it).
//!
//! Which tools are tasks: the operator says ([`GatewayBuilder::policy`],
//! `--task-policy TOOL=POLICY`), else the upstream's
//! `execution.taskSupport`, else the gateway's default
//! ([`GatewayBuilder::default_policy`], `--task-policy '*=POLICY'`), which
//! is `optional`: every tool a task for the clients that can take one. A
//! 2026-07-28 upstream declares no policy (that era's wire has none), nor
//! do most 2025-11-25 servers (and rmcp 3.11, whose client the gateway
//! speaks with, drops `execution` from the tools it lists, so that a tool
//! run only as a task upstream is known by its refusal of a plain call:
//! below), so an operator who fronts a server whose
//! quick tools should stay plain calls names its long ones and sets the
//! default to `forbidden`. The official conformance suite's 2026-07-28 and
//! 2025-11-25 requirements and its `tasks-*` scenarios run that way against
//! the gateway in front of a server written with the official TypeScript
//! SDK (`tests/e2e/gateway_conformance.rs`, the one fixture that asks
//! before its task exists given an inline window, below): every check
//! passes but two, of resource subscriptions, which the gateway does not
//! relay.
//!
//! # The restart rule
//!
//! A gateway that restarts (or loses the task to another instance) while an
//! upstream call is in flight cannot know whether the upstream ran it. It
//! calls the tool again only when that is safe: the tool declares
//! `idempotentHint: true`, or the operator listed it with
//! [`GatewayBuilder::repeat_safe`]. Every other such task ends `failed`,
//! with a message saying that the call may or may not have run upstream and
//! why it was not repeated. A call that finished upstream is never repeated:
//! its result is what the task ended with.
//!
//! # A task's life
//!
//! - The call is journaled as started before it is sent (that mark is what
//!   the restart rule reads), and the task ends with the upstream's
//!   `CallToolResult`, `isError` included; a JSON-RPC error from the
//!   upstream fails the task with the same code and message.
//! - Upstream progress (`notifications/progress`) becomes the task's
//!   `statusMessage`.
//! - `tasks/cancel` stops the task and sends `notifications/cancelled` for
//!   the call upstream (and `tasks/cancel` for its upstream task, below).
//! - A lost upstream connection (a stdio upstream that exits, say) leaves
//!   the calls in flight on it as unknown as a restart does, and the same
//!   rule applies: a tool safe to repeat is called again, once, on a new
//!   connection; any other call fails saying it may or may not have run.
//!
//! ```no_run
//! use mcp_tasks_gateway::{Gateway, Upstream};
//! use mcp_tasks_runtime::{Engine, mcp::{self, TaskServer}, store::SqliteStore};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let gateway = Gateway::builder(Upstream::command("npx", ["-y", "@modelcontextprotocol/server-everything"]))
//!     .repeat_safe("get-sum")
//!     .connect()
//!     .await?;
//! let engine = Engine::builder(SqliteStore::open("gateway.db").await?)
//!     .registry(gateway.registry()?)
//!     .start()
//!     .await?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! mcp::serve(listener, TaskServer::builder(engine).build()).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Questions the upstream asks
//!
//! The gateway declares elicitation (form and URL), sampling and roots
//! upstream, and relays each question to the client of the call it belongs
//! to, with the same form; a client that did not declare the capability
//! gets no question, and the upstream gets an error back.
//!
//! - An upstream of 2026-07-28 asks by answering the call with an
//!   `InputRequiredResult`. That answer is journaled, the task parks in
//!   `input_required` with the same requests (under the upstream's keys
//!   where the task has not used them), and once they are answered the
//!   upstream is called again with `inputResponses` and its
//!   `requestState`. Nothing is in flight upstream while the task waits:
//!   the question survives restarts like any other, and is answered
//!   through any instance. (An upstream that seals its `requestState` with
//!   a key only its own process holds, the Python SDK's default, refuses
//!   it once that process restarted: the task then fails with the
//!   upstream's error. Give such an upstream a key of its own to keep.)
//! - An upstream of 2025-11-25 asks with a request of its own while the
//!   call runs (`elicitation/create`, `sampling/createMessage`,
//!   `roots/list`). The task shows `input_required` while the call stays
//!   in flight ([`durable::ask_in_flight`](mcp_tasks_runtime::durable::ask_in_flight)),
//!   and the client's answer, given to any instance, goes back upstream as
//!   the answer to that request. Such a question lasts as long as the call:
//!   a gateway that restarts meanwhile applies the restart rule.
//!
//! Each session to the upstream carries one call at a time
//! ([`GatewayBuilder::sessions`]), so whatever the upstream sends on it
//! belongs to that call. A session that answered `roots/list` is not used
//! again (an upstream may keep a session's roots, and the next call may be
//! another client's), nor is one whose call was dropped mid-way.
//!
//! # Changes to the upstream's tools
//!
//! [`Gateway::follow`] keeps the engine's tools the upstream's: when the
//! upstream says its tools changed, the gateway lists them again and the
//! engine's clients hear of it (`notifications/tools/list_changed`, or
//! their `subscriptions/listen` stream).
//!
//! # An inline window
//!
//! With the runtime's inline window
//! ([`TaskServerBuilder::inline_window`](mcp_tasks_runtime::mcp::TaskServerBuilder::inline_window),
//! `--inline-window TOOL=MS` in the binary) a call first runs for up to the
//! window before the client is answered: an upstream that answers within it
//! gives the client its result as a plain call would, and the questions of
//! a 2026-07-28 upstream's `InputRequiredResult` go back to the client as
//! the gateway's own (MRTR, no task made yet). Once the window ends the
//! client gets the task, and the upstream call in flight goes on as the
//! task's, its answer journaled there; a question a 2025-11-25 upstream asks
//! during the call ends the window at once (it waits in the task).

//! # Tools that run as a task upstream
//!
//! A tool that an upstream of 2025-11-25 runs only as a task
//! (`execution.taskSupport: "required"`; a tool the upstream refuses to
//! run plainly with `-32601`, which runs nothing, likewise) is called as a
//! task there (`params.task`), and the client sees one task, the
//! gateway's. The upstream task's id is journaled as soon as it is known;
//! its `statusMessage` (`tasks/get`, at its `pollInterval`) becomes the
//! task's; `tasks/result` waits for its end on the call's session, where
//! the questions the upstream task asks come, and are asked in flight as
//! above. `tasks/cancel` of the task cancels the upstream task; a run that
//! stops otherwise (a lost lease, a shutdown) leaves it running. After a
//! restart, the replay follows the same upstream task if the upstream still
//! has it (an HTTP upstream that lived on, and keeps tasks beyond a
//! session); if not (a stdio upstream's tasks die with it), the restart
//! rule applies. A tool declared `"optional"` is called plainly, as the
//! upstream allows.
//!
//! A 2026-07-28 upstream that answers a call with a task of its own (the
//! gateway declares the tasks extension to it) is followed with `tasks/get`
//! at the `pollIntervalMs` it asks for: its status message becomes the
//! task's, its questions (`input_required`) park the task as the gateway's
//! own and their answers go upstream with `tasks/update`, and its inlined
//! result or error ends the task. Its id is journaled as above, and after a
//! restart the replay reads the same upstream task again.

mod call;
mod passthrough;
mod upstream;
mod upstream_task;

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use mcp_tasks_runtime::{
    Engine,
    tool::{JsonObject, Location, Registry, TaskPolicy, ToolDescriptor},
};

pub use crate::{passthrough::Passthrough, upstream::Upstream};

/// How many sessions a gateway opens to its upstream at most, unless
/// [`GatewayBuilder::sessions`] says otherwise.
pub const DEFAULT_SESSIONS: usize = 16;

/// Why a gateway could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GatewayError {
    /// The upstream could not be reached, or did not complete the MCP
    /// handshake.
    #[error("could not connect to the upstream {upstream}: {message}")]
    Connect {
        /// The upstream, as [`Upstream`]'s `Display` shows it.
        upstream: String,
        /// What went wrong.
        message: String,
    },
    /// The upstream's `tools/list` failed.
    #[error("the upstream {upstream} did not list its tools: {message}")]
    ListTools {
        /// The upstream.
        upstream: String,
        /// What went wrong.
        message: String,
    },
    /// An upstream tool cannot be served (say, its definition is not valid
    /// MCP), or the gateway's configuration names a tool the upstream lacks.
    #[error(transparent)]
    Tool(#[from] mcp_tasks_runtime::Error),
    /// The configuration names a tool the upstream does not offer.
    #[error("the upstream offers no tool named `{0}` (named by the gateway's configuration)")]
    UnknownTool(String),
}

/// A connected gateway: the upstream's tools, ready to serve as task tools
/// ([`Gateway::registry`]).
#[derive(Debug, Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    upstream: upstream::Sessions,
    /// The upstream's tool definitions, as it last listed them.
    tools: std::sync::RwLock<Arc<Vec<JsonObject>>>,
    repeat_safe: BTreeSet<String>,
    policies: BTreeMap<String, TaskPolicy>,
    /// The policy of a tool that neither the operator nor the upstream
    /// gives one.
    default_policy: TaskPolicy,
}

impl Inner {
    /// `tool`'s task policy: the operator's, else the upstream's
    /// `execution.taskSupport`, else the default.
    fn policy(&self, definition: &JsonObject, tool: &str) -> TaskPolicy {
        if let Some(policy) = self.policies.get(tool) {
            return *policy;
        }
        declared(definition).unwrap_or(self.default_policy)
    }

    /// Whether `tool` is served as a task tool (not passed on as a plain
    /// call: [`Passthrough`]).
    fn tasked(&self, definition: &JsonObject, tool: &str) -> bool {
        self.policy(definition, tool) != TaskPolicy::Forbidden
    }

    fn tools(&self) -> Arc<Vec<JsonObject>> {
        self.tools
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The upstream's definition of `tool`, as it last listed it.
    fn definition(&self, tool: &str) -> Option<JsonObject> {
        self.tools()
            .iter()
            .find(|t| t.get("name").and_then(|n| n.as_str()) == Some(tool))
            .cloned()
    }

    /// Whether a call of `tool` that may have run already is called again.
    fn repeats(&self, tool: &str) -> bool {
        self.repeat_safe.contains(tool)
            || self
                .definition(tool)
                .and_then(|t| t.get("annotations")?.get("idempotentHint")?.as_bool())
                .unwrap_or(false)
    }
}

/// Configures a [`Gateway`]: made by [`Gateway::builder`].
#[derive(Debug)]
#[must_use]
pub struct GatewayBuilder {
    upstream: Upstream,
    repeat_safe: BTreeSet<String>,
    policies: BTreeMap<String, TaskPolicy>,
    default_policy: TaskPolicy,
    sessions: usize,
}

impl Gateway {
    /// A gateway in front of `upstream`.
    pub fn builder(upstream: Upstream) -> GatewayBuilder {
        GatewayBuilder {
            upstream,
            repeat_safe: BTreeSet::new(),
            policies: BTreeMap::new(),
            default_policy: TaskPolicy::Optional,
            sessions: DEFAULT_SESSIONS,
        }
    }

    /// The upstream's tools, as it last listed them.
    pub fn tools(&self) -> Arc<Vec<JsonObject>> {
        self.inner.tools()
    }

    /// Keeps `engine`'s tools those of the upstream: whenever the upstream
    /// says its tools changed (`notifications/tools/list_changed`; at
    /// 2026-07-28 on a `subscriptions/listen` stream the gateway opens for
    /// it), the gateway lists them again and hands the engine the new
    /// registry ([`Engine::set_registry`]), whose clients hear of the
    /// change. Runs in a task of its own for as long as the runtime does.
    /// Tasks of a tool the upstream no longer offers fail when they must
    /// run again, naming it; calls in flight finish.
    pub fn follow(&self, engine: &Engine) {
        let inner = self.inner.clone();
        let listening = self.inner.clone();
        let engine = engine.clone();
        tokio::spawn(async move { listening.upstream.listen_for_tools().await });
        tokio::spawn(async move {
            loop {
                inner.upstream.tools_changed().await;
                let listed = match inner.upstream.list_tools().await {
                    Ok(tools) => tools,
                    Err(e) => {
                        tracing::warn!(error = %e, "the upstream's tools changed, and could not be listed again");
                        continue;
                    }
                };
                // The same list (an upstream whose stream of changes ended,
                // say): the clients hear of nothing.
                if *inner.tools() == listed {
                    tracing::debug!("the upstream's tools are as they were");
                    continue;
                }
                inner.upstream.schemas_changed();
                *inner
                    .tools
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(listed);
                match registry_of(&inner).and_then(|r| engine.set_registry(r).map_err(Into::into)) {
                    Ok(()) => tracing::info!(
                        tools = inner.tools().len(),
                        "the upstream's tools changed: serving them"
                    ),
                    Err(e) => {
                        tracing::warn!(error = %e, "the upstream's new tools cannot be served; serving the ones before")
                    }
                }
            }
        });
    }

    /// The upstream's tools that run as tasks, for
    /// [`EngineBuilder::registry`](mcp_tasks_runtime::engine::EngineBuilder::registry).
    ///
    /// A tool's task policy is the operator's ([`GatewayBuilder::policy`]),
    /// else the upstream's `execution.taskSupport` where it declares one,
    /// else the gateway's default ([`GatewayBuilder::default_policy`],
    /// [`TaskPolicy::Optional`] unless set: a task for a client that
    /// declared the tasks extension, a plain call for one that did not).
    /// A tool whose policy is [`TaskPolicy::Forbidden`] is not here: it is
    /// passed upstream as it comes ([`Gateway::passthrough`]).
    ///
    /// # Errors
    ///
    /// [`GatewayError::Tool`] for an upstream tool whose definition is not
    /// valid MCP (its name, or a schema whose root is not an object), and
    /// for two tools of one name.
    pub fn registry(&self) -> Result<Registry, GatewayError> {
        registry_of(&self.inner)
    }

    /// What the gateway passes upstream as it comes: the tools that run as
    /// plain calls, prompts, resources and completions. Hand it to the
    /// runtime's front door with
    /// [`TaskServerBuilder::extras`](mcp_tasks_runtime::mcp::TaskServerBuilder::extras).
    pub fn passthrough(&self) -> Passthrough {
        Passthrough::new(self.inner.clone())
    }
}

/// The task policy a tool's definition declares (`execution.taskSupport`).
fn declared(definition: &JsonObject) -> Option<TaskPolicy> {
    match definition
        .get("execution")
        .and_then(|e| e.get("taskSupport")?.as_str())
    {
        Some("required") => Some(TaskPolicy::Required),
        Some("optional") => Some(TaskPolicy::Optional),
        Some("forbidden") => Some(TaskPolicy::Forbidden),
        _ => None,
    }
}

/// The upstream's tools as the gateway last listed them, as task tools.
fn registry_of(inner: &Arc<Inner>) -> Result<Registry, GatewayError> {
    let mut registry = Registry::new();
    for definition in inner.tools().iter() {
        let name = definition
            .get("name")
            .and_then(|n| n.as_str())
            .unwrap_or_default()
            .to_owned();
        let policy = inner.policy(definition, &name);
        if policy == TaskPolicy::Forbidden {
            continue;
        }
        let calls = inner.clone();
        let tool = name.clone();
        let handler: mcp_tasks_runtime::tool::Handler = Arc::new(move |arguments, _state| {
            Ok(Box::pin(call::run(calls.clone(), tool.clone(), arguments)))
        });
        let location = Location {
            path: "mcp_tasks_gateway::upstream",
            file: file!(),
            line: line!(),
        };
        let descriptor = ToolDescriptor::from_definition(definition.clone(), handler, location)?
            .with_policy(policy);
        registry.insert(descriptor)?;
    }
    Ok(registry)
}

impl GatewayBuilder {
    /// Lists `tool` as safe to call again when a restart leaves it unknown
    /// whether a call of it ran upstream (as `idempotentHint: true` does).
    pub fn repeat_safe(mut self, tool: impl Into<String>) -> Self {
        self.repeat_safe.insert(tool.into());
        self
    }

    /// At most `max` sessions open to the upstream at once (default 16):
    /// each carries one call at a time, so this many calls run upstream at
    /// once, and the next waits, first come first served, for a session
    /// to be free. Over stdio each session is a process of the upstream's
    /// command.
    pub fn sessions(mut self, max: usize) -> Self {
        self.sessions = max.max(1);
        self
    }

    /// Sets `tool`'s task policy, whatever the upstream declares. A tool
    /// set [`TaskPolicy::Forbidden`] is passed upstream as it comes
    /// ([`Gateway::passthrough`]), and is never a task.
    pub fn policy(mut self, tool: impl Into<String>, policy: TaskPolicy) -> Self {
        self.policies.insert(tool.into(), policy);
        self
    }

    /// The task policy of the tools whose policy neither
    /// [`GatewayBuilder::policy`] nor the upstream (`execution.taskSupport`)
    /// gives: [`TaskPolicy::Optional`] unless set. An upstream of
    /// 2026-07-28 declares none (that era's wire has no such field), nor do
    /// most servers of 2025-11-25, whose tools are then all tasks for the
    /// clients that can take one.
    pub fn default_policy(mut self, policy: TaskPolicy) -> Self {
        self.default_policy = policy;
        self
    }

    /// Connects to the upstream and lists its tools.
    ///
    /// # Errors
    ///
    /// [`GatewayError::Connect`] and [`GatewayError::ListTools`] when the
    /// upstream cannot be reached or does not answer;
    /// [`GatewayError::UnknownTool`] when [`GatewayBuilder::repeat_safe`] or
    /// [`GatewayBuilder::policy`] names a tool the upstream does not offer.
    pub async fn connect(self) -> Result<Gateway, GatewayError> {
        let upstream = upstream::Sessions::new(self.upstream, self.sessions);
        let tools = upstream.list_tools().await?;
        let offered: BTreeSet<&str> = tools
            .iter()
            .filter_map(|t| t.get("name")?.as_str())
            .collect();
        let named = self.repeat_safe.iter().chain(self.policies.keys());
        if let Some(unknown) = named.into_iter().find(|t| !offered.contains(t.as_str())) {
            return Err(GatewayError::UnknownTool(unknown.clone()));
        }
        Ok(Gateway {
            inner: Arc::new(Inner {
                upstream,
                tools: std::sync::RwLock::new(Arc::new(tools)),
                repeat_safe: self.repeat_safe,
                policies: self.policies,
                default_policy: self.default_policy,
            }),
        })
    }
}
