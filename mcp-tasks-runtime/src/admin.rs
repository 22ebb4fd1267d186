//! The operator's address: `/metrics` (Prometheus text, with the `metrics`
//! feature) and a read-only web page of the tasks in the engine's store.
//!
//! Off unless the program serves it, and meant for loopback
//! (`127.0.0.1:9090`, say): **the page shows task ids, which are bearer
//! secrets where no principal is configured, and principals**. Never expose
//! it beyond the operators' own host; put it behind an authenticating proxy
//! if it must be reached from elsewhere.
//!
//! Every request, `/metrics` included, passes the checks of
//! [`AdminOptions`] first:
//!
//! - `Host` and `Origin`, as the MCP endpoint checks them (loopback names
//!   by default, against DNS rebinding: a web page whose name was rebound
//!   to `127.0.0.1` cannot read the page): another value gets
//!   `403 Forbidden`, before anything is read from the store.
//! - With [`AdminOptions::bearer_token`] set, the token: as
//!   `Authorization: Bearer TOKEN` (scrapers, scripts), or as the password
//!   of `Authorization: Basic` (any user name; a browser asks for it). A
//!   request without it, or with another one, gets `401 Unauthorized`
//!   with a generic body.
//!
//! - `/` lists tasks with counts per status: the unfinished tasks of every
//!   caller by default; `?all=1` lists every task, finished ones too;
//!   `?principal=NAME` (or `?anonymous=1`) lists every task of one caller.
//!   `?status=…` (repeatable) and `?tool=…` filter, as the `tasks` CLI
//!   does. The list is paged ([`AdminOptions::page_size`] tasks, oldest
//!   first) with "previous" and "next" links that carry a cursor (the
//!   creation time and id of the page's edge task, `?after=` or
//!   `?before=`), so that a page is one store query
//!   ([`Store::summaries`](crate::store::Store::summaries), which reads no
//!   arguments or results) and the counts one grouped `count(*)`
//!   ([`Store::count_tasks`](crate::store::Store::count_tasks)).
//! - `/tasks/{id}` shows one task: its state, outstanding questions and
//!   journal as a timeline (positions, kinds, names, values truncated).
//! - `/tasks/{id}/journal.json`: the task's journal as JSON, a
//!   [`JournalExport`](crate::replay::JournalExport) (what `tasks journal
//!   ID` prints, and what the testing kit replays); linked from the task's
//!   page.
//! - `/metrics`: the engine's series (the `metrics` module lists them;
//!   built with the `metrics` feature); `404` without it. Its store gauges
//!   come from one grouped count per scrape, not from the tasks' rows.
//!
//! The pages refresh themselves every 10 seconds (a page of the list
//! reloads its cursor's page, not the first); they are plain
//! server-rendered HTML with inline CSS.
//!
//! ```no_run
//! # async fn run(engine: mcp_tasks_runtime::Engine) -> std::io::Result<()> {
//! // Beside the MCP server, on its own loopback port.
//! let addr: std::net::SocketAddr = "127.0.0.1:9090".parse().unwrap();
//! tokio::spawn(mcp_tasks_runtime::admin::serve(addr, engine));
//! # Ok(())
//! # }
//! ```
//!
//! With a token, from the environment:
//!
//! ```no_run
//! # async fn run(engine: mcp_tasks_runtime::Engine) -> std::io::Result<()> {
//! use mcp_tasks_runtime::admin::{self, AdminOptions};
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9090").await?;
//! let mut options = AdminOptions::default();
//! if let Ok(token) = std::env::var("ADMIN_TOKEN") {
//!     options = options.bearer_token(token);
//! }
//! tokio::spawn(admin::serve_on(listener, engine, options));
//! # Ok(())
//! # }
//! ```

