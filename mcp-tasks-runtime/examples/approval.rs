//! A tool that holds state, asks a person for approval, and gives up when
//! nobody answers in time.
//!
//! ```sh
//! cargo run -p mcp-tasks-runtime --example approval             # http://127.0.0.1:8080/mcp
//! cargo run -p mcp-tasks-runtime --example approval -- 127.0.0.1:9000
//! ```
//!
//! `refund` asks its question as an MCP form (elicitation). The task waits in
//! `input_required`, holding no worker, until a client answers it with
//! `tasks/update` (or inline, for a client without the tasks extension), or
//! until its deadline passes. The wait survives restarts: the question, its
//! deadline and the answer are all in the store.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use mcp_tasks_runtime::{
    Elicit, Engine, State, ToolError, ask_user, checkpoint, durable,
    mcp::{self, TaskServer},
    question::AskError,
    store::SqliteStore,
    task_tool,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How long a refund waits for a decision before it is dropped.
const DECISION_WINDOW: Duration = Duration::from_secs(15 * 60);

/// The payment system, shared by every call (handed to the engine with
/// `.state(..)`; a real one would hold a client or a connection pool).
#[derive(Debug, Default)]
struct Payments {
    refunded_cents: AtomicU64,
}

impl Payments {
    /// Sends the money back; the total refunded so far.
    async fn refund(&self, cents: u64) -> Result<u64, ToolError> {
        Ok(self.refunded_cents.fetch_add(cents, Ordering::SeqCst) + cents)
    }
}

/// The form the person fills in: each field's doc comment is its label.
#[derive(Deserialize, JsonSchema, Elicit)]
struct Decision {
    /// Send the refund?
    approve: bool,
    /// Why (optional).
    reason: Option<String>,
}

/// What the tool returns.
#[derive(Serialize, JsonSchema)]
struct Refunded {
    /// The order refunded.
    order: String,
    /// What was sent back, in cents.
    cents: u64,
    /// Everything refunded so far, in cents.
    total_cents: u64,
}

/// Refunds an order once a person approves it (within 15 minutes).
#[task_tool(ttl = "1h")]
async fn refund(
    // Not an argument: the engine's `Payments`.
    payments: State<Arc<Payments>>,
    /// The order to refund.
    order: String,
    /// How much, in cents.
    cents: u64,
) -> Result<Refunded, ToolError> {
    durable::status(format!("waiting for a decision on {order}"));
    // The key names the question in `inputRequests` and `tasks/update`.
    let question = ask_user(format!("Refund {cents} cents for order {order}?"))
        .key("decision")
        .timeout(DECISION_WINDOW);
    let decision: Decision = match question.await {
        Err(AskError::TimedOut) => return Err(ToolError::new("nobody decided within 15 minutes")),
        other => other?,
    };
    if !decision.approve {
        let why = decision.reason.unwrap_or_else(|| "no reason given".into());
        // A tool error: the task completes with `isError: true`.
        return Err(ToolError::new(format!("refund declined: {why}")));
    }
    // The money moves once, even if the server restarts right after.
    let total_cents = checkpoint("refund", || payments.refund(cents)).await?;
    Ok(Refunded {
        order,
        cents,
        total_cents,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let engine = Engine::builder(SqliteStore::open("approval.db").await?)
        .state(Arc::new(Payments::default()))
        .start() // refuses to start if a tool's `State<T>` was not given
        .await?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("serving http://{}/mcp", listener.local_addr()?);
    mcp::serve(listener, TaskServer::new(engine))
        // Ctrl-C: no new task; running steps finish; then the tasks are let go.
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
