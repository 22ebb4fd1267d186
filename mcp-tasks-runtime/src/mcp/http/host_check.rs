//! The MCP endpoint's `Host` and `Origin` checks, for the admin address.

use std::sync::Arc;

use axum::{
    body::Body,
    extract::Request,
    http::{Method, StatusCode},
    response::{IntoResponse as _, Response},
};
use rmcp::{
    ServerHandler,
    transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService},
};

/// The MCP endpoint's `Host` and `Origin` checks (rmcp's, against DNS
/// rebinding: the same lists, matched the same way), for another address
/// of the program: the admin address asks it before serving anything.
///
/// rmcp checks both before it looks at a request's method, so the check
/// hands it the request's head as an `OPTIONS` request: a request that
/// passes comes back `405 Method Not Allowed`; one that fails, with rmcp's
/// `403 Forbidden` and its message, which is answered as is.
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
        Self(Arc::new(service))
    }

    /// `None` when a request with this head may be served; otherwise the
    /// answer to give it (`403`, naming the header refused).
    pub(crate) async fn refusal(&self, head: &axum::http::request::Parts) -> Option<Response> {
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
