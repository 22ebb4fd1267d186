//! Errors: the engine's [`Error`], the JSON-RPC error objects tasks fail with, and
//! [`ToolError`], the error a tool fn returns to end its call with `isError: true`.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Invalid params: bad arguments, stored arguments that no longer fit.
const INVALID_PARAMS: i64 = -32602;
/// Internal error: panics, lost tools, store failures, expiry.
const INTERNAL_ERROR: i64 = -32603;

/// A JSON-RPC error object: what a `failed` task carries in `error`, and what the
/// front door answers a bad request with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    /// The JSON-RPC error code.
    pub code: i64,
    /// A short description that names the problem.
    pub message: String,
    /// Structured details, when there are any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with no `data`.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Attaches `data`.
    #[must_use]
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// `-32602` with `message`.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    /// `-32603` with `message`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(INTERNAL_ERROR, message)
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for RpcError {}

/// Errors from the engine and its stores.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No tool of that name is registered.
    #[error("unknown tool `{0}`")]
    UnknownTool(String),
    /// The arguments do not fit the tool's input schema.
    #[error("invalid arguments for tool `{tool}`: {message}")]
    InvalidArguments {
        /// The tool called.
        tool: String,
        /// What is wrong, naming the field.
        message: String,
    },
    /// No task with that id exists (or it expired and was purged).
    #[error("task not found: {0}")]
    TaskNotFound(String),
    /// The tool must run as a task and the caller cannot take one.
    #[error("tool `{0}` must run as a task")]
    TaskRequired(String),
    /// Two registered tools share a name.
    #[error(
        "duplicate tool name `{name}`: defined by `{first}` ({first_location}) and `{second}` ({second_location})"
    )]
    DuplicateTool {
        /// The shared name.
        name: String,
        /// Path of the first definition.
        first: String,
        /// `file:line` of the first definition.
        first_location: String,
        /// Path of the second definition.
        second: String,
        /// `file:line` of the second definition.
        second_location: String,
    },
    /// A tool's declared schema or metadata is not valid MCP.
    #[error("tool `{name}` is invalid: {message}")]
    InvalidTool {
        /// The tool.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// A tool takes a [`State<T>`](crate::State) that the engine was not
    /// given (see [`EngineBuilder::state`](crate::engine::EngineBuilder::state)).
    #[error(
        "tool `{tool}` ({location}) takes `State<{type_name}>`, but no `{type_name}` was given: give one with `EngineBuilder::state` before `start`"
    )]
    MissingState {
        /// The tool.
        tool: String,
        /// The state type, as `std::any::type_name` spells it.
        type_name: String,
        /// `file:line` of the tool's definition.
        location: String,
    },
    /// A call or an answer went over one of the engine's
    /// [`Limits`](crate::engine::Limits); nothing was stored.
    #[error("{message}")]
    LimitExceeded {
        /// The limit, as [`Limits`](crate::engine::Limits) names its field.
        limit: &'static str,
        /// What was over the limit, and by how much.
        message: String,
        /// For a rate limit: how long until a call would be accepted.
        retry_after_ms: Option<u64>,
    },
    /// A call's idempotency key
    /// ([`Call::idempotency_key`](crate::engine::Call::idempotency_key)) is
    /// malformed, or started a task with other arguments.
    #[error("invalid idempotency key: {0}")]
    IdempotencyKey(String),
    /// The engine is draining ([`Engine::drain`](crate::Engine::drain)) or
    /// shut down: it takes no new call; the client should call another
    /// instance, or again once this one is back.
    #[error(
        "the server is shutting down and takes no new call; call again in a moment (another instance may take it)"
    )]
    ShuttingDown,
    /// The store failed: what it was doing, and why.
    #[error("store error: {0}")]
    Store(#[from] crate::store::error::StoreError),
}

