//! Bearer-token authentication over HTTP: [`JwtAuth`] checks each request's
//! `Authorization: Bearer …` JWT against an issuer, an audience and a key
//! set (a JWKS file, or a JWKS URL whose keys are cached and refreshed), as
//! an OAuth 2.1 resource server does, and names the caller by the token's
//! `sub`.
//!
//! A request without a valid token gets `401 Unauthorized` with
//! `WWW-Authenticate: Bearer resource_metadata="…"` (and
//! `error="invalid_token"` when it had a token), and a body that does not
//! say what was wrong with the token: that goes to the log, at INFO, under
//! a reference the body gives. The challenge points to the
//! Protected Resource Metadata document (RFC 9728) served at
//! `/.well-known/oauth-protected-resource` (and at that path followed by the
//! endpoint's path), which names the authorization servers to get a token
//! from.

mod jwks;

use std::sync::Arc;

use axum::{
    extract::Request,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse as _, Response},
    routing::get,
};
use jsonwebtoken::{
    Algorithm, DecodingKey, Validation,
    jwk::{Jwk, JwkSet},
};
use serde_json::{Map, Value, json};

pub use self::jwks::Jwks;

/// Where the Protected Resource Metadata document is served (RFC 9728).
const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// A request's verified bearer token, in the request's extensions (rmcp
/// passes them on in the `http::request::Parts` of the request context), for
/// a [`TaskServerBuilder::principal`](super::TaskServerBuilder::principal)
/// function that names callers by another claim.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct VerifiedToken {
    /// The token's `sub`: the principal, unless a principal function says
    /// otherwise.
    pub subject: String,
    /// Every claim of the token.
    pub claims: Map<String, Value>,
}

/// Why a token was not accepted, or a key set could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The request carries no `Authorization: Bearer` token.
    #[error("no bearer token")]
    Missing,
    /// The token failed a check: signature, expiry, issuer, audience, a
    /// missing claim, or it is no JWT at all.
    #[error("invalid token: {0}")]
    Invalid(String),
    /// No key of the set matches the token's `kid` (or the token names none
    /// and the set has more than one key).
    #[error("invalid token: no key in the key set matches it (kid {0:?})")]
    UnknownKey(Option<String>),
    /// The key set could not be read, fetched or parsed.
    #[error("JWKS: {0}")]
    Keys(String),
}

/// Authenticates HTTP requests by their bearer token (a JWT): its signature
/// against a [`Jwks`], its `iss`, `aud` and `exp` (all required, with 60 s
/// of leeway for clock skew), its `nbf` when it has one, and a `sub`, which
/// becomes the request's principal. Give it to
/// [`TaskServerBuilder::auth`](super::TaskServerBuilder::auth).
///
/// ```
/// use mcp_tasks_runtime::mcp::{Jwks, JwtAuth};
///
/// # fn run() -> Result<(), mcp_tasks_runtime::mcp::AuthError> {
/// let auth = JwtAuth::new(
///     "https://login.example.com/",
///     "https://tasks.example.com/mcp",
///     Jwks::url("https://login.example.com/.well-known/jwks.json")?,
/// )
/// .resource("https://tasks.example.com/mcp");
/// # let _ = auth;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct JwtAuth {
    inner: Arc<AuthConfig>,
}

struct AuthConfig {
    issuer: String,
    audience: String,
    keys: Jwks,
    authorization_servers: Vec<String>,
    resource: Option<String>,
    scopes: Vec<String>,
}

impl std::fmt::Debug for JwtAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtAuth")
            .field("issuer", &self.inner.issuer)
            .field("audience", &self.inner.audience)
            .field("keys", &self.inner.keys)
            .finish_non_exhaustive()
    }
}

impl JwtAuth {
    /// Accepts tokens issued by `issuer` (the `iss` claim, compared
    /// exactly) for `audience` (one of the `aud` claim's values: this
    /// server's identifier, usually its endpoint URL), signed by a key of
    /// `keys`. The issuer is also the advertised authorization server
    /// unless [`JwtAuth::authorization_server`] names others.
    pub fn new(issuer: impl Into<String>, audience: impl Into<String>, keys: Jwks) -> Self {
        Self {
            inner: Arc::new(AuthConfig {
                issuer: issuer.into(),
                audience: audience.into(),
                keys,
                authorization_servers: Vec::new(),
                resource: None,
                scopes: Vec::new(),
            }),
        }
    }

