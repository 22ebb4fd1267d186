//! The MCP endpoint's `Host` and `Origin` checks, for the admin address;
//! and the refusal of a request with more than one `Host`, for both.

#[cfg(feature = "admin")]
use std::sync::Arc;

#[cfg(feature = "admin")]
use axum::{body::Body, http::Method};
use axum::{
    extract::Request,
    http::{HeaderMap, StatusCode, header::HOST},
    middleware::Next,
    response::{IntoResponse as _, Response},
};
#[cfg(feature = "admin")]
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
/// `403 Forbidden` and its message, which is answered as is.
#[cfg(feature = "admin")]
#[derive(Clone)]
pub(crate) struct HostCheck(
    Arc<
        StreamableHttpService<
            HostCheckOnly,
            rmcp::transport::streamable_http_server::session::never::NeverSessionManager,
        >,
    >,
);

/// The handler behind [`HostCheck`]'s service: never called, since no
/// request it is given gets past the checks to a method.
#[cfg(feature = "admin")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct HostCheckOnly;

#[cfg(feature = "admin")]
impl ServerHandler for HostCheckOnly {}

#[cfg(feature = "admin")]
impl std::fmt::Debug for HostCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCheck").finish_non_exhaustive()
    }
}

#[cfg(feature = "admin")]
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
        Self(Arc::new(service))
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
