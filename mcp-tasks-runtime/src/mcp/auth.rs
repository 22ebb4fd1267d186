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

use std::{
    path::Path,
    sync::{Arc, RwLock},
    time::{Duration, Instant},
};

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

/// How often the keys of a JWKS URL are fetched again (see [`Jwks::refresh`]).
const DEFAULT_REFRESH: Duration = Duration::from_secs(600);
/// The least time between two fetches of a JWKS URL, whatever the tokens
/// ask for (a token naming an unknown `kid` makes the server look again).
const MIN_REFETCH: Duration = Duration::from_secs(10);
/// How long a fetch of a JWKS URL may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
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

/// Where the public keys that sign tokens come from.
#[derive(Clone)]
pub struct Jwks(Arc<KeySource>);

enum KeySource {
    Fixed(Arc<JwkSet>),
    Remote(Box<Remote>),
}

impl std::fmt::Debug for Jwks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self.0 {
            KeySource::Fixed(set) => f.debug_tuple("Jwks").field(&set.keys.len()).finish(),
            KeySource::Remote(r) => f.debug_tuple("Jwks").field(&r.url.as_str()).finish(),
        }
    }
}

/// An HTTP(S) client for key sets: hyper's, with rustls on *ring* (its own
/// provider, so nothing process-wide is set) and the Mozilla roots.
type KeyClient = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    http_body_util::Empty<axum::body::Bytes>,
>;

/// The largest key set accepted, in bytes.
const MAX_JWKS_BYTES: usize = 1024 * 1024;

struct Remote {
    url: url::Url,
    client: KeyClient,
    refresh: Duration,
    cache: RwLock<Cache>,
    /// Held while fetching, so that one fetch serves every waiting request.
    fetching: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Cache {
    keys: Option<(Arc<JwkSet>, Instant)>,
    last_try: Option<Instant>,
}

impl Jwks {
    /// The keys of a JWKS document (`{"keys": [...]}`, RFC 7517) in a file,
    /// read now.
    ///
    /// # Errors
    ///
    /// [`AuthError::Keys`] when the file cannot be read, is no JWKS, or holds
    /// no key this server can use.
    pub fn file(path: impl AsRef<Path>) -> Result<Self, AuthError> {
        let path = path.as_ref();
        let text = std::fs::read(path)
            .map_err(|e| AuthError::Keys(format!("cannot read {}: {e}", path.display())))?;
        let set =
            parse_set(&text).map_err(|e| AuthError::Keys(format!("{}: {e}", path.display())))?;
        Ok(Self(Arc::new(KeySource::Fixed(Arc::new(set)))))
    }

    /// The keys of a JWKS document given as text.
    ///
    /// # Errors
    ///
    /// As [`Jwks::file`].
    pub fn from_json(text: &str) -> Result<Self, AuthError> {
        let set = parse_set(text.as_bytes()).map_err(AuthError::Keys)?;
        Ok(Self(Arc::new(KeySource::Fixed(Arc::new(set)))))
    }

