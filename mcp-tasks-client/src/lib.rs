//! Calling MCP task tools from Rust: [`TaskClient`].
//!
//! A `TaskClient` talks to any MCP server that speaks 2026-07-28 (and, with
//! the Tasks extension, `io.modelcontextprotocol/tasks`) over Streamable HTTP
//! or over the stdio of a child process. It sits on rmcp's client.
//!
//! - [`TaskClient::call`] returns a tool's typed result whatever the server
//!   did with the call: answered at once, asked questions inline (MRTR rounds
//!   with `requestState`), or made a task that is followed to its end.
//! - [`TaskClient::start`] returns a [`TaskHandle`] for long work: its id, a
//!   stream of status updates, its result, and cancel. A handle serializes to
//!   a small [`TaskReference`] that another process can resume with
//!   [`TaskClient::resume`].
//! - The questions a tool asks (elicitation, sampling, roots) are answered by
//!   handlers registered once on the [`TaskClientBuilder`], through
//!   `tasks/update` for a task and through MRTR retries inline; the caller
//!   sees none of it. The client declares only the capabilities it has
//!   handlers for.
//!
//! ```no_run
//! use mcp_tasks_client::TaskClient;
//! use mcp_tasks_runtime::{Elicit, engine::IDEMPOTENCY_KEY};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, JsonSchema, Elicit)]
//! struct Confirm {
//!     /// Delete it?
//!     confirm: bool,
//! }
//!
//! # async fn run() -> Result<(), mcp_tasks_client::ClientError> {
//! let client = TaskClient::http("http://127.0.0.1:8080/mcp")
//!     .on_form(|message: &str| {
//!         println!("{message} yes");
//!         Some(Confirm { confirm: true })
//!     })
//!     .connect()
//!     .await?;
//! let said: String = client
//!     .call("confirm_delete", serde_json::json!({"filename": "a.txt"}))
//!     .await?;
//! println!("{said}");
//! # Ok(()) }
//! ```

//!
//! The [`guide`] says what each call does with the server's answers.

#![allow(deprecated)] // Sampling and roots are deprecated by SEP-2577, yet still part of the protocol.

use std::{
    collections::{BTreeSet, HashSet},
    fmt,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::{Stream, StreamExt as _, stream::BoxStream};
pub use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, DetailedTask, ElicitRequestParams,
    ElicitResult, ElicitationAction, Root,
};
use rmcp::{
    ClientHandler, ClientLifecycleMode, ClientServiceExt as _, ErrorData, RoleClient,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
        ClientCapabilities, ClientConfig, GetTaskParams, Implementation, InputRequest,
        InputRequests, InputResponses, JsonObject, ListRootsResult, ProtocolVersion,
        RequestMetaObject, TaskPayload, UpdateTaskParams,
    },
    service::{Peer, RequestContext, RunningService, ServiceError},
    transport::{
        StreamableHttpClientTransport, TokioChildProcess,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::{Map, Value, json};

pub use mcp_tasks_runtime::store::TaskStatus;
use mcp_tasks_runtime::{Elicit, engine::IDEMPOTENCY_KEY};

mod answers;
mod connection;
mod error;
mod handle;
mod push;
mod reference;

#[doc = include_str!("../docs/guide.md")]
pub mod guide {}

pub use answers::FormQuestion;
use answers::{Asked, FormHandler, Handler, Handlers, names};
pub use connection::TaskClientBuilder;
use connection::{Attempt, Inner, jitter};
pub use error::ClientError;
use error::transient;
use handle::HandleState;
pub use handle::{TaskHandle, TaskUpdate};
pub use reference::{Endpoint, TaskReference};

/// The most MRTR rounds one call answers before it gives up.
const MAX_ROUNDS: usize = 16;
/// The JSON-RPC code of invalid params: what `tasks/get` answers for a task
/// the server does not know (any more).
const INVALID_PARAMS: i32 = -32602;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type ElicitFn = Arc<dyn Fn(ElicitRequestParams) -> BoxFuture<ElicitResult> + Send + Sync>;
type SamplingFn =
    Arc<dyn Fn(CreateMessageRequestParams) -> BoxFuture<CreateMessageResult> + Send + Sync>;
type FormFn = Arc<dyn Fn(FormQuestion) -> BoxFuture<Option<Value>> + Send + Sync>;

/// A client for task tools. Cheap to clone: clones share the connection.
///
/// Build one with [`TaskClient::http`] or [`TaskClient::stdio`], register
/// the handlers that answer the server's questions, then
/// [`connect`](TaskClientBuilder::connect). The connection is made again
/// when it breaks.
#[derive(Clone)]
pub struct TaskClient {
    inner: Arc<Inner>,
}

impl fmt::Debug for TaskClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskClient")
            .field("endpoint", &self.inner.endpoint)
            .finish_non_exhaustive()
    }
}

