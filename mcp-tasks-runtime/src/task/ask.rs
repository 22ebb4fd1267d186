//! Questions to the client: [`ask_user`], [`confirm`], [`ask_url`],
//! [`sample`] and [`list_roots`], each a [`Question`] that parks the task
//! until answered.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::{
    context::{InFlight, Live, Slot, forever},
    scope::{branch_timed_out, hold_while_probing, now_ms, race, second_slot, slot},
    steps::recorded,
    unfinished::Unfinished,
};
use crate::{
    elicit::Elicit,
    input::{FormRequest, InputRequest, UrlRequest, check_url},
    journal::{PendingInput, StepKind, is_timed_out, timed_out_value},
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
    /// The answer did not decode into the type asked for. Rare: the engine
    /// checks every answer against the question's form (its
    /// `requestedSchema`) before taking it, and leaves the question open
    /// when it does not fit, so this comes only from an answer the schema
    /// lets through and the type does not (say, a number with a fraction
    /// for an integer field the schema types as `number`), or from one
    /// journaled before answers were checked.
    #[error("the answer does not fit the form: {0}")]
    InvalidAnswer(String),
    /// The calling client did not declare the capability (elicitation,
    /// `elicitation.url`, sampling or roots) this question needs.
    #[error("the client does not support {0}")]
    Unsupported(&'static str),
    /// Called outside a running task (for example in a unit test of the fn).
    #[error("not running inside a task")]
    NoTask,
    /// Called inside a checkpoint's closure: a step cannot wait for the user
    /// halfway, and a replay never runs the closure. Ask before or after
    /// the checkpoint.
    #[error(
        "a question cannot be asked inside a checkpoint's closure: ask before or after the checkpoint"
    )]
    InsideCheckpoint,
    /// The question itself is malformed (say, sampling params that are not
    /// a JSON object, or a URL for [`ask_url`] that is not an absolute
    /// `http`/`https` URL); it was not sent.
    #[error("the question is malformed: {0}")]
    InvalidRequest(String),
    /// The question's deadline ([`Question::timeout`]) passed before an
    /// answer came. Its key has left `inputRequests`; a late answer is
    /// ignored.
    #[error("the question timed out before it was answered")]
    TimedOut,
}

/// A question to the client: built by [`ask_user`], [`confirm`],
/// [`ask_url`], [`sample`] and [`list_roots`], answered by `.await`.
///
/// It takes its journal position when it is created. [`Question::key`] names
/// its key in `inputRequests` (default: the step kind and position, such as
/// `ask-3`); a key used earlier in the same task gets the position appended,
/// so keys stay unique for the task's life. [`Question::timeout`] gives it a
/// deadline, after which it returns [`AskError::TimedOut`]:
///
/// ```
/// use std::time::Duration;
///
/// use mcp_tasks_runtime::{ToolError, confirm, question::AskError, task_tool};
///
/// #[task_tool]
/// async fn roll_out() -> Result<String, ToolError> {
///     match confirm("Roll out?").timeout(Duration::from_secs(3600)).await {
///         Ok(true) => Ok("rolled out".into()),
///         Ok(false) => Ok("not rolled out".into()),
///         Err(AskError::TimedOut) => Ok("nobody answered within the hour".into()),
///         Err(e) => Err(ToolError::new(e.to_string())),
///     }
/// }
/// ```
#[must_use = "a question does nothing until it is awaited"]
pub struct Question<T> {
    /// What it asks, until it is first polled.
    asking: Asking<T>,
    /// Once polled: the asking itself.
    running: Option<BoxFuture<'static, Result<T, AskError>>>,
    /// Fails the run if the question is dropped unanswered while the fn
    /// goes on: armed when it is created, so that the verdict does not
    /// depend on whether a `select!` polled it before dropping it.
    unfinished: Option<Unfinished>,
}

/// A question's parts: its journal position, its key, its deadline's own
/// position and how long it waits, what it asks and how its answer decodes.
struct Asking<T> {
    slot: Slot,
    kind: StepKind,
    key: Option<String>,
    timeout: Option<(Slot, Duration)>,
    request: Result<InputRequest, String>,
    decode: fn(Value) -> Result<T, AskError>,
}

debug_fields!(Question<T> |q|
    kind: q.asking.kind,
    key: q.asking.key,
    timeout: q.asking.timeout.as_ref().map(|(_, d)| d),
);