/// The error a tool fn returns to end its call as a *tool error*: the task ends
/// `completed` with `isError: true` and the message as text content, so the model
/// can read it and react.
///
/// Any error type that implements [`Display`](fmt::Display) works as a tool fn's
/// error; `ToolError` adds [`ToolError::rpc`], which fails the task with a
/// JSON-RPC error instead (status `failed`), and [`ToolError::cancelled`],
/// which ends it `cancelled`.
///
/// `?` turns any [`std::error::Error`], an `anyhow::Error`, a `String` or a
/// `&str` into a `ToolError` whose message keeps the whole cause chain
/// (`reading x.json: No such file or directory (os error 2)`). So that this
/// works for every error type, `ToolError` itself does not implement
/// `std::error::Error`, just as `anyhow::Error` does not.
///
/// ```
/// use mcp_tasks_runtime::ToolError;
///
/// let err = ToolError::new("rollout declined");
/// assert_eq!(err.to_string(), "rollout declined");
///
/// fn read(path: &str) -> Result<String, ToolError> {
///     Ok(std::fs::read_to_string(path)?)
/// }
/// let err = read("/no/such/file.json").unwrap_err();
/// assert!(err.to_string().starts_with("No such file"), "{err}");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ToolError {
    kind: ToolErrorKind,
}

#[derive(Debug, Clone, PartialEq)]
enum ToolErrorKind {
    Tool(String),
    Rpc(RpcError),
    Cancelled,
}

impl ToolError {
    /// A tool error: `isError: true` with `message` as its text.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            kind: ToolErrorKind::Tool(message.into()),
        }
    }

    /// A protocol error: the task ends `failed` with this JSON-RPC error.
    pub fn rpc(code: i64, message: impl Into<String>) -> Self {
        Self {
            kind: ToolErrorKind::Rpc(RpcError::new(code, message)),
        }
    }

    /// Ends the task `cancelled`: return it to honour a cancel the fn saw
    /// through [`cancelled`](crate::durable::cancelled) (after tidying up), or to
    /// withdraw the task for a reason of its own. Nothing after it runs, and
    /// the task keeps no result. A call answered inline (no task) gets a tool
    /// error saying it was cancelled; outside any run (a unit test) it is
    /// just an error.
    ///
    /// ```
    /// use mcp_tasks_runtime::{ToolError, checkpoint, durable, task_tool};
    ///
    /// /// Copies files until done or cancelled.
    /// #[task_tool]
    /// async fn copy_all(files: Vec<String>) -> Result<String, ToolError> {
    ///     for (i, file) in files.iter().enumerate() {
    ///         if durable::cancelled() {
    ///             // Tidy up, then end the task `cancelled`, not `completed`.
    ///             return Err(ToolError::cancelled());
    ///         }
    ///         checkpoint(format!("copy-{i}"), || async { Ok(file.len()) }).await?;
    ///     }
    ///     Ok(format!("{} files copied", files.len()))
    /// }
    /// ```
    pub fn cancelled() -> Self {
        Self {
            kind: ToolErrorKind::Cancelled,
        }
    }

    /// The JSON-RPC error, when this is a protocol error.
    pub fn as_rpc(&self) -> Option<&RpcError> {
        match &self.kind {
            ToolErrorKind::Rpc(e) => Some(e),
            ToolErrorKind::Tool(_) | ToolErrorKind::Cancelled => None,
        }
    }

    /// Whether this ends the task `cancelled` ([`ToolError::cancelled`]).
    pub fn is_cancelled(&self) -> bool {
        self.kind == ToolErrorKind::Cancelled
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ToolErrorKind::Tool(m) => f.write_str(m),
            ToolErrorKind::Rpc(e) => fmt::Display::fmt(e, f),
            ToolErrorKind::Cancelled => f.write_str("The task was cancelled."),
        }
    }
}

/// `?` on any error: every `std::error::Error + Send + Sync`, an
/// `anyhow::Error` (or anything else that converts into a
/// `Box<dyn Error + Send + Sync>`), a `String` or a `&str`. The message is
/// the error's text followed by each cause's, joined by `: `; an
/// [`RpcError`] stays a protocol error.
impl<E> From<E> for ToolError
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn from(error: E) -> Self {
        let error: Box<dyn std::error::Error + Send + Sync> = error.into();
        if let Some(rpc) = error.downcast_ref::<RpcError>() {
            return Self {
                kind: ToolErrorKind::Rpc(rpc.clone()),
            };
        }
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            let cause_text = cause.to_string();
            // Some errors repeat their source's text in their own.
            if !message.ends_with(&cause_text) {
                message.push_str(": ");
                message.push_str(&cause_text);
            }
            source = cause.source();
        }
        Self::new(message)
    }
}