impl TaskClient {
    /// A client of the Streamable HTTP endpoint at `url`.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), mcp_tasks_client::ClientError> {
    /// let client = mcp_tasks_client::TaskClient::http("http://127.0.0.1:8080/mcp")
    ///     .connect()
    ///     .await?;
    /// let greeting: String = client.call("greet", serde_json::json!({"name": "Ada"})).await?;
    /// # Ok(()) }
    /// ```
    pub fn http(url: impl Into<String>) -> TaskClientBuilder {
        Self::builder(Endpoint::Http { url: url.into() })
    }

    /// A client of the server `command args` runs, over its stdio (the
    /// process is started on connect, and again if it dies).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), mcp_tasks_client::ClientError> {
    /// let client = mcp_tasks_client::TaskClient::stdio("my-server", ["--stdio"])
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn stdio(
        command: impl Into<String>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> TaskClientBuilder {
        Self::builder(Endpoint::Stdio {
            command: command.into(),
            args: args.into_iter().map(Into::into).collect(),
        })
    }

    /// A client of `endpoint` (as a [`TaskReference`] records it).
    pub fn builder(endpoint: Endpoint) -> TaskClientBuilder {
        TaskClientBuilder {
            endpoint,
            handlers: Handlers::default(),
            tasks: true,
            name: env!("CARGO_PKG_NAME").to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            retry_for: Duration::from_secs(120),
            request_timeout: Duration::from_secs(30),
            max_poll_interval: Duration::from_secs(30),
            push: true,
        }
    }

    /// Where this client connects.
    pub fn endpoint(&self) -> &Endpoint {
        &self.inner.endpoint
    }

    /// Calls `tool` with `args` (any value that serializes to a JSON object;
    /// `()` for none) and returns its result as `Out`: the
    /// `structuredContent` decoded, or for `String` (or a type that
    /// deserializes from a string) the text. Whatever the server does with
    /// the call (answers at once, asks questions inline, or makes a task,
    /// which is followed to its end) the caller sees only the result.
    ///
    /// # Errors
    ///
    /// [`ClientError::Tool`] for the tool's own error, [`ClientError::Failed`],
    /// [`ClientError::Cancelled`] and [`ClientError::Expired`] for a task that
    /// ended so, [`ClientError::Rpc`] when the server refused the call,
    /// [`ClientError::Transport`], [`ClientError::Decode`].
    pub async fn call<Out: DeserializeOwned>(
        &self,
        tool: &str,
        args: impl Serialize,
    ) -> Result<Out, ClientError> {
        self.start(tool, args).await?.result().await
    }

    /// Calls `tool` and returns a handle on the task the server made, once it
    /// exists (after any questions the server asked inline first). A server
    /// may answer a call at once even so; then the handle holds the result
    /// and has no id.
    ///
    /// The `tools/call` itself is not retried (a retry could start the work
    /// twice; see [`start_with_key`](Self::start_with_key) for a call that
    /// can be repeated); everything after it is.
    ///
    /// # Errors
    ///
    /// As [`call`](Self::call), for what happens before the task exists.
    pub async fn start(&self, tool: &str, args: impl Serialize) -> Result<TaskHandle, ClientError> {
        self.start_as(tool, args, None).await
    }

    /// [`start`](Self::start) under the idempotency key `key` (16 to 255
    /// visible ASCII characters, random: without a principal on the server,
    /// whoever sends it finds the task). A server built on `mcp-tasks-runtime`
    /// answers every call with the same key, tool and caller with the same
    /// task, for as long as it keeps that task, and refuses the key with
    /// other arguments ([`ClientError::Rpc`], `-32602`). Store the key
    /// before the call, and call again with it after a crash or a lost
    /// answer: the work starts once, and the handle follows it. Such a
    /// server makes a keyed call a task at once, skipping any inline window.
    /// It does not help against a server that ignores the key (it starts a
    /// second task), a task the server no longer keeps (a new one starts), or
    /// a client without the Tasks extension (the call runs inline, with no
    /// task to find).
    ///
    /// ```no_run
    /// # async fn run(client: mcp_tasks_client::TaskClient) -> Result<(), mcp_tasks_client::ClientError> {
    /// let key = "deploy-billing-v2.3.0-9f3c2a71"; // kept before the call
    /// let args = serde_json::json!({"service": "billing"});
    /// let first = client.start_with_key("deploy", &args, key).await?;
    /// // ...the process restarts, and calls again with the key it kept:
    /// let again = client.start_with_key("deploy", &args, key).await?;
    /// assert_eq!(first.id(), again.id());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub async fn start_with_key(
        &self,
        tool: &str,
        args: impl Serialize,
        key: &str,
    ) -> Result<TaskHandle, ClientError> {
        self.start_as(tool, args, Some(key)).await
    }

