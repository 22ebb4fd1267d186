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
    /// The store failed: what it was doing, and why.
    #[error("store error: {0}")]
    Store(#[from] crate::store::StoreError),
}

/// The error a tool fn returns to end its call as a *tool error*: the task ends
/// `completed` with `isError: true` and the message as text content, so the model
/// can read it and react.
///
/// Any error type that implements [`Display`](fmt::Display) works as a tool fn's
/// error; `ToolError` adds [`ToolError::rpc`], which fails the task with a
/// JSON-RPC error instead (status `failed`).
///
/// ```
/// use mcp_tasks_runtime::ToolError;
///
/// let err = ToolError::new("rollout declined");
/// assert_eq!(err.to_string(), "rollout declined");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ToolError {
    kind: ToolErrorKind,
}

#[derive(Debug, Clone, PartialEq)]
enum ToolErrorKind {
    Tool(String),
    Rpc(RpcError),
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

    /// The JSON-RPC error, when this is a protocol error.
    pub fn as_rpc(&self) -> Option<&RpcError> {
        match &self.kind {
            ToolErrorKind::Rpc(e) => Some(e),
            ToolErrorKind::Tool(_) => None,
        }
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ToolErrorKind::Tool(m) => f.write_str(m),
            ToolErrorKind::Rpc(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl std::error::Error for ToolError {}

impl From<String> for ToolError {
    fn from(message: String) -> Self {
        Self::new(message)
    }
}

impl From<&str> for ToolError {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}

impl From<crate::AskError> for ToolError {
    fn from(err: crate::AskError) -> Self {
        Self::new(err.to_string())
    }
}
