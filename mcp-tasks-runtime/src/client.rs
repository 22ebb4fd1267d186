//! Calling task tools from Rust: [`TaskClient`].
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
//! use mcp_tasks_runtime::{Elicit, client::TaskClient};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, JsonSchema, Elicit)]
//! struct Confirm {
//!     /// Delete it?
//!     confirm: bool,
//! }
//!
//! # async fn run() -> Result<(), mcp_tasks_runtime::client::ClientError> {
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
    ElicitResult, ElicitationAction, Root, TaskStatus,
};
use rmcp::{
    ClientHandler, ClientLifecycleMode, ClientServiceExt as _, ErrorData, RoleClient,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
        ClientCapabilities, ClientConfig, GetTaskParams, Implementation, InputRequest,
        InputRequests, InputResponses, JsonObject, ListRootsResult, ProtocolVersion, TaskPayload,
        UpdateTaskParams,
    },
    service::{Peer, RequestContext, RunningService, ServiceError},
    transport::{
        StreamableHttpClientTransport, TokioChildProcess,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::{Map, Value, json};

use crate::Elicit;

/// The most MRTR rounds one call answers before it gives up.
const MAX_ROUNDS: usize = 16;
/// The JSON-RPC code of invalid params: what `tasks/get` answers for a task
/// the server does not know (any more).
const INVALID_PARAMS: i32 = -32602;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type ElicitFn = Arc<dyn Fn(ElicitRequestParams) -> BoxFuture<ElicitResult> + Send + Sync>;
type SamplingFn =
    Arc<dyn Fn(CreateMessageRequestParams) -> BoxFuture<CreateMessageResult> + Send + Sync>;
type FormFn = Arc<dyn Fn(&str) -> Option<Value> + Send + Sync>;

/// Where a server is: what a [`TaskReference`] records, so that another
/// process can connect to the same server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "transport", rename_all = "lowercase")]
#[non_exhaustive]
pub enum Endpoint {
    /// Streamable HTTP at `url` (`http://127.0.0.1:8080/mcp`).
    Http {
        /// The MCP endpoint's URL.
        url: String,
    },
    /// A server started as a child process, spoken to over its stdio.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        #[serde(default)]
        args: Vec<String>,
    },
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Http { url } => f.write_str(url),
            Self::Stdio { command, args } => {
                write!(f, "stdio:{command}")?;
                for arg in args {
                    write!(f, " {arg}")?;
                }
                Ok(())
            }
        }
    }
}

/// A task, as a small serializable value: the server it runs on and its id.
/// Store it (a file, a database row) and hand it to [`TaskClient::resume`],
/// in this process or another, after a restart of either side.
///
/// ```
/// use mcp_tasks_runtime::client::{Endpoint, TaskReference};
///
/// let reference = TaskReference {
///     endpoint: Endpoint::Http { url: "http://127.0.0.1:8080/mcp".into() },
///     task_id: "f161cb664b1045b0d589c1170e2e68a1".into(),
/// };
/// let stored = serde_json::to_string(&reference).unwrap();
/// assert_eq!(serde_json::from_str::<TaskReference>(&stored).unwrap(), reference);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskReference {
    /// The server the task runs on.
    pub endpoint: Endpoint,
    /// The task's id (`taskId`).
    pub task_id: String,
}

