//! The MCP endpoint's `Host` and `Origin` checks, for the admin address
//! and the `tasks/get` answered at the front door; and the refusal of a
//! request with more than one `Host`, for both addresses.

use std::sync::{Arc, Mutex};

use axum::{
    body::Body,
    extract::Request,
    http::{HeaderMap, HeaderValue, Method, StatusCode, header::HOST, header::ORIGIN},
    middleware::Next,
    response::{IntoResponse as _, Response},
};
use rmcp::{
    ServerHandler,
    transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService},
};

/// The `400 Bad Request` for a request with more than one `Host` header,
/// or `None` for one with at most one. The checks read one `Host` and a
/// proxy or a logger may read another, so such a request is served by no
/// address of the program.
pub(crate) fn duplicate_host(headers: &HeaderMap) -> Option<Response> {
    let hosts = headers.get_all(HOST).iter().count();
    (hosts > 1).then(|| {
        (
            StatusCode::BAD_REQUEST,
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; charset=utf-8",
            )],
            format!("Bad Request: duplicate Host header ({hosts} Host headers; send one)\n"),
        )
            .into_response()
    })
}

/// Middleware for the MCP endpoint: [`duplicate_host`] before anything
/// else reads the request.
pub(crate) async fn one_host(req: Request, next: Next) -> Response {
    match duplicate_host(req.headers()) {
        Some(refusal) => refusal,
        None => next.run(req).await,
    }
}

/// The MCP endpoint's `Host` and `Origin` checks (rmcp's, against DNS
/// rebinding: the same lists, matched the same way), for another address
/// of the program: the admin address asks it before serving anything.
///
/// rmcp checks both before it looks at a request's method, so the check
/// hands it the request's head as an `OPTIONS` request: a request that
/// passes comes back `405 Method Not Allowed`; one that fails, with rmcp's
/// `403 Forbidden` and its message, which is answered as is. The answer
/// depends on the two headers alone, so the pairs that passed are kept
/// (a few) and not asked again.
#[derive(Clone)]
pub(crate) struct HostCheck(
    Arc<
        StreamableHttpService<
            HostCheckOnly,
            rmcp::transport::streamable_http_server::session::never::NeverSessionManager,
        >,
    >,
    Arc<Passed>,
);

/// The `Host` and `Origin` pairs [`HostCheck`] found to pass.
type Passed = Mutex<Vec<(HeaderValue, Option<HeaderValue>)>>;

/// How many `Host` and `Origin` pairs [`HostCheck`] keeps as passed.
const PASSED: usize = 16;

/// The handler behind [`HostCheck`]'s service: never called, since no
/// request it is given gets past the checks to a method.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HostCheckOnly;

impl ServerHandler for HostCheckOnly {}

impl std::fmt::Debug for HostCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCheck").finish_non_exhaustive()
    }
}

impl HostCheck {
    /// Accepts the `Host` values and `Origin`s listed, as
    /// [`HttpOptions::allowed_hosts`] and [`HttpOptions::allowed_origins`] do.
    pub(crate) fn new(hosts: &[String], origins: &[String]) -> Self {
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_allowed_hosts(hosts.to_vec())
            .with_allowed_origins(origins.to_vec())
            .enforce_origin_validation();
        let service =
            StreamableHttpService::new(|| Ok(HostCheckOnly), Arc::new(Default::default()), config);
        Self(Arc::new(service), Arc::default())
    }

    /// Whether a request with this head passes: one `Host`, and rmcp's
    /// checks of it and of its `Origin`.
    pub(crate) async fn passes(&self, head: &axum::http::request::Parts) -> bool {
        let headers = &head.headers;
        let (host, origin) = (headers.get(HOST), headers.get(ORIGIN));
        let one = |name| headers.get_all(name).iter().count();
        let kept = one(HOST) == 1 && one(ORIGIN) <= 1;
        let cache = || {
            self.1
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        let known = |c: &[(HeaderValue, Option<HeaderValue>)]| {
            c.iter()
                .any(|(h, o)| Some(h) == host && o.as_ref() == origin)
        };
        if kept && known(&cache()) {
            return true;
        }
        if self.refusal(head).await.is_some() {
            return false;
        }
        let mut cache = cache();
        if let (true, Some(host)) = (kept && cache.len() < PASSED && !known(&cache), host) {
            cache.push((host.clone(), origin.cloned()));
        }
        true
    }

    /// `None` when a request with this head may be served; otherwise the
    /// answer to give it (`403`, naming the header refused; `400` for more
    /// than one `Host`).
    pub(crate) async fn refusal(&self, head: &axum::http::request::Parts) -> Option<Response> {
        if let Some(refusal) = duplicate_host(&head.headers) {
            return Some(refusal);
        }
        let mut probe = Request::builder()
            .method(Method::OPTIONS)
            .uri(head.uri.clone());
        for name in [axum::http::header::HOST, axum::http::header::ORIGIN] {
            for value in head.headers.get_all(&name) {
                probe = probe.header(&name, value);
            }
        }
        let Ok(probe) = probe.body(http_body_util::Empty::<axum::body::Bytes>::new()) else {
            return Some((StatusCode::BAD_REQUEST, "Bad Request: unreadable head").into_response());
        };
        let answer = self.0.handle(probe).await;
        if answer.status() == StatusCode::METHOD_NOT_ALLOWED {
            return None;
        }
        Some(answer.map(Body::new))
    }
}
