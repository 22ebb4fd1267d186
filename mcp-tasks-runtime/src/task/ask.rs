//! Questions to the client: [`ask_user`], [`confirm`], [`sample`] and
//! [`list_roots`], each a [`Question`] that parks the task until answered.

use std::fmt;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::replay::{InFlight, Slot, forever, slot};
use crate::{
    elicit::Elicit,
    input::{FormRequest, InputRequest},
    journal::{PendingInput, StepKind},
};

/// Why a question to the client got no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AskError {
    /// The user declined (`action: "decline"`).
    #[error("the user declined the request")]
    Declined,
    /// The user dismissed the request (`action: "cancel"`).
    #[error("the user cancelled the request")]
    Cancelled,
    /// The answer did not fit the requested form.
    #[error("the answer does not fit the form: {0}")]
    InvalidAnswer(String),
    /// The calling client did not declare the capability (elicitation,
    /// sampling or roots) this question needs.
    #[error("the client does not support {0}")]
    Unsupported(&'static str),
    /// Called outside a running task (for example in a unit test of the fn).
    #[error("not running inside a task")]
    NoTask,
    /// The question itself is malformed (say, sampling params that are not
    /// a JSON object); it was not sent.
    #[error("the question is malformed: {0}")]
    InvalidRequest(String),
}

/// A question to the client: built by [`ask_user`], [`confirm`], [`sample`]
/// and [`list_roots`], answered by `.await`.
///
/// It takes its journal position when it is created. [`Question::key`] names
/// its key in `inputRequests` (default: the step kind and position, such as
/// `ask-3`); a key used earlier in the same task gets the position appended,
/// so keys stay unique for the task's life.
#[must_use = "a question does nothing until it is awaited"]
pub struct Question<T> {
    slot: Slot,
    kind: StepKind,
    key: Option<String>,
    request: Result<InputRequest, String>,
    decode: fn(Value) -> Result<T, AskError>,
}

impl<T> fmt::Debug for Question<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Question")
            .field("kind", &self.kind)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl<T> Question<T> {
    fn new(
        kind: StepKind,
        name: String,
        request: Result<InputRequest, String>,
        decode: fn(Value) -> Result<T, AskError>,
    ) -> Self {
        Self {
            slot: slot(kind, name),
            kind,
            key: None,
            request,
            decode,
        }
    }

    /// Names the question's key in `inputRequests` (for clients or tests that
    /// expect a given key).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
}

impl<T: Send + 'static> std::future::IntoFuture for Question<T> {
    type Output = Result<T, AskError>;
    type IntoFuture = BoxFuture<'static, Result<T, AskError>>;

    fn into_future(self) -> Self::IntoFuture {
        let Self {
            slot,
            kind,
            key,
            request,
            decode,
        } = self;
        Box::pin(async move {
            let request = request.map_err(AskError::InvalidRequest)?;
            let answer = match slot {
                Slot::Outside => return Err(AskError::NoTask),
                Slot::Diverged => forever().await,
                Slot::Replay {
                    ctx,
                    value,
                    position,
                } => {
                    ctx.claim_key(kind, key.as_deref(), position);
                    value
                }
                Slot::Live {
                    ctx,
                    position,
                    name,
                } => {
                    if ctx.stopping() {
                        forever().await;
                    }
                    if !ctx.caps.allows(&request) {
                        return Err(AskError::Unsupported(request.capability()));
                    }
                    let key = ctx.claim_key(kind, key.as_deref(), position);
                    match ctx.take_inline_answer(&key) {
                        Some(answer) => {
                            let guard = InFlight::enter(&ctx);
                            let answer = ctx.record_value(position, kind, name, answer).await;
                            drop(guard);
                            answer
                        }
                        None => {
                            ctx.park(PendingInput {
                                key,
                                position,
                                kind,
                                name,
                                request,
                            });
                            forever().await
                        }
                    }
                }
            };
            decode(answer)
        })
    }
}

