//! The operator's address: `/metrics` (Prometheus text, with the `metrics`
//! feature) and a read-only web page of the tasks in the engine's store.
//!
//! Off unless the program serves it, and meant for loopback
//! (`127.0.0.1:9090`, say): **the page shows task ids, which are bearer
//! secrets where no principal is configured, and principals**. Never expose
//! it beyond the operators' own host; put it behind an authenticating proxy
//! if it must be reached from elsewhere. [`serve`] and [`serve_on`] refuse
//! an address off loopback (`0.0.0.0` included) unless a token is set
//! ([`AdminOptions::bearer_token`]) or the program allows it
//! ([`AdminOptions::allow_remote_without_token`], for an address only an
//! authenticating proxy reaches); [`AdminOptions::check_address`] is that
//! check, for a program that binds the address itself.
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
//! - A request with more than one `Host` header gets `400 Bad Request`.
//!
//! Every answer carries `X-Content-Type-Options: nosniff`,
//! `Content-Security-Policy: frame-ancestors 'none'`, `X-Frame-Options:
//! DENY` (no other site can frame the pages) and `Referrer-Policy:
//! no-referrer` (their URLs carry task ids).
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
//!   page. It holds arguments, answers and step values in clear;
//!   `?redact=1` gives its
//!   [`redacted`](crate::replay::JournalExport::redacted) form, to share or
//!   commit as a test fixture.
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

mod html;
mod list;
mod task;

use std::{net::SocketAddr, sync::Arc};

use axum::{
    Router,
    extract::{Request, State},
    http::{HeaderValue, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
};

use crate::Engine;
#[cfg(feature = "metrics")]
use crate::store::{TaskFilter, TaskStatus};

use self::{
    list::list_page,
    task::{journal_json, task_page},
};

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
    /// Serve an address off loopback without a token (default `false`:
    /// [`serve`] and [`serve_on`] refuse to). For an address that only an
    /// authenticating proxy can reach.
    pub allow_remote_without_token: bool,
}

impl Default for AdminOptions {
    fn default() -> Self {
        let http = crate::mcp::HttpOptions::default();
        Self {
            allowed_hosts: http.allowed_hosts,
            allowed_origins: http.allowed_origins,
            bearer_token: None,
            page_size: 50,
            allow_remote_without_token: false,
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
            .field(
                "allow_remote_without_token",
                &self.allow_remote_without_token,
            )
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

    /// Sets [`AdminOptions::allow_remote_without_token`]: whether an
    /// address off loopback may be served without a token.
    #[must_use]
    pub fn allow_remote_without_token(mut self, allow: bool) -> Self {
        self.allow_remote_without_token = allow;
        self
    }

    /// Whether these options may serve on `addr`: a loopback address
    /// always; another one (`0.0.0.0` and `[::]` included) only with a
    /// token, or when [`AdminOptions::allow_remote_without_token`] says so.
    /// [`serve`] and [`serve_on`] ask it first; a program that binds the
    /// address itself asks it before binding.
    ///
    /// ```
    /// use mcp_tasks_runtime::admin::AdminOptions;
    ///
    /// let open = AdminOptions::default();
    /// assert!(open.check_address("127.0.0.1:9090".parse().unwrap()).is_ok());
    /// let refused = open.check_address("0.0.0.0:9090".parse().unwrap()).unwrap_err();
    /// assert!(refused.to_string().contains("allow_remote_without_token"));
    /// let with_token = AdminOptions::default().bearer_token("s3cret");
    /// assert!(with_token.check_address("0.0.0.0:9090".parse().unwrap()).is_ok());
    /// ```
    ///
    /// # Errors
    ///
    /// An [`InvalidInput`](std::io::ErrorKind::InvalidInput) error, whose
    /// message names the address and the options that allow it.
    pub fn check_address(&self, addr: SocketAddr) -> std::io::Result<()> {
        if addr.ip().to_canonical().is_loopback()
            || self.bearer_token.is_some()
            || self.allow_remote_without_token
        {
            return Ok(());
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "the admin address {addr} is not a loopback address and has no token: \
                 whoever reaches it would read task ids and principals. Set a token \
                 (AdminOptions::bearer_token; the examples' --admin-token or \
                 MCP_TASKS_ADMIN_TOKEN), serve it on 127.0.0.1, or allow it \
                 (AdminOptions::allow_remote_without_token; the examples' \
                 --admin-allow-remote-without-token) when only an authenticating proxy \
                 reaches it"
            ),
        ))
    }
}