    /// [`start`](Self::start), under `key` when there is one.
    async fn start_as(
        &self,
        tool: &str,
        args: impl Serialize,
        key: Option<&str>,
    ) -> Result<TaskHandle, ClientError> {
        let arguments = match serde_json::to_value(args) {
            Ok(Value::Object(map)) => map,
            Ok(Value::Null) => JsonObject::new(),
            Ok(other) => {
                return Err(ClientError::Decode(format!(
                    "a tool's arguments must be a JSON object, not {other}"
                )));
            }
            Err(e) => return Err(ClientError::Decode(format!("the arguments: {e}"))),
        };
        let mut request = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        if let Some(key) = key {
            let mut meta = RequestMetaObject::default();
            meta.0.insert(IDEMPOTENCY_KEY.to_owned(), Value::from(key));
            request.meta = Some(meta);
        }
        for _ in 0..MAX_ROUNDS {
            let sent = request.clone();
            let response = match self
                .inner
                .once(&|peer: Peer<RoleClient>| {
                    let sent = sent.clone();
                    async move { peer.call_tool_once(sent).await }
                })
                .await
            {
                Ok(response) => response,
                Err(Attempt::Transient(e) | Attempt::Final(e)) => return Err(e),
            };
            match response {
                CallToolResponse::Complete(result) => {
                    return Ok(self.handle(HandleState::Done(Box::new(result))));
                }
                CallToolResponse::Task(created) => {
                    return Ok(self.handle(HandleState::Task {
                        id: created.task.task_id.clone(),
                        poll: created.task.poll_interval_ms,
                        tool: Some(tool.to_owned()),
                    }));
                }
                CallToolResponse::InputRequired(asked) => {
                    let requests = asked.input_requests.unwrap_or_default();
                    if requests.is_empty() && asked.request_state.is_none() {
                        return Err(ClientError::Protocol(
                            "an input_required result asked for nothing".to_owned(),
                        ));
                    }
                    let by = Asked {
                        tool: Some(tool.to_owned()),
                        task_id: None,
                    };
                    let answers = self
                        .inner
                        .handler
                        .handlers
                        .answer_all(requests, &by)
                        .await?;
                    request.input_responses = (!answers.is_empty()).then_some(answers);
                    request.request_state = asked.request_state;
                }
                _ => {
                    return Err(ClientError::Protocol(
                        "tools/call answered with an unknown result".to_owned(),
                    ));
                }
            }
        }
        Err(ClientError::Protocol(format!(
            "the call still asked for input after {MAX_ROUNDS} rounds"
        )))
    }

    /// A handle on the task `reference` names, to follow it again: after this
    /// process or the server restarted, or from another process.
    ///
    /// ```no_run
    /// # async fn run(stored: &str) -> Result<(), mcp_tasks_client::ClientError> {
    /// use mcp_tasks_client::{TaskClient, TaskReference};
    ///
    /// let reference: TaskReference = serde_json::from_str(stored).unwrap();
    /// let client = TaskClient::builder(reference.endpoint.clone()).connect().await?;
    /// let report: serde_json::Value = client.resume(reference)?.result().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ClientError::OtherEndpoint`] when the reference is for another
    /// server than this client's.
    pub fn resume(&self, reference: TaskReference) -> Result<TaskHandle, ClientError> {
        if reference.endpoint != self.inner.endpoint {
            return Err(ClientError::OtherEndpoint {
                task_id: reference.task_id,
                reference: reference.endpoint,
                client: self.inner.endpoint.clone(),
            });
        }
        Ok(self.handle(HandleState::Task {
            id: reference.task_id,
            poll: None,
            tool: None,
        }))
    }

    fn handle(&self, state: HandleState) -> TaskHandle {
        TaskHandle {
            client: self.clone(),
            state,
            answered: Arc::new(Mutex::new(HashSet::new())),
        }
    }
}

impl TaskClient {
    /// The wait between polls the server asks for, within bounds.
    fn poll_interval(&self, ms: Option<u64>) -> Duration {
        Duration::from_millis(ms.unwrap_or(1000))
            .clamp(Duration::from_millis(20), self.inner.max_poll_interval)
    }
}

/// `-32602` on a task request: the task is gone.
fn expired(error: ClientError, task_id: &str) -> ClientError {
    match error {
        ClientError::Rpc(e) if e.code.0 == INVALID_PARAMS => ClientError::Expired {
            task_id: task_id.to_owned(),
        },
        other => other,
    }
}

/// A tool's result as `Out`; its error as [`ClientError::Tool`].
fn decode<Out: DeserializeOwned>(result: CallToolResult) -> Result<Out, ClientError> {
    let text = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n");
    if result.is_error == Some(true) {
        return Err(ClientError::Tool {
            message: text,
            result: Box::new(result),
        });
    }
    let mut why = None;
    if let Some(structured) = &result.structured_content {
        match serde_json::from_value(structured.clone()) {
            Ok(out) => return Ok(out),
            Err(e) => why = Some(format!("structuredContent: {e}")),
        }
    }
    if let Ok(out) = serde_json::from_value(Value::String(text.clone())) {
        return Ok(out);
    }
    serde_json::from_str(&text)
        .map_err(|e| ClientError::Decode(why.unwrap_or_else(|| format!("the text {text:?}: {e}"))))
}
