//! What the example servers share: their command line and how they serve.

use std::{net::SocketAddr, path::PathBuf};

use clap::Parser;
use mcp_tasks_runtime::mcp::{HttpOptions, TaskServer, serve_http_on, serve_stdio_with};
use rmcp::ServerHandler;

/// The example servers' command line.
#[derive(Debug, Parser)]
pub struct Cli {
    /// Address to listen on (HTTP); the endpoint is `/mcp`.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// The SQLite file tasks are kept in (created if missing).
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// Serve over stdio instead of HTTP.
    #[arg(long)]
    pub stdio: bool,
}

impl Cli {
    /// The store path, or `default` in the working directory.
    pub fn store_path(&self, default: &str) -> PathBuf {
        self.store.clone().unwrap_or_else(|| PathBuf::from(default))
    }
}

/// Logs to stderr (stdout carries the protocol in stdio mode); `RUST_LOG`
/// controls the level (default `info`, and `warn` for rmcp, which logs every request).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rmcp=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// Serves `server` as the command line says, printing where it listens.
///
/// # Errors
///
/// When the address cannot be bound or the transport fails.
pub async fn serve<H: ServerHandler + Clone>(
    cli: &Cli,
    store: &std::path::Path,
    server: TaskServer<H>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    if cli.stdio {
        eprintln!("serving MCP over stdio (store: {})", store.display());
        return serve_stdio_with(server).await;
    }
    let listener = tokio::net::TcpListener::bind(cli.addr).await?;
    let local = listener.local_addr()?;
    println!(
        "listening on http://{local}/mcp (store: {})",
        store.display()
    );
    serve_http_on(server, listener, HttpOptions::default()).await
}
