#![doc = include_str!("../../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod context;
mod elicit;
mod engine;
mod error;
mod id;
mod journal;
mod registry;
mod store;
mod tool;

#[cfg(feature = "server")]
pub mod mcp;

mod private;

/// Not public API: used by generated code. It may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::private::*;
}

pub use context::{
    AskError, Question, ask_user, cancelled, checkpoint, confirm, list_roots, now, sample, sleep,
    status, step, uuid,
};
pub use elicit::{Elicit, ElicitField, form_schema};
pub use engine::{Engine, EngineBuilder, EngineConfig, InlineOutcome, NewTask};
pub use error::{Error, Result, RpcError, ToolError, codes};
pub use id::rfc3339;
pub use journal::{JournalEntry, PendingInput, StepKind};
pub use registry::{RegisteredTool, Registry, is_valid_tool_name};
pub use store::{Answered, MemoryStore, Store, TaskRecord, TaskStatus, Transition};
#[cfg(feature = "sqlite")]
pub use store::{SqliteStore, SqliteStoreBuilder, Synchronous};
pub use tool::{
    Annotations, JsonObject, Location, PrepareFn, Registration, TaskPolicy, ToolDescriptor,
    ToolFuture, ToolOutcome,
};

#[cfg(feature = "macros")]
pub use mcp_tasks_macros::{Elicit, task_tool};

pub use async_trait::async_trait;
pub use rmcp::model::CallToolResult;
pub use schemars;

/// The Tasks extension's identifier, as declared in capabilities.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