/// How a call or a task ended when it did not give a result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The tool ran and reported an error (`isError: true`); `message` is its
    /// text.
    #[error("the tool reported an error: {message}")]
    Tool {
        /// The text of the tool's error.
        message: String,
        /// The whole result.
        result: Box<CallToolResult>,
    },
    /// The task ended `failed`, with a JSON-RPC error.
    #[error("task {task_id} failed: {} ({})", error.message, error.code.0)]
    Failed {
        /// The task's id.
        task_id: String,
        /// The JSON-RPC error the task failed with.
        error: ErrorData,
    },
    /// The task ended `cancelled`.
    #[error("task {task_id} was cancelled")]
    Cancelled {
        /// The task's id.
        task_id: String,
    },
    /// The server no longer knows the task: its time to live ran out, and it
    /// was deleted (or the id was never the server's).
    #[error("task {task_id} expired: the server no longer knows it")]
    Expired {
        /// The task's id.
        task_id: String,
    },
    /// The server answered a request with a JSON-RPC error (an unknown tool,
    /// bad arguments, a capability the client did not declare, ...).
    #[error("the server answered with an error: {} ({})", .0.message, .0.code.0)]
    Rpc(ErrorData),
    /// The client could not connect to the server.
    #[error("could not connect to {endpoint}: {message}")]
    Connect {
        /// Where.
        endpoint: String,
        /// Why.
        message: String,
    },
    /// The connection failed (for a task: for longer than the client's retry
    /// window, see [`TaskClientBuilder::retry_for`]).
    #[error("transport error: {0}")]
    Transport(#[source] ServiceError),
    /// The result does not decode into the type asked for.
    #[error("the result does not decode: {0}")]
    Decode(String),
    /// The server broke the protocol, or asked for something this client
    /// has no handler for.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A [`TaskReference`] for another server was given to
    /// [`TaskClient::resume`].
    #[error("task {task_id} is on {reference}, not on this client's {client}")]
    OtherEndpoint {
        /// The task's id.
        task_id: String,
        /// Where the reference says it runs.
        reference: Endpoint,
        /// Where this client connects.
        client: Endpoint,
    },
    /// The call was answered inline, without a task: there is nothing to
    /// refer to or cancel.
    #[error("the call was answered without a task")]
    NoTask,
}

impl ClientError {
    /// A failed request, as a client error: a JSON-RPC error, or transport.
    fn from_service(error: ServiceError) -> Self {
        match error {
            ServiceError::McpError(e) => Self::Rpc(e),
            ServiceError::UnexpectedResponse => {
                Self::Protocol("the server answered with an unexpected result".to_owned())
            }
            other => Self::Transport(other),
        }
    }
}

/// Whether a failed request may succeed if sent again (a connection that
/// broke, a server that restarts), rather than being the server's answer.
fn transient(error: &ServiceError) -> bool {
    matches!(
        error,
        ServiceError::TransportSend(_)
            | ServiceError::TransportClosed
            | ServiceError::Timeout { .. }
            | ServiceError::Cancelled { .. }
    )
}

// ---- Handlers ------------------------------------------------------------------

/// A typed form handler: answers the forms whose fields fit its type.
#[derive(Clone)]
struct FormHandler {
    fields: BTreeSet<String>,
    required: BTreeSet<String>,
    answer: FormFn,
}

/// Everything registered on the builder that answers a server's questions.
#[derive(Clone, Default)]
struct Handlers {
    forms: Vec<FormHandler>,
    elicit: Option<ElicitFn>,
    url: bool,
    sampling: Option<SamplingFn>,
    roots: Option<Vec<Root>>,
}

fn names(schema: &Value, key: &str) -> BTreeSet<String> {
    match &schema[key] {
        Value::Object(m) => m.keys().cloned().collect(),
        Value::Array(a) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => BTreeSet::new(),
    }
}

impl Handlers {
    /// The capabilities these handlers answer for, and no more.
    fn capabilities(&self, tasks: bool) -> ClientCapabilities {
        let mut caps = Map::new();
        if !self.forms.is_empty() || self.elicit.is_some() {
            let mut elicitation = json!({"form": {}});
            if self.url && self.elicit.is_some() {
                elicitation["url"] = json!({});
            }
            caps.insert("elicitation".to_owned(), elicitation);
        }
        if self.sampling.is_some() {
            caps.insert("sampling".to_owned(), json!({}));
        }
        if self.roots.is_some() {
            caps.insert("roots".to_owned(), json!({}));
        }
        if tasks {
            caps.insert(
                "extensions".to_owned(),
                json!({"io.modelcontextprotocol/tasks": {}}),
            );
        }
        serde_json::from_value(Value::Object(caps)).unwrap_or_default()
    }