impl<T> Question<T> {
    fn new(
        kind: StepKind,
        name: String,
        request: Result<InputRequest, String>,
        decode: fn(Value) -> Result<T, AskError>,
    ) -> Self {
        let slot = slot(kind, name);
        let unfinished = Unfinished::of(&slot, || "a question".to_owned());
        Self {
            asking: Asking {
                slot,
                kind,
                key: None,
                timeout: None,
                request,
                decode,
            },
            running: None,
            unfinished,
        }
    }

    /// Names the question's key in `inputRequests` (for clients or tests that
    /// expect a given key).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        let key = key.into();
        if let Some(unfinished) = &mut self.unfinished {
            unfinished.rename(format!("the question `{key}`"));
        }
        self.asking.key = Some(key);
        self
    }

    /// Gives the question a deadline: `after` from when it is first asked.
    /// If no answer has come by then, it returns [`AskError::TimedOut`]
    /// and the task carries on.
    ///
    /// The deadline is journaled (at a journal position of its own, taken
    /// here) the first time the question is asked, so it stays fixed across
    /// replays and restarts. Whichever comes first, the answer or the
    /// deadline, is journaled at the question's position, and every replay
    /// takes the same branch; the key leaves `inputRequests` when the
    /// deadline wins, and a late answer is ignored like an answer to any
    /// unknown key. A parked task holds no worker while it waits: the
    /// store keeps the deadline, and the engine times the question out
    /// even after a restart (within its scan interval).
    ///
    /// A call answered inline (MRTR `InputRequiredResult` rounds, no task)
    /// keeps the deadline in its journal, so in the signed `requestState`:
    /// when the client comes back after it, the question counts as timed
    /// out, whatever the answer. Calling `timeout` again changes the
    /// duration and takes no new position. Adding or removing `.timeout`
    /// moves the steps after the question, as any new step does: tasks
    /// that recorded steps past it under the old code fail their replay as
    /// non-deterministic.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use mcp_tasks_runtime::{Elicit, ToolError, ask_user, question::AskError, task_tool};
    /// use schemars::JsonSchema;
    /// use serde::Deserialize;
    ///
    /// #[derive(Deserialize, JsonSchema, Elicit)]
    /// struct Approve {
    ///     /// Roll the build out?
    ///     approve: bool,
    /// }
    ///
    /// #[task_tool]
    /// async fn deploy() -> Result<String, ToolError> {
    ///     let answer = ask_user::<Approve>("Roll out?")
    ///         .timeout(Duration::from_secs(3600))
    ///         .await;
    ///     match answer {
    ///         Ok(Approve { approve: true }) => Ok("rolled out".into()),
    ///         Ok(_) => Ok("declined".into()),
    ///         Err(AskError::TimedOut) => Ok("no answer within the hour: not rolled out".into()),
    ///         Err(e) => Err(ToolError::new(e.to_string())),
    ///     }
    /// }
    /// ```
    pub fn timeout(mut self, after: Duration) -> Self {
        match &mut self.asking.timeout {
            Some((_, d)) => *d = after,
            None => {
                let slot = second_slot(StepKind::Sleep, "timeout".to_owned());
                self.asking.timeout = Some((slot, after));
            }
        }
        self
    }
}

/// The deadline of a question with a timeout, from its journal position
/// (recorded the first time the question is asked); `Err` outside a task.
async fn deadline(slot: Slot, after: Duration) -> Result<i64, AskError> {
    match slot {
        Slot::Outside => Err(AskError::NoTask),
        Slot::Nested => Err(AskError::InsideCheckpoint),
        slot => {
            let span = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
            let what = "the deadline of a question";
            Ok(recorded(slot, StepKind::Sleep, "timeout", what, || {
                json!(now_ms().saturating_add(span))
            })
            .await)
        }
    }
}

/// A `Question` is a future, so it works wherever one does: `.await`,
/// `futures::join!`, `tokio::join!`. (It starts asking when first polled.)
impl<T: Send + 'static> Future for Question<T> {
    type Output = Result<T, AskError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let running = this.running.get_or_insert_with(|| {
            // A question asks once: what is left behind is spent.
            let asking = &mut this.asking;
            asked(Asking {
                slot: std::mem::replace(&mut asking.slot, Slot::Outside),
                key: asking.key.take(),
                timeout: asking.timeout.take(),
                request: std::mem::replace(&mut asking.request, Err(String::new())),
                ..*asking
            })
        });
        let poll = running.as_mut().poll(cx);
        if poll.is_ready()
            && let Some(unfinished) = this.unfinished.take()
        {
            unfinished.done();
        }
        poll
    }
}

