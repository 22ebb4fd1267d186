//! A task's journal as JSON ([`JournalExport`]), and its redaction.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{
    error::Result,
    journal::{JournalEntry, StepKind},
    store::{Store, TaskRecord},
};

/// A task's journal as JSON: what the operator CLI (`tasks journal ID`)
/// and the admin page (`/tasks/{id}/journal.json`) export, and what
/// `testing::ToolTest::replay_journal`
/// replays, so that a recorded history becomes a regression test.
///
/// ```json
/// {
///   "taskId": "…",
///   "tool": "report",
///   "version": 1,
///   "status": "input_required",
///   "principal": null,
///   "createdAtMs": 1764748800000,
///   "arguments": {"team": "ops"},
///   "entries": [
///     {"position": 0, "kind": "checkpoint", "name": "fetch", "value": 3}
///   ]
/// }
/// ```
///
/// `kind` is a [`StepKind`] as stored (`checkpoint`, `ask`, `sample`,
/// `roots`, `now`, `uuid`, `sleep`, `select`, `patch`); `value` is the
/// recorded value (a question's: the client's answer). The questions a task
/// still waits on are not entries: they are not journaled until answered.
///
/// **An export holds secrets in clear**: the call's arguments, the users'
/// answers, and every checkpoint's value (API replies, tokens), as the
/// store does; and the task id, a bearer secret where no principal is
/// configured. Before sharing one or committing it as a test fixture, take
/// [`JournalExport::redacted`] (`tasks journal ID --redact`,
/// `/tasks/{id}/journal.json?redact=1`) and put back by hand only what the
/// replay needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JournalExport {
    /// The task's id.
    pub task_id: String,
    /// Its tool's name.
    pub tool: String,
    /// The version of the tool that created the task.
    pub version: u32,
    /// Its status when exported (`working`, `input_required`, …).
    pub status: String,
    /// Who created it (`None`: created without a principal).
    pub principal: Option<String>,
    /// When it was created, Unix milliseconds.
    pub created_at_ms: i64,
    /// The arguments it was called with.
    pub arguments: Map<String, Value>,
    /// Its journal, ordered by position.
    pub entries: Vec<JournalEntry>,
}

impl JournalExport {
    /// The export of `task` with its `journal` (as [`Store::journal`]
    /// reads it).
    pub fn new(task: &TaskRecord, journal: Vec<JournalEntry>) -> Self {
        Self {
            task_id: task.id.clone(),
            tool: task.tool.clone(),
            version: task.tool_version,
            status: task.status.as_str().to_owned(),
            principal: task.principal.clone(),
            created_at_ms: task.created_at_ms,
            arguments: task.arguments.clone(),
            entries: journal,
        }
    }