    fn config(mut self, change: impl FnOnce(&mut AuthConfig)) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(config) => change(config),
            None => {
                let c = &*self.inner;
                let mut config = AuthConfig {
                    issuer: c.issuer.clone(),
                    audience: c.audience.clone(),
                    keys: c.keys.clone(),
                    authorization_servers: c.authorization_servers.clone(),
                    resource: c.resource.clone(),
                    scopes: c.scopes.clone(),
                };
                change(&mut config);
                self.inner = Arc::new(config);
            }
        }
        self
    }

    /// An authorization server clients get tokens from, listed in the
    /// Protected Resource Metadata (default: the issuer); may be given
    /// several times.
    #[must_use]
    pub fn authorization_server(self, url: impl Into<String>) -> Self {
        let url = url.into();
        self.config(|c| c.authorization_servers.push(url))
    }

    /// This server's resource identifier as clients know it (say
    /// `https://tasks.example.com/mcp`): the `resource` of the Protected
    /// Resource Metadata, and where the `resource_metadata` URL of a 401
    /// points. Default: `http://` followed by the request's `Host` and the
    /// endpoint path, which is right only when clients reach the server
    /// directly; set it when serving behind TLS or a proxy.
    #[must_use]
    pub fn resource(self, url: impl Into<String>) -> Self {
        let url = url.into();
        self.config(|c| c.resource = Some(url))
    }

    /// Scopes listed as `scopes_supported` in the Protected Resource
    /// Metadata (default none: the document leaves them out).
    #[must_use]
    pub fn scopes_supported(self, scopes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let scopes: Vec<String> = scopes.into_iter().map(Into::into).collect();
        self.config(|c| c.scopes = scopes)
    }

    /// Checks `token` (the text after `Bearer `).
    ///
    /// # Errors
    ///
    /// [`AuthError::Invalid`] or [`AuthError::UnknownKey`] for a token
    /// refused, [`AuthError::Keys`] when the key set cannot be fetched.
    pub async fn verify(&self, token: &str) -> Result<VerifiedToken, AuthError> {
        let config = &*self.inner;
        let head =
            jsonwebtoken::decode_header(token).map_err(|e| AuthError::Invalid(e.to_string()))?;
        let set = config.keys.keys(head.kid.as_deref()).await?;
        let jwk = pick_key(&set, head.kid.as_deref())?;
        let key = DecodingKey::from_jwk(jwk).map_err(|e| AuthError::Keys(e.to_string()))?;
        // The key, not the token, decides the algorithm: a token cannot
        // pick another family (say, HMAC with the public key as secret).
        let alg = key_algorithm(jwk).unwrap_or(head.alg);
        if !key.family().algorithms().contains(&alg) || alg_is_symmetric(alg) {
            return Err(AuthError::Invalid(format!(
                "algorithm {alg:?} does not fit the key"
            )));
        }
        let mut validation = Validation::new(alg);
        validation.set_issuer(&[&config.issuer]);
        validation.set_audience(&[&config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation)
            .map_err(|e| AuthError::Invalid(e.to_string()))?;
        let subject = match data.claims.get("sub") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => return Err(AuthError::Invalid("`sub` is not a non-empty string".into())),
        };
        Ok(VerifiedToken {
            subject,
            claims: data.claims,
        })
    }

    /// The resource identifier for a request to `path` with `headers`.
    fn resource_for(&self, headers: &HeaderMap, path: &str) -> String {
        if let Some(resource) = &self.inner.resource {
            return resource.clone();
        }
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .filter(|h| {
                !h.is_empty()
                    && h.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
            })
            .unwrap_or("localhost");
        format!("http://{host}{path}")
    }

    /// Where the metadata document of `resource` is (RFC 9728 §3.1: the
    /// well-known path inserted before the resource's path).
    fn metadata_url(resource: &str) -> String {
        match url::Url::parse(resource) {
            Ok(url) => {
                let path = url.path().trim_end_matches('/');
                format!(
                    "{}{METADATA_PATH}{path}",
                    url.origin().ascii_serialization()
                )
            }
            Err(_) => METADATA_PATH.to_owned(),
        }
    }

    /// The 401 for a request refused for `why`. The body says no more than
    /// the challenge does (what was wrong with a token helps whoever forges
    /// one); `why` goes to the log, at INFO, under a reference the body
    /// gives, for the operator a caller shows it to.
    fn challenge(&self, headers: &HeaderMap, path: &str, why: &AuthError) -> Response {
        let metadata = Self::metadata_url(&self.resource_for(headers, path));
        let mut value = format!("Bearer resource_metadata=\"{metadata}\"");
        // RFC 6750 §3.1: no error code when the request had no credentials.
        let body = if matches!(why, AuthError::Missing) {
            "Unauthorized: a bearer token is required\n".to_owned()
        } else {
            value.push_str(", error=\"invalid_token\"");
            let reference = &crate::id::random_hex()[..12];
            tracing::info!(reference, error = %why, "bearer token refused");
            format!("Unauthorized: the bearer token is not valid here (reference {reference})\n")
        };
        let mut response = (StatusCode::UNAUTHORIZED, body).into_response();
        if let Ok(value) = HeaderValue::from_str(&value) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }

    /// The Protected Resource Metadata document (RFC 9728).
    fn metadata(&self, headers: &HeaderMap, path: &str) -> Value {
        let config = &*self.inner;
        let servers = if config.authorization_servers.is_empty() {
            vec![config.issuer.clone()]
        } else {
            config.authorization_servers.clone()
        };
        let mut doc = json!({
            "resource": self.resource_for(headers, path),
            "authorization_servers": servers,
            "bearer_methods_supported": ["header"],
        });
        if !config.scopes.is_empty() {
            doc["scopes_supported"] = json!(config.scopes);
        }
        doc
    }

    /// Checks one request: lets it on with its [`VerifiedToken`] in its
    /// extensions, or answers it.
    async fn check(self, path: Arc<str>, mut req: Request, next: Next) -> Response {
        let token = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .filter(|t| !t.is_empty())
            .map(str::to_owned);
        let Some(token) = token else {
            return self.challenge(req.headers(), &path, &AuthError::Missing);
        };
        match self.verify(&token).await {
            Ok(verified) => {
                req.extensions_mut().insert(verified);
                next.run(req).await
            }
            Err(AuthError::Keys(e)) => {
                tracing::debug!(error = %e, "cannot check a bearer token: no keys");
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(header::RETRY_AFTER, "10")],
                    "Service Unavailable: the keys that check tokens cannot be fetched",
                )
                    .into_response()
            }
            Err(why) => self.challenge(req.headers(), &path, &why),
        }
    }
}

