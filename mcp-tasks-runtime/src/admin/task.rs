//! One task's page (`/tasks/{id}`): its summary, the questions it waits
//! on and its journal as a timeline; and the journal's export as JSON.

use axum::{
    extract::{Path, RawQuery, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use maud::{Markup, html};
use serde_json::Value;

use super::{
    Admin,
    html::{age, page, rfc3339, status_badge, truncate},
};
use crate::{
    question::InputRequest,
    store::{JournalEntry, TaskRecord, TaskSummary},
};

pub(super) async fn task_page(
    State(Admin { engine, .. }): State<Admin>,
    Path(id): Path<String>,
) -> Response {
    let store = engine.store();
    let (task, journal) = match (store.get(&id).await, store.journal(&id).await) {
        (Ok(Some(task)), Ok(journal)) => (task, journal),
        (Ok(None), _) => {
            let body = html! {
                p.error { "No task " code { (id) } " (never created, or expired and purged)." }
                p { a href="/" { "All tasks" } }
            };
            return (StatusCode::NOT_FOUND, page("No such task", body)).into_response();
        }
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!(error = %crate::id::Redacted(&e), "admin page: the store could not be read");
            let body = html! { p.error { "The store could not be read; see the server's log." } };
            return (StatusCode::SERVICE_UNAVAILABLE, page("Task", body)).into_response();
        }
    };
    page(&format!("Task {}", task.tool), timeline(&task, &journal)).into_response()
}

/// `/tasks/{id}/journal.json`: the task's [`JournalExport`](crate::replay::JournalExport),
/// which holds arguments, answers and step values in clear;
/// `?redact=1`: its [`redacted`](crate::replay::JournalExport::redacted)
/// form, to share or commit.
pub(super) async fn journal_json(
    State(Admin { engine, .. }): State<Admin>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let json = [(header::CONTENT_TYPE, "application/json")];
    let redact = url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .any(|(key, value)| key == "redact" && !matches!(&*value, "0" | "false"));
    match crate::replay::JournalExport::read(&**engine.store(), &id).await {
        Ok(Some(export)) => {
            match serde_json::to_string_pretty(&if redact { export.redacted() } else { export }) {
                Ok(body) => (json, body).into_response(),
                Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
            }
        }
        Ok(None) => {
            let error = serde_json::json!({"error": format!("no task {id}")});
            (StatusCode::NOT_FOUND, json, error.to_string()).into_response()
        }
        Err(e) => {
            tracing::warn!(error = %crate::id::Redacted(&e), "admin page: the store could not be read");
            let error =
                serde_json::json!({"error": "the store could not be read; see the server's log"});
            (StatusCode::SERVICE_UNAVAILABLE, json, error.to_string()).into_response()
        }
    }
}

fn timeline(task: &TaskRecord, journal: &[JournalEntry]) -> Markup {
    let now = crate::clock::now_ms();
    html! {
        p { a href="/" { "← All tasks" } }
        dl.summary #summary {
            dt { "Task" } dd.id { (task.id) }
            dt { "Tool" } dd { (task.tool) }
            dt { "Status" } dd { (status_badge(&TaskSummary::of(task))) }
            @if let Some(m) = &task.status_message { dt { "Message" } dd { (m) } }
            dt { "Principal" } dd { (task.principal.as_deref().unwrap_or("—")) }
            dt { "Created" } dd { (rfc3339(task.created_at_ms)) " (" (age(now - task.created_at_ms)) " ago)" }
            dt { "Updated" } dd { (rfc3339(task.updated_at_ms)) " (" (age(now - task.updated_at_ms)) " ago)" }
            @if let Some(at) = task.expires_at_ms() { dt { "Expires" } dd { (rfc3339(at)) } }
            @if let Some(lease) = &task.lease {
                dt { "Held by" } dd { (lease.owner) " (attempt " (task.fence) ", lease until " (rfc3339(lease.expires_at_ms)) ")" }
            }
            @if let Some(at) = task.wake_at_ms { dt { "Wakes" } dd { (rfc3339(at)) } }
            dt { "Arguments" } dd { code { (truncate(&Value::Object(task.arguments.clone()).to_string(), 200)) } }
            @if let Some(e) = &task.error { dt { "Error" } dd.error { (e.message) " (" (e.code) ")" } }
            @if let Some(r) = &task.result { dt { "Result" } dd { code { (truncate(&Value::Object(r.clone()).to_string(), 200)) } } }
        }
        @if !task.pending.is_empty() {
            h2 { "Waiting on" }
            table #questions {
                thead { tr { th { "Key" } th { "Position" } th { "Kind" } th { "Name" } th { "Question" } th { "Times out" } } }
                tbody {
                    @for p in task.pending.iter().filter(|p| p.is_open()) {
                        tr {
                            td { code { (p.key) } }
                            td.num { (p.position) }
                            td { (p.kind.as_str()) }
                            td { (p.name) }
                            td { (truncate(&question(&p.request), 120)) }
                            td { (p.deadline_ms.map(rfc3339).unwrap_or_else(|| "—".into())) }
                        }
                    }
                }
            }
        }
        h2 { "Journal" }
        p {
            a #export href=(format!("/tasks/{}/journal.json", task.id)) { "Export as JSON" }
            " (arguments, answers and step values in clear) · "
            a #export-redacted href=(format!("/tasks/{}/journal.json?redact=1", task.id)) { "redacted" }
            " (to share, or commit as a test fixture)"
        }
        @if journal.is_empty() {
            p.empty { "No step journaled yet." }
        } @else {
            ol.timeline #journal {
                @for e in journal {
                    li data-kind=(e.kind.as_str()) {
                        span.pos { (e.position) }
                        span.kind { (e.kind.as_str()) }
                        span.name { (e.name) }
                        code.value { (truncate(&e.value.to_string(), 160)) }
                    }
                }
            }
        }
    }
}

/// What a question asks, in a line.
fn question(request: &InputRequest) -> String {
    match request {
        InputRequest::Form(f) => f.message.clone(),
        InputRequest::Url(u) => u.message.clone(),
        InputRequest::Sample(_) => "a completion (sampling)".into(),
        InputRequest::ListRoots => "the client's roots".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_and_truncated() {
        let mut task = TaskRecord::new("abc", "t<script>", 0);
        task.status_message = Some("<b>hi</b>".into());
        let entry = JournalEntry {
            position: 0,
            kind: crate::store::StepKind::Checkpoint,
            name: "<i>".into(),
            value: Value::String("x".repeat(500)),
        };
        let html = timeline(&task, &[entry]).into_string();
        assert!(!html.contains("<script>") && !html.contains("<b>hi") && !html.contains("<i>"));
        assert!(html.contains("&lt;script&gt;"));
        assert!(html.contains('…') && !html.contains(&"x".repeat(200)));
    }
}