use std::{
    fmt::Write as _,
    net::SocketAddr,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use axum::{
    Router,
    extract::{Path, RawQuery, Request, State},
    http::{HeaderValue, StatusCode, header},
    middleware::{self, Next},
    response::{Html, IntoResponse, Response},
    routing::get,
};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use serde_json::Value;

use crate::{
    Engine,
    question::InputRequest,
    store::{JournalEntry, ListCursor, PageFrom, TaskFilter, TaskRecord, TaskStatus, TaskSummary},
};

/// How often the pages reload themselves: each reload of the list costs a
/// grouped count and a page's query.
const REFRESH_SECS: u32 = 10;

/// Who may read the admin address, and how much a page shows.
///
/// ```
/// use mcp_tasks_runtime::admin::AdminOptions;
///
/// let options = AdminOptions::default()
///     .bearer_token("s3cret-from-the-environment")
///     .allowed_hosts(["localhost", "127.0.0.1", "ops.internal"]);
/// assert_eq!(options.page_size, 50);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct AdminOptions {
    /// Accepted `Host` values (default: loopback names only, as
    /// [`HttpOptions::allowed_hosts`](crate::mcp::HttpOptions::allowed_hosts)).
    /// A request naming another host gets `403 Forbidden`.
    pub allowed_hosts: Vec<String>,
    /// Accepted browser `Origin`s (default: loopback origins on any port,
    /// as [`HttpOptions::allowed_origins`](crate::mcp::HttpOptions::allowed_origins));
    /// a request with another `Origin` gets `403 Forbidden`.
    pub allowed_origins: Vec<String>,
    /// The token every request must carry (default none: the address is
    /// open to whoever reaches it). Compared in constant time.
    pub bearer_token: Option<String>,
    /// How many tasks the list shows on a page (default 50, at least 1).
    pub page_size: usize,
}

impl Default for AdminOptions {
    fn default() -> Self {
        let http = crate::mcp::HttpOptions::default();
        Self {
            allowed_hosts: http.allowed_hosts,
            allowed_origins: http.allowed_origins,
            bearer_token: None,
            page_size: 50,
        }
    }
}

impl std::fmt::Debug for AdminOptions {
    /// Everything but the token's value.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminOptions")
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .field("bearer_token", &self.bearer_token.as_ref().map(|_| "…"))
            .field("page_size", &self.page_size)
            .finish()
    }
}

impl AdminOptions {
    /// Replaces the accepted `Host` values.
    #[must_use]
    pub fn allowed_hosts(mut self, hosts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.allowed_hosts = hosts.into_iter().map(Into::into).collect();
        self
    }

    /// Replaces the accepted `Origin`s.
    #[must_use]
    pub fn allowed_origins(mut self, origins: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.allowed_origins = origins.into_iter().map(Into::into).collect();
        self
    }

    /// Requires `token` on every request (an empty token requires none).
    #[must_use]
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        let token = token.into();
        self.bearer_token = (!token.is_empty()).then_some(token);
        self
    }

    /// Sets [`AdminOptions::page_size`] (at least 1).
    #[must_use]
    pub fn page_size(mut self, n: usize) -> Self {
        self.page_size = n.max(1);
        self
    }
}

/// Serves the admin address on `addr` with the default [`AdminOptions`]
/// until the process ends (see the [module](self)). With the `metrics`
/// feature it installs the Prometheus recorder first, so that what the
/// engine counts from then on is served.
///
/// # Errors
///
/// When `addr` cannot be bound.
pub async fn serve(addr: SocketAddr, engine: Engine) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    serve_on(listener, engine, AdminOptions::default()).await
}

/// [`serve`] on a listener the program bound itself (to learn its port,
/// say), with `options`.
///
/// # Errors
///
/// When accepting connections fails.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    engine: Engine,
    options: AdminOptions,
) -> std::io::Result<()> {
    axum::serve(listener, router(engine, options)).await
}

/// The admin address's routes, behind the checks of `options`, to mount in
/// a program's own axum server.
pub fn router(engine: Engine, options: AdminOptions) -> Router {
    #[cfg(feature = "metrics")]
    crate::metrics::install();
    let gate = Gate {
        hosts: crate::mcp::HostCheck::new(&options.allowed_hosts, &options.allowed_origins),
        token: options.bearer_token.map(Arc::from),
    };
    Router::new()
        .route("/", get(list_page))
        .route("/tasks/{id}", get(task_page))
        .route("/tasks/{id}/journal.json", get(journal_json))
        .route("/metrics", get(metrics))
        .with_state(Admin {
            engine,
            page_size: options.page_size.max(1),
        })
        .layer(middleware::from_fn(move |req, next| {
            gate.clone().check(req, next)
        }))
}

/// What the handlers share.
#[derive(Debug, Clone)]
struct Admin {
    engine: Engine,
    page_size: usize,
}

/// The checks before any route: `Host` and `Origin`, then the token.
#[derive(Debug, Clone)]
struct Gate {
    hosts: crate::mcp::HostCheck,
    token: Option<Arc<str>>,
}

