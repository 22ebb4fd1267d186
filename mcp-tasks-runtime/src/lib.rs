#![doc = include_str!("../../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod elicit;
mod engine;
mod error;
mod id;
mod input;
mod journal;
mod registry;
pub mod store;
mod task;
pub mod tool;

#[cfg(feature = "server")]
pub mod mcp;

mod private;

/// Not public API: used by generated code. It may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::private::*;
}

pub use elicit::{Elicit, ElicitField, form_schema};
pub use engine::{Call, CallMode, CallOutcome, Engine, EngineBuilder};
pub use error::{Error, Result, RpcError, ToolError};
pub use registry::{RegisteredTool, Registry};
pub use task::{
    AskError, Question, ask_user, cancelled, checkpoint, confirm, list_roots, now, sample, sleep,
    status, step, uuid,
};

#[cfg(feature = "macros")]
pub use mcp_tasks_macros::{Elicit, task_tool};

/// The result a tool returns to shape its `CallToolResult` by hand (rmcp's
/// type; needs the `server` feature).
#[cfg(feature = "server")]
pub use rmcp::model::CallToolResult;