    async fn elicit(&self, request: ElicitRequestParams) -> ElicitResult {
        if let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = &request
        {
            let schema = serde_json::to_value(requested_schema).unwrap_or_default();
            let asked = names(&schema, "properties");
            let required = names(&schema, "required");
            let fits = |form: &&FormHandler| {
                form.fields.is_subset(&asked) && required.is_subset(&form.fields)
            };
            if let Some(form) = self.forms.iter().find(fits) {
                return match (form.answer)(message) {
                    Some(content) => {
                        ElicitResult::new(ElicitationAction::Accept).with_content(content)
                    }
                    None => ElicitResult::new(ElicitationAction::Decline),
                };
            }
        }
        match &self.elicit {
            Some(elicit) => elicit(request).await,
            None => ElicitResult::new(ElicitationAction::Decline),
        }
    }

    /// The answer to one input request, as the JSON that goes back.
    async fn answer(&self, request: InputRequest) -> Result<Value, ClientError> {
        let answer = match request {
            InputRequest::Elicitation(request) => {
                serde_json::to_value(self.elicit(request.params).await)
            }
            InputRequest::CreateMessage(request) => match &self.sampling {
                Some(sampling) => serde_json::to_value(sampling(request.params).await),
                None => {
                    return Err(ClientError::Protocol(
                        "the server asked for sampling, which this client does not offer"
                            .to_owned(),
                    ));
                }
            },
            InputRequest::ListRoots(_) => match &self.roots {
                Some(roots) => serde_json::to_value(ListRootsResult::new(roots.clone())),
                None => {
                    return Err(ClientError::Protocol(
                        "the server asked for roots, which this client does not offer".to_owned(),
                    ));
                }
            },
            _ => {
                return Err(ClientError::Protocol(
                    "the server asked for input of a kind this client does not know".to_owned(),
                ));
            }
        };
        answer.map_err(|e| ClientError::Protocol(format!("an answer did not serialize: {e}")))
    }

    /// Answers every request in `requests` but those in `skip`.
    async fn answer_all(
        &self,
        requests: InputRequests,
        skip: &HashSet<String>,
    ) -> Result<InputResponses, ClientError> {
        let mut answers = InputResponses::new();
        for (key, request) in requests {
            if skip.contains(&key) {
                continue;
            }
            let answer = self.answer(request).await?;
            answers.insert(key, answer);
        }
        Ok(answers)
    }
}

/// rmcp's side of the handlers: a 2025-11-25 server asks its questions as
/// requests in the session; they get the same answers.
#[derive(Clone)]
struct Handler {
    info: ClientConfig,
    handlers: Arc<Handlers>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(self.handlers.elicit(request).await)
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        match &self.handlers.sampling {
            Some(sampling) => Ok(sampling(params).await),
            None => Err(ErrorData::method_not_found::<
                rmcp::model::CreateMessageRequestMethod,
            >()),
        }
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        Ok(ListRootsResult::new(
            self.handlers.roots.clone().unwrap_or_default(),
        ))
    }
}

// ---- The builder -----------------------------------------------------------------

/// Configures a [`TaskClient`]: where it connects, the handlers that answer
/// the server's questions, and how it polls. Made by [`TaskClient::http`],
/// [`TaskClient::stdio`] or [`TaskClient::builder`].
pub struct TaskClientBuilder {
    endpoint: Endpoint,
    handlers: Handlers,
    tasks: bool,
    name: String,
    version: String,
    retry_for: Duration,
    request_timeout: Duration,
    max_poll_interval: Duration,
}

impl fmt::Debug for TaskClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskClientBuilder")
            .field("endpoint", &self.endpoint)
            .field("capabilities", &self.handlers.capabilities(self.tasks))
            .finish_non_exhaustive()
    }
}