/// Serves the admin address on `addr` with the default [`AdminOptions`]
/// until the process ends (see the [module](self)). With the `metrics`
/// feature it installs the Prometheus recorder first, so that what the
/// engine counts from then on is served.
///
/// # Errors
///
/// When `addr` is not a loopback address (the default options have no
/// token: see [`AdminOptions::check_address`]; nothing is bound), or
/// cannot be bound.
pub async fn serve(addr: SocketAddr, engine: Engine) -> std::io::Result<()> {
    let options = AdminOptions::default();
    options.check_address(addr)?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    serve_on(listener, engine, options).await
}

/// [`serve`] on a listener the program bound itself (to learn its port,
/// say), with `options`.
///
/// # Errors
///
/// When the listener's address is refused by
/// [`AdminOptions::check_address`] (then nothing is served), or accepting
/// connections fails.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    engine: Engine,
    options: AdminOptions,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    options.check_address(addr)?;
    if !addr.ip().to_canonical().is_loopback() && options.bearer_token.is_none() {
        tracing::warn!(
            %addr,
            "the admin address is served off loopback without a token \
             (allow_remote_without_token): whoever reaches it reads task ids and principals"
        );
    }
    axum::serve(listener, router(engine, options)).await
}

/// The admin address's routes, behind the checks of `options`, to mount in
/// a program's own axum server. The program chooses the address then:
/// [`AdminOptions::check_address`] is not asked, so ask it.
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
    /// The answer to `req`, with [`harden`]ed headers.
    async fn check(self, req: Request, next: Next) -> Response {
        let mut response = self.answer(req, next).await;
        harden(response.headers_mut());
        response
    }

    async fn answer(self, req: Request, next: Next) -> Response {
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

/// The headers every answer of the admin address carries: its pages are
/// not to be sniffed as another type, framed by another site (clickjacking)
/// or named in a `Referer` (their URLs carry task ids).
fn harden(headers: &mut axum::http::HeaderMap) {
    for (name, value) in [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CONTENT_SECURITY_POLICY, "frame-ancestors 'none'"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Off loopback, a token or an explicit allowance; on loopback, nothing.
    #[test]
    fn an_address_off_loopback_needs_a_token_or_an_allowance() {
        let open = AdminOptions::default();
        for addr in [
            "127.0.0.1:9090",
            "127.0.0.2:1",
            "[::1]:9090",
            "[::ffff:127.0.0.1]:9",
        ] {
            assert!(open.check_address(addr.parse().unwrap()).is_ok(), "{addr}");
        }
        for addr in [
            "0.0.0.0:9090",
            "[::]:9090",
            "192.0.2.1:9090",
            "[::ffff:10.0.0.1]:9",
        ] {
            let addr: SocketAddr = addr.parse().unwrap();
            let refused = open.check_address(addr).unwrap_err();
            assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
            let message = refused.to_string();
            assert!(
                message.contains(&addr.to_string())
                    && message.contains("bearer_token")
                    && message.contains("allow_remote_without_token")
                    && message.contains("--admin-allow-remote-without-token"),
                "{message}"
            );
            let allowed = AdminOptions::default().allow_remote_without_token(true);
            assert!(allowed.check_address(addr).is_ok());
            let with_token = AdminOptions::default().bearer_token("t0ken");
            assert!(with_token.check_address(addr).is_ok());
            // An empty token is no token.
            let empty = AdminOptions::default().bearer_token("");
            assert!(empty.check_address(addr).is_err());
        }
    }
}