/// What awaiting a question does.
fn asked<T: Send + 'static>(asking: Asking<T>) -> BoxFuture<'static, Result<T, AskError>> {
    let Asking {
        slot,
        kind,
        key,
        timeout,
        request,
        decode,
    } = asking;
    Box::pin(async move {
        let request = request.map_err(AskError::InvalidRequest)?;
        let deadline = match timeout {
            Some((slot, after)) => Some(deadline(slot, after).await?),
            None => None,
        };
        let answer = match slot {
            Slot::Outside => return Err(AskError::NoTask),
            Slot::Nested => return Err(AskError::InsideCheckpoint),
            Slot::Diverged => forever().await,
            Slot::Replay(step) => {
                step.ctx.claim_key(kind, key.as_deref(), step.position);
                step.value
            }
            Slot::Live(Live {
                ctx,
                position,
                name,
            }) => {
                hold_while_probing().await;
                if ctx.stopping() {
                    forever().await;
                }
                if !ctx.run.caps.allows(&request) {
                    return Err(AskError::Unsupported(request.capability()));
                }
                let key = ctx.claim_key(kind, key.as_deref(), position);
                // An inline answer (MRTR) that does not fit the question is
                // not taken: the question is asked again, under the same
                // key, its message saying what was wrong.
                let mut request = request;
                let answer = ctx.take_inline_answer(&key).and_then(|answer| {
                    match request.check_answer(&answer) {
                        Ok(()) => Some(answer),
                        Err(why) => {
                            request.prefix_message(&format!(
                                "The last answer was not accepted: {why}."
                            ));
                            None
                        }
                    }
                });
                // Past its deadline (an inline round that came back
                // late, a run that resumed late): it times out, however
                // it was answered.
                let answer = if deadline.is_some_and(|at| at <= now_ms()) {
                    Some(timed_out_value())
                } else {
                    answer
                };
                match answer {
                    Some(value) => {
                        let guard = InFlight::enter(&ctx);
                        let answer = ctx.record_value(position, kind, name, value).await;
                        drop(guard);
                        answer
                    }
                    None => {
                        // Dropped while the fn goes on (a `select!`
                        // another branch won), it would leave the run
                        // parked on a question nobody waits for: the
                        // question's guard fails the run then.
                        ctx.park(PendingInput {
                            key,
                            position,
                            kind,
                            name,
                            request,
                            deadline_ms: deadline,
                            race: race(),
                            in_flight: false,
                            answer: None,
                        });
                        forever().await
                    }
                }
            }
        };
        if is_timed_out(&answer) {
            branch_timed_out();
            return Err(AskError::TimedOut);
        }
        decode(answer)
    })
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

/// What the user did with a URL question ([`ask_url`]).
///
/// [`UrlAnswer::Accepted`] means the user agreed to open the page, **not**
/// that whatever the page does (a sign-in, an OAuth consent, a payment) has
/// finished or succeeded: that happens out of band, between the user and
/// the page. Check its outcome on your side (say, whether the credentials
/// the page stores have arrived) before relying on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UrlAnswer {
    /// The user consented to open the URL (`action: "accept"`).
    Accepted,
    /// The user refused to open it (`action: "decline"`).
    Declined,
    /// The user dismissed the request without choosing (`action: "cancel"`).
    Cancelled,
}