    /// The keys served at `url` (an `http` or `https` URL, such as an
    /// authorization server's `jwks_uri`): fetched when first needed, kept,
    /// and fetched again every [`Jwks::refresh`] (10 minutes by default), or
    /// sooner when a token names a key id the set lacks (at most every 10 s).
    /// When a fetch fails, the keys fetched before stay in use; with none,
    /// requests get `503` until a fetch (tried at most every 10 s) works.
    /// An `https` URL is checked against the Mozilla root certificates
    /// (rustls on *ring*); redirects are not followed.
    ///
    /// # Errors
    ///
    /// [`AuthError::Keys`] when `url` is no `http(s)` URL.
    pub fn url(url: &str) -> Result<Self, AuthError> {
        let url = url::Url::parse(url).map_err(|e| AuthError::Keys(format!("{url}: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(AuthError::Keys(format!("{url}: not an http(s) URL")));
        }
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(Arc::new(rustls::crypto::ring::default_provider()))
            .map_err(|e| AuthError::Keys(format!("cannot set up TLS: {e}")))?
            .https_or_http()
            .enable_http1()
            .build();
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(https);
        Ok(Self(Arc::new(KeySource::Remote(Box::new(Remote {
            url,
            client,
            refresh: DEFAULT_REFRESH,
            cache: RwLock::default(),
            fetching: tokio::sync::Mutex::new(()),
        })))))
    }

    /// How long the keys of a JWKS URL are kept before they are fetched
    /// again (default 10 minutes; at least 10 s). No effect on a file's keys.
    #[must_use]
    pub fn refresh(self, every: Duration) -> Self {
        match Arc::try_unwrap(self.0) {
            Ok(KeySource::Remote(mut remote)) => {
                remote.refresh = every.max(MIN_REFETCH);
                Self(Arc::new(KeySource::Remote(remote)))
            }
            Ok(fixed) => Self(Arc::new(fixed)),
            Err(shared) => Self(shared),
        }
    }

    /// The key set, fetched or refreshed as needed; `kid` is the key the
    /// token asks for.
    async fn keys(&self, kid: Option<&str>) -> Result<Arc<JwkSet>, AuthError> {
        match &*self.0 {
            KeySource::Fixed(set) => Ok(set.clone()),
            KeySource::Remote(remote) => remote.keys(kid).await,
        }
    }
}

impl Remote {
    fn cached(&self) -> (Option<(Arc<JwkSet>, Instant)>, Option<Instant>) {
        let cache = self
            .cache
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (cache.keys.clone(), cache.last_try)
    }

    /// Whether the cached keys serve a token asking for `kid` now.
    fn serves(&self, kid: Option<&str>, now: Instant) -> Option<Arc<JwkSet>> {
        let (keys, last_try) = self.cached();
        let (set, at) = keys?;
        let fresh = now.duration_since(at) < self.refresh;
        let has_kid = kid.is_none_or(|k| set.find(k).is_some());
        let tried_lately = last_try.is_some_and(|t| now.duration_since(t) < MIN_REFETCH);
        (fresh && has_kid || tried_lately).then_some(set)
    }

    async fn keys(&self, kid: Option<&str>) -> Result<Arc<JwkSet>, AuthError> {
        if let Some(set) = self.serves(kid, Instant::now()) {
            return Ok(set);
        }
        let _one_fetch = self.fetching.lock().await;
        // Another request may have fetched while this one waited.
        let now = Instant::now();
        if let Some(set) = self.serves(kid, now) {
            return Ok(set);
        }
        // Never fetched, and the last try failed lately: do not hammer a
        // key server that is down.
        if let (None, Some(last)) = self.cached()
            && now.duration_since(last) < MIN_REFETCH
        {
            return Err(AuthError::Keys(format!(
                "{}: unavailable (the last fetch failed)",
                self.url
            )));
        }
        let fetched = self.fetch().await;
        let mut cache = self
            .cache
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cache.last_try = Some(now);
        match fetched {
            Ok(set) => {
                let set = Arc::new(set);
                cache.keys = Some((set.clone(), now));
                Ok(set)
            }
            Err(e) => match &cache.keys {
                Some((set, _)) => {
                    tracing::warn!(url = %self.url, error = %e, "could not refresh the JWKS; keeping the keys fetched before");
                    Ok(set.clone())
                }
                None => {
                    tracing::error!(url = %self.url, error = %e, "could not fetch the JWKS");
                    Err(AuthError::Keys(e))
                }
            },
        }
    }

    async fn fetch(&self) -> Result<JwkSet, String> {
        use http_body_util::BodyExt as _;
        let at = |e: &dyn std::fmt::Display| format!("{}: {e}", self.url);
        let request = axum::http::Request::get(self.url.as_str())
            .header(header::ACCEPT, "application/json")
            .body(http_body_util::Empty::new())
            .map_err(|e| at(&e))?;
        let fetched = async {
            let response = self.client.request(request).await.map_err(|e| at(&e))?;
            let status = response.status();
            if !status.is_success() {
                return Err(at(&format!("HTTP {status}")));
            }
            http_body_util::Limited::new(response.into_body(), MAX_JWKS_BYTES)
                .collect()
                .await
                .map(|body| body.to_bytes())
                .map_err(|e| at(&e))
        };
        let body = tokio::time::timeout(FETCH_TIMEOUT, fetched)
            .await
            .map_err(|_| at(&format!("no answer within {}s", FETCH_TIMEOUT.as_secs())))??;
        parse_set(&body).map_err(|e| at(&e))
    }
}

/// A JWKS document, keeping the keys this server can verify with (others,
/// such as encryption keys, are left out).
fn parse_set(bytes: &[u8]) -> Result<JwkSet, String> {
    let mut set: JwkSet =
        serde_json::from_slice(bytes).map_err(|e| format!("not a JWKS document: {e}"))?;
    set.keys.retain(|k| {
        let signing = !matches!(
            k.common.public_key_use,
            Some(jsonwebtoken::jwk::PublicKeyUse::Encryption)
        );
        signing && k.is_supported() && DecodingKey::from_jwk(k).is_ok()
    });
    if set.keys.is_empty() {
        return Err("no signing key this server can use".into());
    }
    Ok(set)
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