impl Gate {
    async fn check(self, req: Request, next: Next) -> Response {
        let (head, body) = req.into_parts();
        if let Some(refusal) = self.hosts.refusal(&head).await {
            return refusal;
        }
        if let Some(token) = &self.token
            && !presented(&head.headers).is_some_and(|p| same_secret(&p, token))
        {
            return unauthorized();
        }
        next.run(Request::from_parts(head, body)).await
    }
}

/// The token a request presents: a bearer token, or the password of
/// Basic credentials.
fn presented(headers: &axum::http::HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, rest) = value.split_once(' ')?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some(rest.to_owned());
    }
    if scheme.eq_ignore_ascii_case("basic") {
        use base64::Engine as _;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()?;
        let decoded = String::from_utf8(decoded).ok()?;
        return decoded
            .split_once(':')
            .map(|(_, password)| password.to_owned());
    }
    None
}

/// Whether `presented` is `token`, in time that depends on their lengths
/// only, not on where they differ.
fn same_secret(presented: &str, token: &str) -> bool {
    use subtle::ConstantTimeEq as _;
    presented.as_bytes().ct_eq(token.as_bytes()).into()
}

/// The `401` for a request without the token, or with another: the same
/// body either way, and the challenges a script and a browser understand.
fn unauthorized() -> Response {
    let mut response = (
        StatusCode::UNAUTHORIZED,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "Unauthorized\n",
    )
        .into_response();
    for challenge in [
        "Bearer realm=\"mcp-tasks admin\"",
        "Basic realm=\"mcp-tasks admin\", charset=\"UTF-8\"",
    ] {
        response.headers_mut().append(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(challenge),
        );
    }
    response
}

async fn metrics(State(Admin { engine, .. }): State<Admin>) -> Response {
    #[cfg(feature = "metrics")]
    {
        // One grouped count, not the rows.
        let open = TaskFilter::default().statuses([TaskStatus::Working, TaskStatus::InputRequired]);
        if let Ok(counts) = engine.store().count_tasks(&open).await {
            crate::metrics::parked_and_sleeping(
                counts.of(TaskStatus::InputRequired),
                counts.asleep,
            );
        }
        match crate::metrics::render() {
            Some(text) => (
                [(
                    header::CONTENT_TYPE,
                    "text/plain; version=0.0.4; charset=utf-8",
                )],
                text,
            )
                .into_response(),
            None => (
                StatusCode::SERVICE_UNAVAILABLE,
                "another metrics recorder was installed in this process first\n",
            )
                .into_response(),
        }
    }
    #[cfg(not(feature = "metrics"))]
    {
        let _ = engine;
        (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "this server was built without the `metrics` feature of mcp-tasks-runtime\n",
        )
            .into_response()
    }
}

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