    /// This export without what callers, users and steps put in it, for
    /// sharing or for a test fixture: every string of the arguments and of
    /// the values of `checkpoint` and `roots` entries becomes
    /// `"<redacted>"` and every number `0` (object keys, array lengths,
    /// booleans and nulls are kept, so the shape is); of `ask` and `sample`
    /// entries (`{"action": …, "content": …}`, a completion), only
    /// `content` is, so the answer's action and the completion's role and
    /// model remain (and the `type` and `mimeType` of a completion's
    /// content blocks). The engine's own values (`now`, `uuid`, `sleep`,
    /// `select`, `patch`) are kept. The task id becomes 32 zeros and a
    /// principal `"<redacted>"`. Positions, kinds and names, the tool, its
    /// version, the status and the creation time are kept.
    ///
    /// What it can still be used for: reading the path a task took, and
    /// `testing::ToolTest::replay_journal`,
    /// which deserializes each value into the type the code asks for and
    /// runs on what the code does with it. Where a redacted value does not
    /// deserialize (an enum, a date, a number that must be positive) or
    /// leads the code down another branch, the replay fails or diverges:
    /// put a harmless value of the right type back in the JSON (or in the
    /// test: `export.entries[2].value = json!(…)`) before replaying.
    ///
    /// ```
    /// use mcp_tasks_runtime::replay::JournalExport;
    ///
    /// let export: JournalExport = serde_json::from_value(serde_json::json!({
    ///     "taskId": "5f2b3c9e0d4a4e6f8a1b2c3d4e5f6a7b", "tool": "deploy", "version": 1,
    ///     "status": "completed", "principal": "alice", "createdAtMs": 0,
    ///     "arguments": {"token": "s3cret", "replicas": 3},
    ///     "entries": [
    ///         {"position": 0, "kind": "checkpoint", "name": "login", "value": {"session": "abc"}},
    ///         {"position": 1, "kind": "ask", "name": "Approve",
    ///          "value": {"action": "accept", "content": {"approve": true, "note": "ok by me"}}},
    ///         {"position": 2, "kind": "sleep", "name": "sleep", "value": 1764748800000_i64},
    ///     ],
    /// }))
    /// .unwrap();
    /// let redacted = serde_json::to_value(export.redacted()).unwrap();
    /// assert_eq!(redacted["arguments"], serde_json::json!({"token": "<redacted>", "replicas": 0}));
    /// assert_eq!(redacted["entries"][0]["value"], serde_json::json!({"session": "<redacted>"}));
    /// assert_eq!(redacted["entries"][1]["value"]["action"], "accept");
    /// assert_eq!(redacted["entries"][1]["value"]["content"]["note"], "<redacted>");
    /// assert_eq!(redacted["entries"][2]["value"], 1764748800000_i64);
    /// assert_eq!(redacted["principal"], "<redacted>");
    /// ```
    #[must_use]
    pub fn redacted(mut self) -> Self {
        self.arguments.values_mut().for_each(redact);
        for entry in &mut self.entries {
            match entry.kind {
                StepKind::Checkpoint | StepKind::Roots => redact(&mut entry.value),
                StepKind::Ask => {
                    if let Some(content) = entry.value.get_mut("content") {
                        redact(content);
                    }
                }
                StepKind::Sample => {
                    if let Some(content) = entry.value.get_mut("content") {
                        redact_content(content);
                    }
                }
                StepKind::Now
                | StepKind::Uuid
                | StepKind::Sleep
                | StepKind::Select
                | StepKind::Patch => {}
            }
        }
        self.task_id = "0".repeat(32);
        if self.principal.is_some() {
            self.principal = Some(REDACTED.to_owned());
        }
        self
    }

    /// Reads task `id` and its journal from `store`; `None` when there is
    /// no such task.
    ///
    /// # Errors
    ///
    /// Store failures.
    pub async fn read(store: &dyn Store, id: &str) -> Result<Option<Self>> {
        let Some(task) = store.get(id).await? else {
            return Ok(None);
        };
        let journal = store.journal(id).await?;
        Ok(Some(Self::new(&task, journal)))
    }
}

/// What [`JournalExport::redacted`] writes in place of a string.
const REDACTED: &str = "<redacted>";

/// `value` with its strings and numbers replaced, its shape kept.
fn redact(value: &mut Value) {
    match value {
        Value::String(s) => REDACTED.clone_into(s),
        Value::Number(n) => *n = 0.into(),
        Value::Array(items) => items.iter_mut().for_each(redact),
        Value::Object(members) => members.values_mut().for_each(redact),
        Value::Bool(_) | Value::Null => {}
    }
}

