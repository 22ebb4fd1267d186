//! Where a task is: the [`Endpoint`] of its server and a [`TaskReference`]
//! that another process can resume.

use super::*;

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
/// use mcp_tasks_client::{Endpoint, TaskReference};
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
