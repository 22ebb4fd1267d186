//! The upstream server: how it is reached, and the one connection the
//! gateway keeps to it (made again when it is lost).

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex},
};

use mcp_tasks_runtime::tool::JsonObject;
use rmcp::{
    ClientHandler, RoleClient,
    model::{
        ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam, ProgressToken,
        ProtocolVersion,
    },
    service::{ClientLifecycleMode, ClientServiceExt, NotificationContext, Peer, RunningService},
    transport::{
        StreamableHttpClientTransport, TokioChildProcess,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use tokio::sync::mpsc;

use crate::GatewayError;

/// How the gateway reaches its upstream MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Upstream {
    /// A command the gateway starts and speaks to over its stdin and stdout.
    Command {
        /// The program.
        program: String,
        /// Its arguments.
        args: Vec<String>,
    },
    /// A Streamable HTTP endpoint (`http://127.0.0.1:3001/mcp`).
    Http {
        /// The endpoint's URL.
        url: String,
    },
}

impl Upstream {
    /// `program args…`, started by the gateway and spoken to over stdio.
    pub fn command(
        program: impl Into<String>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self::Command {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
        }
    }

    /// The Streamable HTTP endpoint at `url`.
    pub fn http(url: impl Into<String>) -> Self {
        Self::Http { url: url.into() }
    }
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Command { program, args } => {
                write!(f, "`{program}")?;
                for arg in args {
                    write!(f, " {arg}")?;
                }
                write!(f, "` (stdio)")
            }
            Self::Http { url } => write!(f, "{url}"),
        }
    }
}

/// Where an upstream call's progress goes: the run waiting for that call.
pub(crate) type Progress = mpsc::UnboundedSender<ProgressNotificationParam>;

/// The gateway's side of the upstream session: it routes progress to the
/// call it belongs to.
#[derive(Debug, Clone, Default)]
pub(crate) struct Relay {
    progress: Arc<Mutex<HashMap<ProgressToken, Progress>>>,
}

impl Relay {
    /// Sends the progress of the call whose token is `token` to `to`, until
    /// [`Relay::forget`].
    pub(crate) fn follow(&self, token: ProgressToken, to: Progress) {
        self.lock().insert(token, to);
    }

    pub(crate) fn forget(&self, token: &ProgressToken) {
        self.lock().remove(token);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ProgressToken, Progress>> {
        self.progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl ClientHandler for Relay {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("mcp-tasks-gateway", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(to) = self.lock().get(&params.progress_token) {
            let _ = to.send(params);
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        tracing::warn!(
            "the upstream's tools changed; this gateway serves the list it read when it \
             connected until it is restarted"
        );
    }
}

/// The gateway's connection to its upstream: made when first needed, and
/// again after it is lost.
#[derive(Debug)]
pub(crate) struct Connection {
    upstream: Upstream,
    pub(crate) relay: Relay,
    live: tokio::sync::Mutex<Option<RunningService<RoleClient, Relay>>>,
}

impl Connection {
    pub(crate) fn new(upstream: Upstream) -> Self {
        Self {
            upstream,
            relay: Relay::default(),
            live: tokio::sync::Mutex::new(None),
        }
    }

    pub(crate) fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// The live session's peer, connecting first if there is none (or the
    /// last one closed).
    pub(crate) async fn peer(&self) -> Result<Peer<RoleClient>, GatewayError> {
        let mut live = self.live.lock().await;
        if let Some(service) = live.as_ref()
            && !service.peer().is_transport_closed()
        {
            return Ok(service.peer().clone());
        }
        let service = self.connect().await?;
        let peer = service.peer().clone();
        *live = Some(service);
        Ok(peer)
    }

    async fn connect(&self) -> Result<RunningService<RoleClient, Relay>, GatewayError> {
        let failed = |message: String| GatewayError::Connect {
            upstream: self.upstream.to_string(),
            message,
        };
        // The upstream's own era: a 2026-07-28 server is spoken to in it, any
        // other with `initialize` (2025-11-25).
        let lifecycle = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        };
        let relay = self.relay.clone();
        match &self.upstream {
            Upstream::Command { program, args } => {
                let mut command = tokio::process::Command::new(program);
                command.args(args);
                let transport =
                    TokioChildProcess::new(command).map_err(|e| failed(e.to_string()))?;
                relay.serve_with_lifecycle(transport, lifecycle).await
            }
            Upstream::Http { url } => {
                let transport = StreamableHttpClientTransport::from_config(
                    StreamableHttpClientTransportConfig::with_uri(url.clone()),
                );
                relay.serve_with_lifecycle(transport, lifecycle).await
            }
        }
        .map_err(|e| failed(e.to_string()))
    }

    /// The upstream's tools, as JSON objects (every page).
    pub(crate) async fn list_tools(&self) -> Result<Vec<JsonObject>, GatewayError> {
        let failed = |message: String| GatewayError::ListTools {
            upstream: self.upstream.to_string(),
            message,
        };
        let tools = self
            .peer()
            .await?
            .list_all_tools()
            .await
            .map_err(|e| failed(e.to_string()))?;
        tools
            .into_iter()
            .map(|tool| match serde_json::to_value(tool) {
                Ok(serde_json::Value::Object(tool)) => Ok(tool),
                Ok(other) => Err(failed(format!("a tool is not an object: {other}"))),
                Err(e) => Err(failed(e.to_string())),
            })
            .collect()
    }
}
