//! The question vocabulary: what a task asks its client, and the shapes of
//! those questions as the store keeps them and the wire carries them.
//!
//! A question parks the task until the client answers; the answer is
//! journaled, so a replay reads it back instead of asking again.
//! [`ask_user`] (a form typed by an [`Elicit`] type) and [`confirm`] are also
//! at the crate root; [`ask_url`], [`sample`], [`list_roots`] and [`ask`]
//! (any [`InputRequest`], as it stands) are here.
//! [`InputRequest`] and its parts are what a pending question looks like to
//! a store, a test or an operator, and [`InputCapabilities`] is what a client
//! declared it can answer.
//!
//! ```no_run
//! use mcp_tasks_runtime::{ToolError, question, task_tool};
//!
//! /// Has the user sign in, then says so.
//! #[task_tool]
//! async fn sign_in() -> Result<String, ToolError> {
//!     question::ask_url("Sign in to continue", "https://example.com/login").await?;
//!     Ok("signed in".to_owned())
//! }
//! ```

pub use crate::elicit::{Elicit, ElicitField, form_schema};
pub use crate::input::{FormRequest, InputCapabilities, InputRequest, UrlRequest};
pub use crate::task::{
    AskError, Question, UrlAnswer, ask, ask_url, ask_user, confirm, list_roots, sample,
};
