//! Long-running MCP tools as plain async functions, run as durable tasks.
//!
//! Put [`#[task_tool]`](task_tool) on an `async fn` and it becomes an MCP tool
//! that runs as a task: the client gets a handle at once, polls it, answers
//! its questions, and cancels it. Inside the fn, [`checkpoint`] journals a
//! step's result and [`ask_user`] parks the task until the client answers; a
//! crash or restart replays the fn from its journal without redoing a step.
//!
//! ```no_run
//! use mcp_tasks_runtime::{ToolError, checkpoint, confirm, task_tool};
//!
//! /// Builds a service and rolls it out once someone approves.
//! #[task_tool(ttl = "1h")]
//! async fn deploy(service: String) -> Result<String, ToolError> {
//!     let build = checkpoint("build", || async { Ok(format!("{service}-42")) }).await?;
//!     if !confirm(format!("Roll out {build}?")).await? {
//!         return Err(ToolError::new("declined"));
//!     }
//!     Ok(format!("{build} is live"))
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//!     // Every #[task_tool] in the binary, durable in ./mcp-tasks.db.
//!     mcp_tasks_runtime::mcp::serve_http("127.0.0.1:8080").await
//! }
//! ```
//!
//! The [`guide`] has a chapter for each thing you do with the crate, from
//! writing a tool to running a fleet.
//!
//! # Where things are
//!
//! | to… | use |
//! |---|---|
//! | write a tool | [`task_tool`], [`ToolError`], [`Elicit`] for forms, [`State`] for shared values |
//! | journal work | [`checkpoint`], [`step`], [`sleep`], [`now`], [`uuid`]; [`status`], [`cancelled`] |
//! | change a tool with tasks in flight | [`patched`], `#[task_tool(version = 2)]`; check a build first with [`replay::check`] |
//! | ask the client | [`ask_user`], [`confirm`], [`ask_url`], [`sample`], [`list_roots`] |
//! | serve MCP | [`mcp`]: [`mcp::serve_http`], [`mcp::serve_stdio`], [`mcp::TaskServer`] |
//! | run tools without MCP | [`Engine`] and its one entry point, [`Engine::call`] |
//! | keep tasks | [`store`]: [`store::SqliteStore`] (the default), `store::PostgresStore` (feature `postgres`, shared by several processes), [`store::MemoryStore`], the [`store::Store`] trait and its state machine |
//! | build a tool by hand | [`tool::ToolDescriptor`], [`Registry`] |
//!
//! # Features
//!
//! - `macros` (default): `#[task_tool]` and `#[derive(Elicit)]`.
//! - `sqlite` (default): the embedded SQLite store.
//! - `postgres`: `store::PostgresStore`, tasks in a PostgreSQL database that
//!   several processes share (tokio-postgres with a deadpool-postgres pool).
//! - `server` (default): the MCP front door on rmcp, the official Rust SDK
//!   (and returning a raw [`CallToolResult`] from a tool). The core builds
//!   without it.
//! - `jwt`: `mcp::JwtAuth`, bearer-token (JWT) authentication over HTTP
//!   against a JWKS file or URL (jsonwebtoken on RustCrypto; rustls on *ring*
//!   to fetch a URL); implies `server`.
//! - `client`: [`client::TaskClient`], a typed client that calls task tools,
//!   follows their tasks to the end and answers their questions (rmcp's
//!   client and transports; needs none of the server parts).
//! - `metrics`: the engine's counters, gauges and histograms
//!   (`metrics` module), in Prometheus text; nothing is counted without it.
//! - `admin`: the operator's address (`admin` module): `/metrics` and a
//!   read-only web page of the tasks.
//! - `otel`: the `task_run` and `step` spans exported through OpenTelemetry
//!   as OTLP over HTTP (`otel` module: a `tracing-subscriber` layer).
#![cfg_attr(docsrs, feature(doc_cfg))]

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

mod elicit;
mod engine;
mod error;
pub mod guide;
mod id;
mod input;
mod journal;
#[cfg(feature = "metrics")]
pub mod metrics;
#[cfg(not(feature = "metrics"))]
mod metrics;
mod registry;
pub mod replay;
mod state;
pub mod store;
mod task;
pub mod tool;

#[cfg(feature = "admin")]
pub mod admin;
#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "server")]
pub mod mcp;
#[cfg(feature = "otel")]
pub mod otel;

mod private;

#[cfg(feature = "testing")]
pub mod testing;

/// Not public API: used by generated code. It may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::private::*;
}

pub use elicit::{Elicit, ElicitField, form_schema};
pub use engine::{Call, CallMode, CallOutcome, Engine, EngineBuilder, Limits};
pub use error::{Error, Result, RpcError, ToolError};
pub use futures::future::Either;
pub use registry::{RegisteredTool, Registry};
pub use state::{State, StateMap, StateNeed};
pub use task::{
    AskError, Question, Spawned, StepFuture, StepKey, StepValue, TaskInfo, UrlAnswer, ask_url,
    ask_user, cancelled, checkpoint, confirm, list_roots, now, patched, sample, select, select_all,
    sleep, spawn, status, step, step_key, task_info, uuid,
};

#[cfg(feature = "macros")]
pub use mcp_tasks_macros::{Elicit, task_tool};

/// The result a tool returns to shape its `CallToolResult` by hand (rmcp's
/// type; needs the `server` feature).
#[cfg(feature = "server")]
pub use rmcp::model::CallToolResult;