impl TaskClientBuilder {
    /// Answers the forms whose fields fit `T` with `answer(message)`: `Some`
    /// accepts with the value's fields, `None` declines. A form fits when
    /// each of `T`'s fields is one of the form's and each field the form
    /// requires is one of `T`'s. Several typed handlers may be registered;
    /// the first that fits answers, and forms none fits go to
    /// [`on_elicit`](Self::on_elicit) (or are declined). Declares form
    /// elicitation.
    ///
    /// ```no_run
    /// use mcp_tasks_runtime::{Elicit, client::TaskClient};
    /// use schemars::JsonSchema;
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, JsonSchema, Elicit)]
    /// struct Approval {
    ///     approve: bool,
    /// }
    ///
    /// let builder = TaskClient::http("http://127.0.0.1:8080/mcp")
    ///     .on_form(|message: &str| Some(Approval { approve: message.contains("staging") }));
    /// ```
    #[must_use]
    pub fn on_form<T, F>(mut self, answer: F) -> Self
    where
        T: Elicit + Serialize + 'static,
        F: Fn(&str) -> Option<T> + Send + Sync + 'static,
    {
        let schema = Value::Object(T::requested_schema());
        self.handlers.forms.push(FormHandler {
            fields: names(&schema, "properties"),
            required: names(&schema, "required"),
            answer: Arc::new(move |message| {
                answer(message).and_then(|value| serde_json::to_value(value).ok())
            }),
        });
        // Most specific first: a form fits the handler that names the most of
        // its fields.
        self.handlers.forms.sort_by(|a, b| {
            (b.fields.len(), b.required.len()).cmp(&(a.fields.len(), a.required.len()))
        });
        self
    }

    /// Answers every elicitation no typed [`on_form`](Self::on_form) handler
    /// takes. Declares form elicitation (and URL mode with
    /// [`url_elicitation`](Self::url_elicitation)).
    ///
    /// ```no_run
    /// use mcp_tasks_runtime::client::{ElicitResult, ElicitationAction, TaskClient};
    ///
    /// let builder = TaskClient::http("http://127.0.0.1:8080/mcp").on_elicit(|request| async move {
    ///     println!("{request:?}");
    ///     ElicitResult::new(ElicitationAction::Decline)
    /// });
    /// ```
    #[must_use]
    pub fn on_elicit<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(ElicitRequestParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ElicitResult> + Send + 'static,
    {
        self.handlers.elicit = Some(Arc::new(move |request| Box::pin(handler(request))));
        self
    }

    /// Also declares URL-mode elicitation: the [`on_elicit`](Self::on_elicit)
    /// handler then receives URL requests too (it should open the URL for
    /// the user, and answer `accept` once they agreed to go).
    #[must_use]
    pub fn url_elicitation(mut self) -> Self {
        self.handlers.url = true;
        self
    }

    /// Answers `sampling/createMessage` requests; declares sampling.
    ///
    /// ```no_run
    /// use mcp_tasks_runtime::client::{CreateMessageResult, TaskClient};
    ///
    /// let builder = TaskClient::http("http://127.0.0.1:8080/mcp").on_sampling(|params| async move {
    ///     let _ = params.messages;
    ///     serde_json::from_value::<CreateMessageResult>(serde_json::json!({
    ///         "model": "local", "role": "assistant",
    ///         "content": {"type": "text", "text": "Paris"}
    ///     }))
    ///     .unwrap()
    /// });
    /// ```
    #[must_use]
    pub fn on_sampling<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(CreateMessageRequestParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = CreateMessageResult> + Send + 'static,
    {
        self.handlers.sampling = Some(Arc::new(move |params| Box::pin(handler(params))));
        self
    }

    /// The roots `roots/list` answers with; declares roots.
    #[must_use]
    pub fn roots(mut self, roots: Vec<Root>) -> Self {
        self.handlers.roots = Some(roots);
        self
    }

    /// Whether the client declares the Tasks extension (it does by default).
    /// Without it, servers run task tools inline, asking their questions as
    /// MRTR rounds, and [`TaskClient::start`] gets handles without tasks.
    #[must_use]
    pub fn tasks(mut self, declare: bool) -> Self {
        self.tasks = declare;
        self
    }

    /// The `clientInfo` sent with each request (the crate's name and version
    /// by default).
    #[must_use]
    pub fn client_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.name = name.into();
        self.version = version.into();
        self
    }

    /// How long polling keeps retrying a server it cannot reach (restarting,
    /// say) before the task's stream ends with [`ClientError::Transport`]:
    /// two minutes by default. Retries back off from 100 ms to 5 s.
    #[must_use]
    pub fn retry_for(mut self, window: Duration) -> Self {
        self.retry_for = window;
        self
    }

    /// How long one request may take before it counts as a failed attempt
    /// (30 s by default).
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The longest wait between two polls, whatever `pollIntervalMs` the
    /// server asks for (30 s by default).
    #[must_use]
    pub fn max_poll_interval(mut self, interval: Duration) -> Self {
        self.max_poll_interval = interval;
        self
    }

    /// Connects (`server/discover`, falling back to a 2025-11-25 session for
    /// a server that only speaks that).
    ///
    /// # Errors
    ///
    /// [`ClientError::Connect`] when the server cannot be reached or does not
    /// speak MCP.
    pub async fn connect(self) -> Result<TaskClient, ClientError> {
        let info = ClientConfig::new(
            self.handlers.capabilities(self.tasks),
            Implementation::new(self.name.clone(), self.version.clone()),
        );
        let handler = Handler {
            info,
            handlers: Arc::new(self.handlers),
        };
        let inner = Inner {
            endpoint: self.endpoint,
            handler,
            connection: tokio::sync::Mutex::new(None),
            retry_for: self.retry_for,
            request_timeout: self.request_timeout,
            max_poll_interval: self.max_poll_interval,
        };
        inner.peer().await?;
        Ok(TaskClient {
            inner: Arc::new(inner),
        })
    }
}