/// The key of `set` for a token naming `kid`: that key, or the only key
/// when the token names none.
fn pick_key<'a>(set: &'a JwkSet, kid: Option<&str>) -> Result<&'a Jwk, AuthError> {
    match kid {
        Some(kid) => set
            .find(kid)
            .ok_or_else(|| AuthError::UnknownKey(Some(kid.to_owned()))),
        None => match set.keys.as_slice() {
            [only] => Ok(only),
            _ => Err(AuthError::UnknownKey(None)),
        },
    }
}

/// The algorithm a key declares (its `alg`), if any.
fn key_algorithm(jwk: &Jwk) -> Option<Algorithm> {
    let name = serde_json::to_value(jwk.common.key_algorithm?).ok()?;
    serde_json::from_value(name).ok()
}

fn alg_is_symmetric(alg: Algorithm) -> bool {
    matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)
}

/// `app` with every route behind `auth`, and the Protected Resource
/// Metadata served (without authentication) for the endpoint at `path`.
pub(super) fn protect(app: axum::Router, auth: JwtAuth, path: &str) -> axum::Router {
    let path: Arc<str> = Arc::from(path);
    let checker = auth.clone();
    let at = path.clone();
    let app = app.layer(middleware::from_fn(move |req, next| {
        checker.clone().check(at.clone(), req, next)
    }));
    let document = {
        let path = path.clone();
        move |headers: HeaderMap| {
            let doc = auth.metadata(&headers, &path).to_string();
            async move { ([(header::CONTENT_TYPE, "application/json")], doc) }
        }
    };
    let app = app.route(METADATA_PATH, get(document.clone()));
    if path.is_empty() || &*path == "/" {
        app
    } else {
        app.route(&format!("{METADATA_PATH}{path}"), get(document))
    }
}
