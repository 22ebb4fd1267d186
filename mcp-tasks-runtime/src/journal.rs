//! Journal entries and outstanding input requests: the durable record a task
//! replays from.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::input::InputRequest;

/// What kind of step occupies a journal position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// [`checkpoint`](crate::checkpoint) / [`step`](crate::durable::step).
    Checkpoint,
    /// [`ask_user`](crate::ask_user) (an `elicitation/create` form) and
    /// [`ask_url`](crate::question::ask_url) (in URL mode).
    Ask,
    /// [`sample`](crate::question::sample): `sampling/createMessage`.
    Sample,
    /// [`list_roots`](crate::question::list_roots): `roots/list`.
    Roots,
    /// [`now`](crate::durable::now).
    Now,
    /// [`uuid`](crate::durable::uuid).
    Uuid,
    /// [`sleep`](crate::durable::sleep): the deadline.
    Sleep,
    /// [`select`](crate::durable::select) / [`select_all`](crate::durable::select_all): which
    /// branch won, by its index.
    Select,
    /// [`patched`](crate::durable::patched): the marker of a new code path.
    Patch,
}

impl StepKind {
    /// The kind's name as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Checkpoint => "checkpoint",
            Self::Ask => "ask",
            Self::Sample => "sample",
            Self::Roots => "roots",
            Self::Now => "now",
            Self::Uuid => "uuid",
            Self::Sleep => "sleep",
            Self::Select => "select",
            Self::Patch => "patch",
        }
    }

    /// Parses a stored kind.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "checkpoint" => Self::Checkpoint,
            "ask" => Self::Ask,
            "sample" => Self::Sample,
            "roots" => Self::Roots,
            "now" => Self::Now,
            "uuid" => Self::Uuid,
            "sleep" => Self::Sleep,
            "select" => Self::Select,
            "patch" => Self::Patch,
            _ => return None,
        })
    }
}

/// One recorded step: `(position, kind, name, value)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// The step's position in the fn's run, from 0.
    pub position: u32,
    /// The step's kind.
    pub kind: StepKind,
    /// The step's name (the checkpoint name, or the asked type).
    pub name: String,
    /// The recorded value (for input requests: the client's response).
    pub value: Value,
}

/// An input request the task is waiting on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingInput {
    /// The key in `inputRequests`, unique for the task's life.
    pub key: String,
    /// The journal position the answer goes to.
    pub position: u32,
    /// The step kind.
    pub kind: StepKind,
    /// The step name.
    pub name: String,
    /// The question.
    pub request: InputRequest,
    /// When the question times out, Unix milliseconds (`None`: it waits for
    /// its answer for as long as the task lives). Fixed when the question is
    /// first asked (see [`Question::timeout`](crate::question::Question::timeout)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<i64>,
    /// The journal position of the [`select`](crate::durable::select) this question
    /// is a branch of (`None`: it is not raced). Questions of one `select`
    /// end together: the first answer (or time-out) among them is journaled
    /// and takes the others out of `inputRequests`, and the task runs again
    /// once nothing else is outstanding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub race: Option<u32>,
    /// Asked while the run goes on ([`ask_in_flight`](crate::durable::ask_in_flight)):
    /// the question is not journaled (`position` means nothing), it lasts
    /// as long as the lease of the run that asked it, and its answer waits
    /// in [`PendingInput::answer`] for that run to take it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_flight: bool,
    /// The answer to a question asked in flight, until the run that asked
    /// it takes it (always `None` for a question that parks the task, whose
    /// answer is journaled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Value>,
}

impl PendingInput {
    /// Whether the question still waits for its answer: it is shown in
    /// `inputRequests` (an answer to a question asked in flight waits here
    /// only for its run to take it).
    pub fn is_open(&self) -> bool {
        self.answer.is_none()
    }
}

/// The value journaled at a question's position when its deadline passed
/// before an answer came (see [`TaskRecord::time_out`](crate::store::TaskRecord::time_out)):
/// the JSON string `"timed_out"`. Every answer a client can give is a JSON
/// object, and anything else is ignored, so no client can forge it.
pub const TIMED_OUT: &str = "timed_out";

/// The journal value that says a question timed out ([`TIMED_OUT`]).
pub(crate) fn timed_out_value() -> Value {
    Value::String(TIMED_OUT.to_owned())
}

/// Whether a question's journal value says it timed out.
pub(crate) fn is_timed_out(value: &Value) -> bool {
    value.as_str() == Some(TIMED_OUT)
}
