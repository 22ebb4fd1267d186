//! How a call or a task ended without a result: [`ClientError`].

use super::*;

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
    pub(super) fn from_service(error: ServiceError) -> Self {
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
pub(super) fn transient(error: &ServiceError) -> bool {
    matches!(
        error,
        ServiceError::TransportSend(_)
            | ServiceError::TransportClosed
            | ServiceError::Timeout { .. }
            | ServiceError::Cancelled { .. }
    )
}