fn decode_elicit<T: Elicit>(answer: Value) -> Result<T, AskError> {
    match answer.get("action").and_then(Value::as_str) {
        Some("accept") => {
            T::from_content(answer.get("content").cloned().unwrap_or_else(|| json!({})))
                .map_err(AskError::InvalidAnswer)
        }
        Some("decline") => Err(AskError::Declined),
        Some("cancel") => Err(AskError::Cancelled),
        _ => Err(AskError::InvalidAnswer(
            "expected `action` to be `accept`, `decline` or `cancel`".into(),
        )),
    }
}

#[allow(clippy::unnecessary_wraps)]
fn decode_raw(answer: Value) -> Result<Value, AskError> {
    Ok(answer)
}

/// Asks the user to fill in the form `T` and waits for the answer.
///
/// The task parks in `input_required` with an `elicitation/create` request
/// (form mode, `requestedSchema` from `T`) under a key unique for the task's
/// life; it holds no worker while it waits. When the client answers with
/// `tasks/update`, the answer is journaled and the task replays to this point
/// and carries on. Decline and cancel come back as [`AskError`]s. A client
/// that did not declare `elicitation` gets no question:
/// [`AskError::Unsupported`] comes back at once.
///
/// ```
/// use mcp_tasks_runtime::{Elicit, ToolError, ask_user, task_tool};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema, Elicit)]
/// struct Name {
///     name: String,
/// }
///
/// #[task_tool]
/// async fn greet_asking() -> Result<String, ToolError> {
///     let Name { name } = ask_user("What is your name?").key("user_name").await?;
///     Ok(format!("Hello, {name}!"))
/// }
/// ```
pub fn ask_user<T: Elicit + Send + 'static>(message: impl Into<String>) -> Question<T> {
    let request = Ok(InputRequest::Form(FormRequest {
        message: message.into(),
        requested_schema: T::requested_schema(),
    }));
    Question::new(
        StepKind::Ask,
        short_type_name::<T>(),
        request,
        decode_elicit::<T>,
    )
}

/// Asks a yes/no question: `Ok(true)` when the user accepts and ticks the box.
pub fn confirm(message: impl Into<String>) -> Question<bool> {
    ask_user::<bool>(message)
}

/// Asks the client's model for a completion (`sampling/createMessage`), parking
/// the task like [`ask_user`]. `params` are the request's params (a JSON
/// object; anything else comes back as [`AskError::InvalidRequest`]); the
/// result is the client's `CreateMessageResult`.
pub fn sample(params: Value) -> Question<Value> {
    Question::new(
        StepKind::Sample,
        "sample".to_owned(),
        match params {
            Value::Object(params) => Ok(InputRequest::Sample(params)),
            other => Err(format!(
                "sampling params must be a JSON object, not {other}"
            )),
        },
        decode_raw,
    )
}

/// Asks the client for its roots (`roots/list`), parking the task like
/// [`ask_user`]. Returns the client's `ListRootsResult`.
pub fn list_roots() -> Question<Value> {
    Question::new(
        StepKind::Roots,
        "roots".to_owned(),
        Ok(InputRequest::ListRoots),
        decode_raw,
    )
}

fn short_type_name<T>() -> String {
    let full = std::any::type_name::<T>();
    // `a::b::C<d::E>` -> `C<E>`: stable across module moves.
    let mut out = String::new();
    let mut seg = String::new();
    for ch in full.chars() {
        match ch {
            ':' => seg.clear(),
            '<' | '>' | ',' | ' ' | '(' | ')' | '[' | ']' | ';' | '&' => {
                out.push_str(&seg);
                seg.clear();
                out.push(ch);
            }
            c => seg.push(c),
        }
    }
    out.push_str(&seg);
    out
}

#[cfg(test)]
mod tests {
    use super::short_type_name;

    #[test]
    fn short_names() {
        assert_eq!(short_type_name::<String>(), "String");
        assert_eq!(
            short_type_name::<Option<std::string::String>>(),
            "Option<String>"
        );
        assert_eq!(short_type_name::<bool>(), "bool");
    }
}