// ---- The client --------------------------------------------------------------------

struct Inner {
    endpoint: Endpoint,
    handler: Handler,
    /// The live connection; `None` after a transport failure, until the next
    /// request connects again.
    connection: tokio::sync::Mutex<Option<Arc<RunningService<RoleClient, Handler>>>>,
    retry_for: Duration,
    request_timeout: Duration,
    max_poll_interval: Duration,
}

impl Inner {
    /// The peer of the live connection, connecting if there is none.
    async fn peer(&self) -> Result<Peer<RoleClient>, ClientError> {
        let mut connection = self.connection.lock().await;
        if let Some(live) = connection.as_ref()
            && !live.is_closed()
            && !live.peer().is_transport_closed()
        {
            return Ok(live.peer().clone());
        }
        let service = tokio::time::timeout(self.request_timeout, self.connect())
            .await
            .map_err(|_| ClientError::Connect {
                endpoint: self.endpoint.to_string(),
                message: format!("no answer within {:?}", self.request_timeout),
            })??;
        let peer = service.peer().clone();
        *connection = Some(Arc::new(service));
        Ok(peer)
    }

    /// Drops the live connection, so the next request connects again.
    async fn reset(&self) {
        self.connection.lock().await.take();
    }

    async fn connect(&self) -> Result<RunningService<RoleClient, Handler>, ClientError> {
        let lifecycle = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        };
        let failed = |message: String| ClientError::Connect {
            endpoint: self.endpoint.to_string(),
            message,
        };
        let handler = self.handler.clone();
        match &self.endpoint {
            Endpoint::Http { url } => {
                let transport = StreamableHttpClientTransport::from_config(
                    StreamableHttpClientTransportConfig::with_uri(url.clone()),
                );
                handler
                    .serve_with_lifecycle(transport, lifecycle)
                    .await
                    .map_err(|e| failed(e.to_string()))
            }
            Endpoint::Stdio { command, args } => {
                let mut child = tokio::process::Command::new(command);
                child.args(args);
                let transport = TokioChildProcess::new(child).map_err(|e| failed(e.to_string()))?;
                handler
                    .serve_with_lifecycle(transport, lifecycle)
                    .await
                    .map_err(|e| failed(e.to_string()))
            }
        }
    }

    /// Sends one request with `send`, bounded by the request timeout; a
    /// transport failure drops the connection.
    async fn once<T, F, Fut>(&self, send: &F) -> Result<T, Attempt>
    where
        F: Fn(Peer<RoleClient>) -> Fut,
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        let peer = match self.peer().await {
            Ok(peer) => peer,
            Err(e @ ClientError::Connect { .. }) => return Err(Attempt::Transient(e)),
            Err(e) => return Err(Attempt::Final(e)),
        };
        match tokio::time::timeout(self.request_timeout, send(peer)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) if transient(&e) => {
                self.reset().await;
                Err(Attempt::Transient(ClientError::Transport(e)))
            }
            Ok(Err(e)) => Err(Attempt::Final(ClientError::from_service(e))),
            Err(_) => {
                self.reset().await;
                Err(Attempt::Transient(ClientError::Transport(
                    ServiceError::Timeout {
                        timeout: self.request_timeout,
                    },
                )))
            }
        }
    }

    /// Sends an idempotent request (`tasks/get`, `tasks/update`,
    /// `tasks/cancel`), retrying transport failures with backoff for the
    /// client's retry window.
    async fn retrying<T, F, Fut>(&self, send: F) -> Result<T, ClientError>
    where
        F: Fn(Peer<RoleClient>) -> Fut,
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        let deadline = Instant::now() + self.retry_for;
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.once(&send).await {
                Ok(value) => return Ok(value),
                Err(Attempt::Final(e)) => return Err(e),
                Err(Attempt::Transient(e)) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(e);
                    }
                    tokio::time::sleep(jitter(backoff).min(deadline - now)).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