fn decode_url(answer: Value) -> Result<UrlAnswer, AskError> {
    match answer.get("action").and_then(Value::as_str) {
        Some("accept") => Ok(UrlAnswer::Accepted),
        Some("decline") => Ok(UrlAnswer::Declined),
        Some("cancel") => Ok(UrlAnswer::Cancelled),
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
/// [`AskError::Unsupported`] comes back at once. To wait only so long, give
/// the question a deadline with [`Question::timeout`]: it then returns
/// [`AskError::TimedOut`] if no answer came in time.
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

/// Sends the user to `url` (a credentials page, an OAuth consent) and waits
/// for what they do: an `elicitation/create` request in URL mode
/// (`{"mode": "url", "message", "url"}`), parked and journaled like
/// [`ask_user`]; a replay returns the journaled [`UrlAnswer`] without asking
/// again. [`Question::key`] and [`Question::timeout`] work as for any
/// question.
///
/// This is how a tool gets a secret: **never** ask for a password, an API
/// key, a token or payment credentials in a form ([`ask_user`]), whose
/// answer passes through the client and lands in the task's journal. Send
/// the user to a page of your own that takes it, over HTTPS, and stores it
/// where the tool can find it. The URL must not carry personal data or
/// credentials, and must not be pre-authenticated.
///
/// [`UrlAnswer::Accepted`] means only that the user consented to open the
/// page, not that the flow there finished: check its outcome yourself.
///
/// `url` must be an absolute `http` or `https` URL with a host and no
/// `user:password@`; anything else comes back as
/// [`AskError::InvalidRequest`] when awaited, and nothing is sent. A client
/// that did not declare `elicitation.url` gets no question:
/// [`AskError::Unsupported`] comes back at once.
///
/// ```no_run
/// use mcp_tasks_runtime::{ToolError, question::{UrlAnswer, ask_url}, task_tool};
///
/// #[task_tool]
/// async fn connect_registry() -> Result<String, ToolError> {
///     let answer = ask_url(
///         "Sign in to the registry to let the tool publish for you.",
///         "https://registry.example.com/connect",
///     )
///     .key("registry_login")
///     .await?;
///     match answer {
///         // Consent to open the page, not proof the sign-in finished.
///         UrlAnswer::Accepted => Ok("check the registry for the new token".into()),
///         _ => Ok("not connected".into()),
///     }
/// }
/// ```
pub fn ask_url(message: impl Into<String>, url: impl Into<String>) -> Question<UrlAnswer> {
    let url = url.into();
    let request = check_url(&url)
        .map(|()| {
            InputRequest::Url(UrlRequest {
                message: message.into(),
                url,
            })
        })
        .map_err(|why| format!("`ask_url` needs an absolute http(s) URL: {why}"));
    Question::new(StepKind::Ask, "url".to_owned(), request, decode_url)
}

/// Asks a yes/no question: `Ok(true)` when the user accepts and ticks the box.
///
/// The form has one required boolean field named `confirm` (title
/// "Confirm"): its `requestedSchema` is
/// `{"type": "object", "properties": {"confirm": {"type": "boolean", "title": "Confirm"}}, "required": ["confirm"]}`,
/// and a client answers with
/// `{"action": "accept", "content": {"confirm": true}}`. A decline or a
/// cancel comes back as an [`AskError`], as for [`ask_user`]. For a field
/// of another name, ask for a struct of your own with [`ask_user`].
///
/// ```
/// use mcp_tasks_runtime::{ToolError, confirm, task_tool, testing::ToolTest};
///
/// /// Asks before deleting.
/// #[task_tool]
/// async fn delete(path: String) -> Result<String, ToolError> {
///     let yes = confirm(format!("Delete {path}?")).await?;
///     Ok(format!("{path}: deleted = {yes}"))
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let test = ToolTest::new(delete_tool()).start().await;
/// let task = test.call(serde_json::json!({"path": "a.txt"})).await;
/// let question = task.question().await;
/// let mcp_tasks_runtime::question::InputRequest::Form(form) = &question.pending().request else {
///     panic!("confirm asks with a form")
/// };
/// assert_eq!(form.requested_schema["required"], serde_json::json!(["confirm"]));
/// task.answer(question.key(), serde_json::json!({"confirm": true})).await;
/// assert_eq!(task.text().await, "a.txt: deleted = true");
/// # }
/// ```
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

/// Asks `request` as it stands, parking the task like [`ask_user`], and
/// returns the client's response as it came (for `elicitation/create`,
/// `{"action": …, "content": …}`): for code that relays questions it did
/// not write, such as those an upstream server returns in an MRTR
/// `InputRequiredResult`. The answer is checked against the request's form
/// like any other.
///
/// ```
/// use mcp_tasks_runtime::{ToolError, question::{self, InputRequest}, task_tool};
///
/// #[task_tool]
/// async fn relayed(request: serde_json::Value) -> Result<String, ToolError> {
///     let request: InputRequest = serde_json::from_value(request)
///         .map_err(|e| ToolError::new(format!("not a question: {e}")))?;
///     let answer = question::ask(request).key("upstream").await?;
///     Ok(answer.to_string())
/// }
/// ```
pub fn ask(request: InputRequest) -> Question<Value> {
    let (kind, name) = match &request {
        InputRequest::Sample(_) => (StepKind::Sample, "sample"),
        InputRequest::ListRoots => (StepKind::Roots, "roots"),
        _ => (StepKind::Ask, "relayed"),
    };
    Question::new(kind, name.to_owned(), Ok(request), decode_raw)
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