async fn list_page(
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
    let now = now_ms();
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

async fn task_page(State(Admin { engine, .. }): State<Admin>, Path(id): Path<String>) -> Response {
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

/// `/tasks/{id}/journal.json`: the task's [`JournalExport`](crate::replay::JournalExport).
async fn journal_json(
    State(Admin { engine, .. }): State<Admin>,
    Path(id): Path<String>,
) -> Response {
    let json = [(header::CONTENT_TYPE, "application/json")];
    match crate::replay::JournalExport::read(&**engine.store(), &id).await {
        Ok(Some(export)) => match serde_json::to_string_pretty(&export) {
            Ok(body) => (json, body).into_response(),
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        },
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
    let now = now_ms();
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
                    @for p in &task.pending {
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
        p { a #export href=(format!("/tasks/{}/journal.json", task.id)) { "Export as JSON" } }
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

/// A status chip's classes: its status, and `on` when it filters the list.
fn chip_class(status: TaskStatus, on: bool) -> String {
    let mut class = format!("chip {}", status.as_str());
    if on {
        class.push_str(" on");
    }
    class
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

fn status_badge(task: &TaskSummary) -> Markup {
    html! {
        span class=(format!("badge {}", task.status.as_str())) { (task.status.as_str()) }
        @if task.cancel_requested && !task.status.is_terminal() { " " span.badge.cancelling { "cancel requested" } }
        @if task.is_asleep() { " " span.badge.sleeping { "asleep" } }
    }
}

fn page(title: &str, body: Markup) -> Html<String> {
    Html(
        html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta http-equiv="refresh" content=(REFRESH_SECS);
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    title { (title) " · mcp-tasks" }
                    style { (PreEscaped(CSS)) }
                }
                body {
                    header { h1 { a href="/" { "mcp-tasks" } " " span.sub { (title) } } span.note { "read-only operator view · refreshes every " (REFRESH_SECS) " s" } }
                    main { (body) }
                }
            }
        }
        .into_string(),
    )
}

const CSS: &str = "
:root{--fg:#1f2933;--muted:#6b7785;--line:#e4e7eb;--bg:#f7f8fa;--card:#fff;
--working:#2563eb;--input_required:#d97706;--completed:#059669;--failed:#dc2626;--cancelled:#6b7280}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:var(--fg);background:var(--bg)}
header{display:flex;justify-content:space-between;align-items:baseline;padding:14px 24px;background:var(--card);border-bottom:1px solid var(--line)}
h1{margin:0;font-size:18px}h1 a{color:inherit;text-decoration:none}.sub{color:var(--muted);font-weight:400}
.note{color:var(--muted);font-size:12px}
main{padding:20px 24px;max-width:1200px}
h2{font-size:15px;margin:24px 0 8px}
a{color:var(--working)}
.scope{color:var(--muted);margin:0 0 12px}
.counts{display:flex;gap:8px;flex-wrap:wrap;margin-bottom:12px}
.chip{padding:4px 10px;border:1px solid var(--line);border-radius:999px;background:var(--card);color:var(--fg);text-decoration:none}
.chip.on{border-color:var(--fg)}.chip .n{font-weight:600}
.chip.working .n{color:var(--working)}.chip.input_required .n{color:var(--input_required)}
.chip.completed .n{color:var(--completed)}.chip.failed .n{color:var(--failed)}.chip.cancelled .n{color:var(--cancelled)}
.filters{display:flex;gap:12px;align-items:center;margin-bottom:16px;color:var(--muted)}
.filters input[type=text]{padding:4px 6px;border:1px solid var(--line);border-radius:4px}
.filters button{padding:4px 12px;border:1px solid var(--line);border-radius:4px;background:var(--card);cursor:pointer}
table{border-collapse:collapse;width:100%;background:var(--card);border:1px solid var(--line);border-radius:6px}
th,td{text-align:left;padding:7px 10px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-size:12px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted);font-weight:600}
td.id,dd.id,code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12.5px}
td.num{font-variant-numeric:tabular-nums}td.msg{color:var(--muted)}
.badge{display:inline-block;padding:1px 8px;border-radius:4px;font-size:12px;color:#fff;background:var(--muted)}
.badge.working{background:var(--working)}.badge.input_required{background:var(--input_required)}
.badge.completed{background:var(--completed)}.badge.failed{background:var(--failed)}.badge.cancelled{background:var(--cancelled)}
.badge.sleeping{background:#7c3aed}.badge.cancelling{background:#9f1239}
dl.summary{display:grid;grid-template-columns:120px 1fr;gap:6px 16px;background:var(--card);border:1px solid var(--line);border-radius:6px;padding:14px 16px;margin:0}
dt{color:var(--muted)}dd{margin:0;word-break:break-all}
ol.timeline{list-style:none;margin:0;padding:0 0 0 14px;border-left:2px solid var(--line)}
ol.timeline li{position:relative;display:flex;gap:12px;align-items:baseline;padding:6px 0}
ol.timeline li::before{content:'';position:absolute;left:-20px;top:12px;width:10px;height:10px;border-radius:50%;background:var(--working)}
ol.timeline li[data-kind=input]::before{background:var(--input_required)}
.pos{color:var(--muted);min-width:2em;font-variant-numeric:tabular-nums}.kind{color:var(--muted);min-width:6em}.name{font-weight:600}
.value{color:var(--muted);word-break:break-all}
.error{color:var(--failed)}.empty,.more{color:var(--muted)}
.pages{display:flex;gap:16px;align-items:baseline;margin-top:12px}
";

fn truncate(s: &str, max: usize) -> String {
    let one_line = s.replace('\n', " ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        let mut cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// A span of milliseconds, roughly: `42s`, `3m`, `5h`, `2d`.
fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    let mut out = String::new();
    let _ = match s {
        0..60 => write!(out, "{s}s"),
        60..3600 => write!(out, "{}m", s / 60),
        3600..86_400 => write!(out, "{}h", s / 3600),
        _ => write!(out, "{}d", s / 86_400),
    };
    out
}

fn rfc3339(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(t).to_string()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
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