/// One attempt's failure.
enum Attempt {
    /// Worth trying again.
    Transient(ClientError),
    /// The server's answer.
    Final(ClientError),
}

/// `d` give or take a tenth, so that many clients do not poll in step.
fn jitter(d: Duration) -> Duration {
    let r = getrandom::u64().unwrap_or(0) % 2001; // 0..=2000
    let factor = 0.9 + (r as f64) / 10_000.0; // 0.9..=1.1
    d.mul_f64(factor)
}

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
    /// # async fn run() -> Result<(), mcp_tasks_runtime::client::ClientError> {
    /// let client = mcp_tasks_runtime::client::TaskClient::http("http://127.0.0.1:8080/mcp")
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
    /// # async fn run() -> Result<(), mcp_tasks_runtime::client::ClientError> {
    /// let client = mcp_tasks_runtime::client::TaskClient::stdio("my-server", ["--stdio"])
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
    /// twice); everything after it is.
    ///
    /// # Errors
    ///
    /// As [`call`](Self::call), for what happens before the task exists.
    pub async fn start(&self, tool: &str, args: impl Serialize) -> Result<TaskHandle, ClientError> {
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
                    }));
                }
                CallToolResponse::InputRequired(asked) => {
                    let requests = asked.input_requests.unwrap_or_default();
                    if requests.is_empty() && asked.request_state.is_none() {
                        return Err(ClientError::Protocol(
                            "an input_required result asked for nothing".to_owned(),
                        ));
                    }
                    let answers = self
                        .inner
                        .handler
                        .handlers
                        .answer_all(requests, &HashSet::new())
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
    /// # async fn run(stored: &str) -> Result<(), mcp_tasks_runtime::client::ClientError> {
    /// use mcp_tasks_runtime::client::{TaskClient, TaskReference};
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

// ---- Handles -------------------------------------------------------------------------

enum HandleState {
    /// Answered inline: no task.
    Done(Box<CallToolResult>),
    /// A task on the server.
    Task { id: String, poll: Option<u64> },
}

/// A task a [`TaskClient`] started or resumed.
///
/// Dropping a handle does not cancel its task: the task goes on on the
/// server (that is the point of tasks) until it ends or its time to live
/// runs out. Keep its [`reference`](Self::reference) to come back to it, and
/// call [`cancel`](Self::cancel) to stop it.
///
/// A handle serializes (serde) as its [`TaskReference`].
pub struct TaskHandle {
    client: TaskClient,
    state: HandleState,
    /// The input keys this handle answered: never answered twice, even when
    /// a poll still shows one before the server applied the answer.
    answered: Arc<Mutex<HashSet<String>>>,
}

impl fmt::Debug for TaskHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskHandle")
            .field("endpoint", &self.client.inner.endpoint)
            .field("id", &self.id())
            .finish_non_exhaustive()
    }
}