/// A completion's content (a block, or blocks) with its data replaced and
/// its `type` and `mimeType` kept, so that it still reads as content.
fn redact_content(content: &mut Value) {
    match content {
        Value::Array(blocks) => blocks.iter_mut().for_each(redact_content),
        Value::Object(block) => block
            .iter_mut()
            .filter(|(key, _)| !matches!(key.as_str(), "type" | "mimeType"))
            .for_each(|(_, value)| redact(value)),
        other => redact(other),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Nothing a caller, a user or a step put in an export is left in its
    /// redacted form, whatever the nesting; the path and the shape are.
    #[test]
    fn a_redacted_export_keeps_the_path_and_the_shape_and_no_secret() {
        let secrets = [
            "hunter2",
            "4111111111111111",
            "alice@example.com",
            "sk-live-123",
        ];
        let entry = |position, kind, name: &str, value| JournalEntry {
            position,
            kind,
            name: name.to_owned(),
            value,
        };
        let export = JournalExport {
            task_id: "5f2b3c9e0d4a4e6f8a1b2c3d4e5f6a7b".to_owned(),
            tool: "pay".to_owned(),
            version: 2,
            status: "working".to_owned(),
            principal: Some("alice@example.com".to_owned()),
            created_at_ms: 1_764_748_800_000,
            arguments: json!({"card": "4111111111111111", "amount": 4200, "notify": true,
                              "tags": ["sk-live-123", null]})
            .as_object()
            .unwrap()
            .clone(),
            entries: vec![
                entry(
                    0,
                    StepKind::Checkpoint,
                    "login",
                    json!({"token": "sk-live-123",
                                                               "ttl": 3600, "nested": [{"p": "hunter2"}]}),
                ),
                entry(
                    1,
                    StepKind::Ask,
                    "Pin",
                    json!({"action": "accept",
                                                       "content": {"pin": "hunter2", "remember": false}}),
                ),
                entry(
                    2,
                    StepKind::Sample,
                    "Summary",
                    json!({"role": "assistant", "model": "m1",
                        "content": {"type": "text", "text": "alice@example.com paid"}}),
                ),
                entry(
                    3,
                    StepKind::Roots,
                    "roots",
                    json!({"roots": [{"uri": "file:///home/alice"}]}),
                ),
                entry(4, StepKind::Now, "now", json!(1_764_748_800_123_i64)),
                entry(5, StepKind::Select, "select", json!(1)),
                entry(6, StepKind::Checkpoint, "receipt", json!("hunter2")),
            ],
        };
        let redacted = export.clone().redacted();
        let text = serde_json::to_string(&redacted).unwrap();
        for secret in secrets.iter().chain(&["5f2b3c9e", "/home/alice", "4200"]) {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(
            Value::Object(redacted.arguments.clone()),
            json!({"card": "<redacted>", "amount": 0, "notify": true, "tags": ["<redacted>", null]})
        );
        let values: Vec<&Value> = redacted.entries.iter().map(|e| &e.value).collect();
        assert_eq!(
            values[..4],
            [
                &json!({"token": "<redacted>", "ttl": 0, "nested": [{"p": "<redacted>"}]}),
                &json!({"action": "accept", "content": {"pin": "<redacted>", "remember": false}}),
                &json!({"role": "assistant", "model": "m1",
                        "content": {"type": "text", "text": "<redacted>"}}),
                &json!({"roots": [{"uri": "<redacted>"}]}),
            ]
        );
        // The engine's own values, and the path, are as they were.
        assert_eq!(
            values[4..6],
            [&export.entries[4].value, &export.entries[5].value]
        );
        for (a, b) in redacted.entries.iter().zip(&export.entries) {
            assert_eq!((a.position, a.kind, &a.name), (b.position, b.kind, &b.name));
        }
        assert_eq!(redacted.task_id, "0".repeat(32));
        assert_eq!(redacted.principal.as_deref(), Some("<redacted>"));
        assert_eq!(
            (
                &redacted.tool,
                redacted.version,
                &redacted.status,
                redacted.created_at_ms
            ),
            (
                &export.tool,
                export.version,
                &export.status,
                export.created_at_ms
            )
        );
        // It reads back as an export.
        let back: JournalExport = serde_json::from_str(&text).unwrap();
        assert_eq!(back, redacted);
    }
}
