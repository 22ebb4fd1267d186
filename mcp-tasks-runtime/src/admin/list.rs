//! The list of tasks (`/`): its filters and pages, read from the query
//! string, and the page itself.

use axum::{
    extract::{RawQuery, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use maud::html;

use super::{
    Admin,
    html::{age, page, status_badge, truncate},
};
use crate::{
    Engine,
    store::{ListCursor, PageFrom, TaskFilter, TaskStatus, TaskSummary},
};

/// The list's filters and page, from the query string.
#[derive(Debug, Default)]
struct Filters {
    statuses: Vec<TaskStatus>,
    tool: Option<String>,
    principal: Option<String>,
    anonymous: bool,
    /// Every task, finished ones too, of every caller.
    all: bool,
    /// Where the page starts (`after=` or `before=`).
    from: Option<PageFrom>,
}

impl Filters {
    fn parse(query: Option<&str>) -> Result<Self, String> {
        let mut f = Self::default();
        for (k, v) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match &*k {
                "status" if !v.is_empty() => f
                    .statuses
                    .push(TaskStatus::parse(&v).ok_or_else(|| format!("unknown status `{v}`"))?),
                "tool" if !v.is_empty() => f.tool = Some(v.into_owned()),
                "principal" if !v.is_empty() => f.principal = Some(v.into_owned()),
                "anonymous" => f.anonymous = v == "1" || v == "on" || v == "true",
                "all" => f.all = v == "1" || v == "on" || v == "true",
                "after" => f.from = Some(PageFrom::After(parse_cursor(&v)?)),
                "before" => f.from = Some(PageFrom::Before(parse_cursor(&v)?)),
                _ => {}
            }
        }
        Ok(f)
    }

    /// The tasks the page is about, whatever their status: the counts
    /// cover these.
    fn scope(&self) -> TaskFilter {
        let mut scope = TaskFilter::default();
        if let Some(p) = &self.principal {
            scope = scope.principal(Some(p));
        } else if self.anonymous {
            scope = scope.principal(None);
        } else if !self.all {
            scope = scope.statuses([TaskStatus::Working, TaskStatus::InputRequired]);
        }
        if let Some(t) = &self.tool {
            scope = scope.tool(t);
        }
        scope
    }

    /// The tasks listed: the scope's, in the statuses picked; `None` when
    /// the statuses picked are outside the scope (nothing to list).
    fn listed(&self, scope: &TaskFilter) -> Option<TaskFilter> {
        if self.statuses.is_empty() {
            return Some(scope.clone());
        }
        let picked: Vec<TaskStatus> = self
            .statuses
            .iter()
            .copied()
            .filter(|s| scope.statuses.is_empty() || scope.statuses.contains(s))
            .collect();
        (!picked.is_empty()).then(|| scope.clone().statuses(picked))
    }

    /// This query with `status` set to `status` (or none), from the first
    /// page.
    fn with_status(&self, status: Option<TaskStatus>) -> String {
        let statuses: Vec<TaskStatus> = status.into_iter().collect();
        self.link(&statuses, None)
    }

    /// This query from `from`.
    fn with_page(&self, from: &PageFrom) -> String {
        self.link(&self.statuses, Some(from))
    }

    fn link(&self, statuses: &[TaskStatus], from: Option<&PageFrom>) -> String {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        for s in statuses {
            q.append_pair("status", s.as_str());
        }
        if let Some(t) = &self.tool {
            q.append_pair("tool", t);
        }
        if let Some(p) = &self.principal {
            q.append_pair("principal", p);
        }
        if self.anonymous {
            q.append_pair("anonymous", "1");
        }
        if self.all {
            q.append_pair("all", "1");
        }
        match from {
            Some(PageFrom::After(c)) => q.append_pair("after", &cursor_text(c)),
            Some(PageFrom::Before(c)) => q.append_pair("before", &cursor_text(c)),
            None => &mut q,
        };
        format!("/?{}", q.finish())
    }
}

/// A cursor in a link: `CREATED_AT_MS:ID`.
fn cursor_text(c: &ListCursor) -> String {
    format!("{}:{}", c.created_at_ms, c.id)
}

fn parse_cursor(text: &str) -> Result<ListCursor, String> {
    let (ms, id) = text
        .split_once(':')
        .ok_or_else(|| format!("bad page cursor `{text}`"))?;
    let created_at_ms = ms
        .parse()
        .map_err(|_| format!("bad page cursor `{text}`"))?;
    Ok(ListCursor {
        created_at_ms,
        id: id.to_owned(),
    })
}

fn cursor_of(t: &TaskSummary) -> ListCursor {
    ListCursor {
        created_at_ms: t.created_at_ms,
        id: t.id.clone(),
    }
}

/// One page of tasks, and whether there are more on either side.
struct Page {
    tasks: Vec<TaskSummary>,
    newer: bool,
    older: bool,
}

/// Reads the page `from` of `filter`: one query, of one task more than a
/// page to tell whether another page follows.
async fn read_page(
    engine: &Engine,
    filter: &TaskFilter,
    from: Option<&PageFrom>,
    size: usize,
) -> crate::Result<Page> {
    let mut tasks = engine.store().summaries(filter, from, size + 1).await?;
    let more = tasks.len() > size;
    Ok(match from {
        Some(PageFrom::Before(_)) => {
            if more {
                tasks.remove(0);
            }
            Page {
                tasks,
                older: more,
                newer: true,
            }
        }
        _ => {
            tasks.truncate(size);
            Page {
                tasks,
                older: from.is_some(),
                newer: more,
            }
        }
    })
}

pub(super) async fn list_page(
    State(Admin { engine, page_size }): State<Admin>,
    RawQuery(query): RawQuery,
) -> Response {
    let filters = match Filters::parse(query.as_deref()) {
        Ok(f) => f,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                page("Bad filter", html! { p.error { (e) } }),
            )
                .into_response();
        }
    };
    let scope = filters.scope();
    let listed = filters.listed(&scope);
    let read = async {
        let counts = engine.store().count_tasks(&scope).await?;
        let page = match &listed {
            Some(filter) => read_page(&engine, filter, filters.from.as_ref(), page_size).await?,
            None => Page {
                tasks: Vec::new(),
                newer: false,
                older: false,
            },
        };
        Ok::<_, crate::Error>((counts, page))
    };
    let (counts, page_of_tasks) = match read.await {
        Ok(read) => read,
        Err(e) => {
            tracing::warn!(error = %crate::id::Redacted(&e), "admin page: the store could not be read");
            let body = html! { p.error { "The store could not be read; see the server's log." } };
            return (StatusCode::SERVICE_UNAVAILABLE, page("Tasks", body)).into_response();
        }
    };
    let matching: usize = match &listed {
        Some(filter) if !filter.statuses.is_empty() => {
            filter.statuses.iter().map(|s| counts.of(*s)).sum()
        }
        Some(_) => counts.total(),
        None => 0,
    };
    let Page {
        tasks,
        newer,
        older,
    } = page_of_tasks;
    let now = crate::clock::now_ms();
    let scope_text = match (&filters.principal, filters.anonymous) {
        (Some(p), _) => format!("every task of `{p}`"),
        (None, true) => "every task created without a caller".to_owned(),
        (None, false) if filters.all => "every task of every caller".to_owned(),
        (None, false) => "unfinished tasks of every caller".to_owned(),
    };
    let body = html! {
        p.scope { "Showing " (scope_text) "." }
        nav.counts {
            a.chip.all.on[filters.statuses.is_empty()] href=(filters.with_status(None)) {
                "all " span.n { (counts.total()) }
            }
            @for status in TaskStatus::ALL {
                a class=(chip_class(status, filters.statuses.contains(&status)))
                    href=(filters.with_status(Some(status)))
                    data-status=(status.as_str()) {
                    (status.as_str()) " " span.n { (counts.of(status)) }
                }
            }
        }
        form.filters method="get" action="/" {
            label { "tool " input type="text" name="tool" value=[filters.tool.as_deref()]; }
            label { "principal " input type="text" name="principal" value=[filters.principal.as_deref()]; }
            label { input type="checkbox" name="anonymous" value="1" checked[filters.anonymous]; " no principal" }
            label { input type="checkbox" name="all" value="1" checked[filters.all]; " finished too" }
            @for s in &filters.statuses { input type="hidden" name="status" value=(s.as_str()); }
            button type="submit" { "Filter" }
        }
        @if tasks.is_empty() {
            p.empty { "No task matches." }
        } @else {
            table #tasks {
                thead { tr { th { "Task" } th { "Tool" } th { "Status" } th { "Age" } th { "Principal" } th { "Message" } } }
                tbody {
                    @for t in &tasks {
                        tr data-status=(t.status.as_str()) {
                            td.id { a href=(format!("/tasks/{}", t.id)) { (t.id) } }
                            td { (t.tool) }
                            td { (status_badge(t)) }
                            td.num { (age(now - t.created_at_ms)) }
                            td { (t.principal.as_deref().unwrap_or("—")) }
                            td.msg { (truncate(t.status_message.as_deref().unwrap_or(""), 80)) }
                        }
                    }
                }
            }
        }
        nav.pages {
            span.more { (tasks.len()) " shown of " (matching) ", oldest first." }
            @if let (true, Some(first)) = (older, tasks.first()) {
                a #previous rel="prev" href=(filters.with_page(&PageFrom::Before(cursor_of(first)))) { "← Previous" }
            }
            @if let (true, Some(last)) = (newer, tasks.last()) {
                a #next rel="next" href=(filters.with_page(&PageFrom::After(cursor_of(last)))) { "Next →" }
            }
        }
    };
    page("Tasks", body).into_response()
}

/// A status chip's classes: its status, and `on` when it filters the list.
fn chip_class(status: TaskStatus, on: bool) -> String {
    let mut class = format!("chip {}", status.as_str());
    if on {
        class.push_str(" on");
    }
    class
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_read_the_query_and_refuse_unknown_statuses() {
        let f =
            Filters::parse(Some("status=working&status=failed&tool=x&principal=a%20b")).unwrap();
        assert_eq!(f.statuses, vec![TaskStatus::Working, TaskStatus::Failed]);
        assert_eq!(f.tool.as_deref(), Some("x"));
        assert_eq!(f.principal.as_deref(), Some("a b"));
        assert_eq!(f.with_status(None), "/?tool=x&principal=a+b");
        let e = Filters::parse(Some("status=done")).unwrap_err();
        assert!(e.contains("`done`"), "{e}");
    }
}