impl Serialize for TaskHandle {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.reference() {
            Some(reference) => reference.serialize(serializer),
            None => Err(serde::ser::Error::custom(
                "the call was answered without a task: there is nothing to refer to",
            )),
        }
    }
}

/// One observed state of a task, from [`TaskHandle::updates`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TaskUpdate {
    /// The status.
    pub status: TaskStatus,
    /// The server's progress line (`statusMessage`), if any.
    pub status_message: Option<String>,
    /// Everything `tasks/get` said.
    pub task: DetailedTask,
}

impl TaskHandle {
    /// The task's id; `None` when the server answered the call at once.
    pub fn id(&self) -> Option<&str> {
        match &self.state {
            HandleState::Task { id, .. } => Some(id),
            HandleState::Done(_) => None,
        }
    }

    /// What to store to come back to this task later; `None` when there is
    /// no task.
    pub fn reference(&self) -> Option<TaskReference> {
        self.id().map(|id| TaskReference {
            endpoint: self.client.inner.endpoint.clone(),
            task_id: id.to_owned(),
        })
    }

    /// The task's status as it changes, ending with its terminal status.
    /// Each item is a state that differs from the one before (status or
    /// message). Questions the task asks are answered by the client's
    /// handlers as they come.
    ///
    /// Today the stream polls `tasks/get` at the server's `pollIntervalMs`
    /// (with jitter, and with backoff while the server cannot be reached).
    /// Every state comes from one place, so that push (`notifications/tasks`
    /// on a `subscriptions/listen` stream) can feed it when a server offers
    /// it, polling remaining the fallback. A stream that ends with an error
    /// (the task expired, the server could not be reached for the retry
    /// window) says so in its last item.
    ///
    /// ```no_run
    /// # async fn run(handle: mcp_tasks_runtime::client::TaskHandle) {
    /// use futures::StreamExt as _;
    ///
    /// let mut updates = handle.updates();
    /// while let Some(Ok(update)) = updates.next().await {
    ///     println!("{:?} {}", update.status, update.status_message.unwrap_or_default());
    /// }
    /// # }
    /// ```
    pub fn updates(&self) -> BoxStream<'static, Result<TaskUpdate, ClientError>> {
        match &self.state {
            HandleState::Done(_) => futures::stream::empty().boxed(),
            HandleState::Task { id, poll } => poll_stream(self.poller(id.clone(), *poll)).boxed(),
        }
    }

    fn poller(&self, id: String, poll: Option<u64>) -> Poller {
        Poller {
            client: self.client.clone(),
            task_id: id,
            answered: self.answered.clone(),
            interval: self.client.poll_interval(poll),
            last: None,
            first: true,
            done: false,
        }
    }

    /// Follows the task to its end and returns its result as `Out` (see
    /// [`TaskClient::call`]).
    ///
    /// # Errors
    ///
    /// As [`TaskClient::call`].
    pub async fn result<Out: DeserializeOwned>(self) -> Result<Out, ClientError> {
        let (id, poll) = match self.state {
            HandleState::Done(result) => return decode(*result),
            HandleState::Task { ref id, poll } => (id.clone(), poll),
        };
        let mut poller = self.poller(id.clone(), poll);
        let mut last = None;
        while let Some(update) = poller.next().await {
            last = Some(update?);
        }
        let task = last.ok_or_else(|| ClientError::Protocol("no state was seen".to_owned()))?;
        match task.task.payload {
            TaskPayload::Completed { result } => {
                let result: CallToolResult = serde_json::from_value(Value::Object(result))
                    .map_err(|e| ClientError::Decode(format!("the task's result: {e}")))?;
                decode(result)
            }
            TaskPayload::Failed { error } => Err(ClientError::Failed {
                task_id: id,
                error: serde_json::from_value(Value::Object(error.clone())).unwrap_or_else(|_| {
                    ErrorData::internal_error(Value::Object(error).to_string(), None)
                }),
            }),
            TaskPayload::Cancelled => Err(ClientError::Cancelled { task_id: id }),
            _ => Err(ClientError::Protocol(
                "the task stopped before it ended".to_owned(),
            )),
        }
    }

    /// Asks the server to cancel the task (`tasks/cancel`). Cancelling is
    /// cooperative: the task may still end `completed` or `failed`; follow it
    /// with [`updates`](Self::updates) or [`result`](Self::result) to see how
    /// it ended. Cancelling a task that already ended does nothing.
    ///
    /// # Errors
    ///
    /// [`ClientError::NoTask`] when there is no task;
    /// [`ClientError::Expired`] when the server no longer knows it; others as
    /// [`TaskClient::call`].
    pub async fn cancel(&self) -> Result<(), ClientError> {
        let id = self.id().ok_or(ClientError::NoTask)?.to_owned();
        self.client
            .inner
            .retrying(|peer: Peer<RoleClient>| {
                let id = id.clone();
                async move { peer.cancel_task(CancelTaskParams::new(id)).await }
            })
            .await
            .map_err(|e| expired(e, &id))
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

/// Follows one task: where its states come from, and what is done with them.
struct Poller {
    client: TaskClient,
    task_id: String,
    answered: Arc<Mutex<HashSet<String>>>,
    interval: Duration,
    /// The last state handed out: status and message.
    last: Option<(TaskStatus, Option<String>)>,
    first: bool,
    done: bool,
}

fn poll_stream(poller: Poller) -> impl Stream<Item = Result<TaskUpdate, ClientError>> + Send {
    futures::stream::unfold(poller, |mut poller| async move {
        let item = poller.next().await?;
        Some((item, poller))
    })
}

impl Poller {
    /// The task's next state that differs from the last one; `None` after
    /// the terminal one.
    async fn next(&mut self) -> Option<Result<TaskUpdate, ClientError>> {
        if self.done {
            return None;
        }
        let item = self.step().await;
        if !matches!(&item, Ok(update) if !update.status.is_terminal()) {
            self.done = true;
        }
        Some(item)
    }

    async fn step(&mut self) -> Result<TaskUpdate, ClientError> {
        loop {
            if !self.first {
                tokio::time::sleep(jitter(self.interval)).await;
            }
            self.first = false;
            // The one source of states. Push would deliver the same
            // `DetailedTask` from `notifications/tasks`.
            let task = self.fetch().await?;
            if let Some(ms) = task.task.poll_interval_ms {
                self.interval = self.client.poll_interval(Some(ms));
            }
            if let TaskPayload::InputRequired { input_requests } = &task.payload
                && self.answer(input_requests.clone()).await?
            {
                // Answered: look again at once, rather than a poll later.
                self.first = true;
            }
            let status = task.status();
            let seen = (status, task.task.status_message.clone());
            if status.is_terminal() || self.last.as_ref() != Some(&seen) {
                self.last = Some(seen);
                return Ok(TaskUpdate {
                    status,
                    status_message: task.task.status_message.clone(),
                    task,
                });
            }
        }
    }

    async fn fetch(&self) -> Result<DetailedTask, ClientError> {
        let id = self.task_id.clone();
        self.client
            .inner
            .retrying(|peer: Peer<RoleClient>| {
                let id = id.clone();
                async move { peer.get_task(GetTaskParams::new(id)).await }
            })
            .await
            .map(|got| got.task)
            .map_err(|e| expired(e, &self.task_id))
    }

    /// Answers the keys not answered yet with `tasks/update`; whether there
    /// were any.
    async fn answer(&self, requests: InputRequests) -> Result<bool, ClientError> {
        let skip = self.answered.lock().map(|a| a.clone()).unwrap_or_default();
        let answers = self
            .client
            .inner
            .handler
            .handlers
            .answer_all(requests, &skip)
            .await?;
        if answers.is_empty() {
            return Ok(false);
        }
        if let Ok(mut answered) = self.answered.lock() {
            answered.extend(answers.keys().cloned());
        }
        let id = self.task_id.clone();
        self.client
            .inner
            .retrying(|peer: Peer<RoleClient>| {
                let params = UpdateTaskParams::new(id.clone(), answers.clone());
                async move { peer.update_task(params).await }
            })
            .await
            .map_err(|e| expired(e, &self.task_id))?;
        Ok(true)
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
