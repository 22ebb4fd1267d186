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
//!     let store = mcp_tasks_runtime::store::SqliteStore::open("mcp-tasks.db").await?;
//!     let engine = mcp_tasks_runtime::Engine::builder(store).start().await?;
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//!     mcp_tasks_runtime::mcp::serve(listener, mcp_tasks_runtime::mcp::TaskServer::new(engine)).await
//! }
//! ```
//!
//! The [`guide`] has a chapter for each thing you do with the crate, from
//! writing a tool to running a fleet.
//!
//! # Where things are
//!
//! The root holds what every tool author types. The rest is in families, by
//! what you do:
//!
//! | to… | use |
//! |---|---|
//! | write a tool | [`task_tool`], [`ToolError`], [`Elicit`] for forms, [`State`] for shared values |
//! | journal work | [`checkpoint`]; [`durable`]: [`durable::step`], [`durable::sleep`], [`durable::now`], [`durable::uuid`], [`durable::spawn`], [`durable::select`], [`durable::status`], [`durable::cancelled`] |
//! | change a tool with tasks in flight | [`durable::patched`], `#[task_tool(version = 2)]`; check a build first with [`replay::check`] |
//! | ask the client | [`ask_user`], [`confirm`]; [`question`]: [`question::ask_url`], [`question::sample`], [`question::list_roots`], and the shapes of a question ([`question::InputRequest`]) |
//! | serve MCP | [`mcp`]: [`mcp::serve`], [`mcp::serve_stdio`], [`mcp::TaskServer`] |
//! | call task tools | the crate `mcp-tasks-client`: `TaskClient` |
//! | run tools without MCP | [`Engine`] and its one entry point, [`Engine::call`]; the rest of the [`engine`] module |
//! | keep tasks | [`store`]: [`store::SqliteStore`] (the default), `store::PostgresStore` (feature `postgres`, shared by several processes), [`store::MemoryStore`], the [`store::Store`] trait and its state machine |
//! | build a tool by hand | [`tool`]: [`tool::ToolDescriptor`], [`tool::Registry`], [`tool::StateMap`], [`tool::RpcError`] |
//!
//! The journaled functions in [`durable`] share their names with tokio's on
//! purpose, and are not at the root: write `durable::sleep(..)`, and a
//! reviewer can tell it from `tokio::time::sleep(..)`, which a replay would
//! run again.
//!
//! # Semver and rmcp
//!
//! The MCP wire is [rmcp](https://docs.rs/rmcp)'s, the official Rust SDK.
//! Its types appear in this crate's API in one module only, [`mcp`]
//! (feature `server`): `mcp::CallToolResult`, which a tool may return to
//! shape its result by hand, and the rmcp service and transport types that
//! [`mcp::TaskServer`] plugs into. Everything else (the root, [`durable`], [`question`], [`tool`],
//! [`engine`], [`store`], [`replay`]) is this crate's own types. A release
//! that moves to an rmcp version with breaking changes is a breaking
//! (major, or minor before 1.0) release of this crate, and says so in its
//! changelog.
//!
//! # Features
//!
//! - `macros` (default): `#[task_tool]` and `#[derive(Elicit)]`.
//! - `sqlite` (default): the embedded SQLite store.
//! - `postgres`: `store::PostgresStore`, tasks in a PostgreSQL database that
//!   several processes share (tokio-postgres with a deadpool-postgres pool).
//! - `server` (default): the MCP front door on rmcp, the official Rust SDK
//!   (and returning a raw `mcp::CallToolResult` from a tool). The core builds
//!   without it.
//! - `jwt`: `mcp::JwtAuth`, bearer-token (JWT) authentication over HTTP
//!   against a JWKS file or URL (jsonwebtoken on RustCrypto; rustls on *ring*
//!   to fetch a URL); implies `server`.
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

/// Builder setters that store their argument: each
/// `/// doc` `vis fn name(Type) => field;` writes
/// `vis fn name(mut self, value: Type) -> Self`, which sets `self.field`
/// (a path, such as `config.lease`) to the value, raised to the floor
/// that follows `at least` or wrapped in what follows `wrapped in`. A
/// block that opens with `const;` writes `const fn`s.
macro_rules! builder_setters {
    (@each [$($const:tt)?]
        $(#[$attr:meta])*
        $vis:vis fn $name:ident($ty:ty) => $($field:ident).+
            $(, at least $min:expr)? $(, wrapped in $wrap:path)?;
        $($rest:tt)*
    ) => {
        $(#[$attr])*
        $vis $($const)? fn $name(mut self, value: $ty) -> Self {
            $(let value = $wrap(value);)?
            self.$($field).+ = value $(.max($min))?;
            self
        }
        builder_setters!(@each [$($const)?] $($rest)*);
    };
    (@each [$($const:tt)?]) => {};
    (const; $($setters:tt)*) => {
        builder_setters!(@each [const] $($setters)*);
    };
    ($($setters:tt)*) => {
        builder_setters!(@each [] $($setters)*);
    };
}

/// A `Debug` that shows the fields named, each with its value read from
/// the value bound to `this`, and marks the others as left out:
/// `debug_fields!(Type<H> |this| field: this.field, ...)`.
macro_rules! debug_fields {
    ($name:ident $(<$($gen:ident),*>)? |$this:ident| $($field:ident: $value:expr),* $(,)?) => {
        impl$(<$($gen),*>)? ::std::fmt::Debug for $name$(<$($gen),*>)? {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                let $this = self;
                f.debug_struct(stringify!($name))
                    $(.field(stringify!($field), &$value))*
                    .finish_non_exhaustive()
            }
        }
    };
}

mod clock;
pub mod durable;
mod elicit;
pub mod engine;
mod error;
pub mod guide;
mod id;
mod input;
mod journal;
#[cfg(feature = "metrics")]
pub mod metrics;
#[cfg(not(feature = "metrics"))]
mod metrics;
pub mod question;
pub mod replay;
pub mod store;
mod task;
pub mod tool;

#[cfg(feature = "admin")]
pub mod admin;
#[cfg(feature = "jwt")]
mod auth;
#[cfg(feature = "server")]
mod connections;
#[cfg(feature = "server")]
pub mod mcp;
#[cfg(feature = "mcp-2025-11-25")]
mod mcp_2025;
#[cfg(feature = "otel")]
pub mod otel;
#[cfg(feature = "server")]
mod request_state;

mod private;

#[cfg(feature = "testing")]
pub mod testing;

/// Not public API: used by generated code. It may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::private::*;
}

pub use elicit::Elicit;
pub use engine::Engine;
pub use error::{Error, Result, ToolError};
pub use task::{ask_user, checkpoint, confirm};
pub use tool::State;

#[cfg(feature = "macros")]
pub use mcp_tasks_macros::{Elicit, task_tool};
