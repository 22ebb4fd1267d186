//! Bearer-token authentication over HTTP: [`JwtAuth`] checks each request's
//! `Authorization: Bearer …` JWT against an issuer, an audience and a key
//! set (a JWKS file, or a JWKS URL whose keys are cached and refreshed), as
//! an OAuth 2.1 resource server does, and names the caller by the token's
//! `sub`.
//!
//! A request without a valid token gets `401 Unauthorized` with
//! `WWW-Authenticate: Bearer resource_metadata="…"` (and
//! `error="invalid_token"` when it had a token), and a body that does not
//! say what was wrong with the token: that goes to the log, at DEBUG, under
//! a reference the body gives; at INFO, a summary counts the refused tokens
//! by reason, at most one line a minute. The challenge points to the
//! Protected Resource Metadata document (RFC 9728) served at
//! `/.well-known/oauth-protected-resource` (and at that path followed by the
//! endpoint's path), which names the authorization servers to get a token
//! from.

mod jwks;

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
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

pub use self::jwks::Jwks;

/// Where the Protected Resource Metadata document is served (RFC 9728).
const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// A request's verified bearer token, in the request's extensions (rmcp
/// passes them on in the `http::request::Parts` of the request context), for
/// a [`TaskServerBuilder::principal`](crate::mcp::TaskServerBuilder::principal)
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
/// [`TaskServerBuilder::auth`](crate::mcp::TaskServerBuilder::auth).
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
    refusals: Arc<Refusals>,
}

debug_fields!(JwtAuth |auth|
    issuer: auth.inner.issuer,
    audience: auth.inner.audience,
    keys: auth.inner.keys,
);

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
                refusals: Arc::default(),
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
                    refusals: c.refusals.clone(),
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
    /// one); `why` goes to the log, at DEBUG, under a reference the body
    /// gives, for the operator a caller shows it to, and is counted in the
    /// summary at INFO ([`Refusals`]).
    fn challenge(&self, headers: &HeaderMap, path: &str, why: &AuthError) -> Response {
        let metadata = Self::metadata_url(&self.resource_for(headers, path));
        let mut value = format!("Bearer resource_metadata=\"{metadata}\"");
        // RFC 6750 §3.1: no error code when the request had no credentials.
        let body = if matches!(why, AuthError::Missing) {
            "Unauthorized: a bearer token is required\n".to_owned()
        } else {
            value.push_str(", error=\"invalid_token\"");
            let reference = &crate::id::random_hex()[..12];
            let reason = reason(why);
            tracing::debug!(reference, reason, error = %why, "bearer token refused");
            self.inner.refusals.record(reason);
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

/// What was wrong with a refused token, in a word or two: the summary's
/// reasons, a short fixed list (the full error is logged at DEBUG).
fn reason(why: &AuthError) -> &'static str {
    let message = match why {
        AuthError::Missing => return "no token",
        AuthError::UnknownKey(_) => return "unknown key",
        AuthError::Keys(_) => return "no keys",
        AuthError::Invalid(message) => message.as_str(),
    };
    // jsonwebtoken's messages for its error kinds, and ours.
    match message {
        "ExpiredSignature" => "expired",
        "ImmatureSignature" => "not yet valid",
        "InvalidSignature" => "bad signature",
        "InvalidIssuer" => "wrong issuer",
        "InvalidAudience" => "wrong audience",
        "InvalidAlgorithm" | "InvalidAlgorithmName" | "UnsupportedAlgorithm" => "wrong algorithm",
        m if m.ends_with("does not fit the key") => "wrong algorithm",
        m if m.starts_with("Missing required claim") || m.contains("`sub`") => "missing claim",
        m if m.starts_with("Invalid format for claim") => "malformed claim",
        _ => "malformed",
    }
}

/// How often, at most, [`Refusals`] writes its line.
const SUMMARY_EVERY: Duration = Duration::from_secs(60);

/// The refused tokens of one [`JwtAuth`], counted by reason for a summary
/// at INFO: the first refusal after a quiet minute is written at once, and
/// those that follow within the minute in one line at its end, so that a
/// client sending bad tokens in a loop costs the log one line a minute.
#[derive(Debug, Default)]
struct Refusals {
    tally: Mutex<Tally>,
}

#[derive(Debug, Default)]
struct Tally {
    /// Refusals not yet written, by reason.
    counts: BTreeMap<&'static str, u64>,
    /// When the last line was written.
    written_at: Option<tokio::time::Instant>,
    /// Whether a line is due at the end of the minute.
    due: bool,
}

impl Refusals {
    /// Counts one refusal; writes the line now, or has it written when the
    /// minute since the last one is over.
    fn record(self: &Arc<Self>, reason: &'static str) {
        let mut tally = self.tally.lock().unwrap_or_else(PoisonError::into_inner);
        *tally.counts.entry(reason).or_default() += 1;
        if tally.due {
            return;
        }
        let now = tokio::time::Instant::now();
        let next = tally.written_at.map(|at| at + SUMMARY_EVERY);
        match (next, tokio::runtime::Handle::try_current()) {
            (Some(next), Ok(runtime)) if next > now => {
                tally.due = true;
                let this = self.clone();
                runtime.spawn(async move {
                    tokio::time::sleep_until(next).await;
                    let mut tally = this.tally.lock().unwrap_or_else(PoisonError::into_inner);
                    tally.due = false;
                    tally.write(tokio::time::Instant::now());
                });
            }
            _ => tally.write(now),
        }
    }
}

impl Tally {
    /// The summary of the refusals counted since the last one, if any.
    fn write(&mut self, now: tokio::time::Instant) {
        let counts = std::mem::take(&mut self.counts);
        if counts.is_empty() {
            return;
        }
        self.written_at = Some(now);
        let refused: u64 = counts.values().sum();
        let reasons: Vec<String> = counts.iter().map(|(r, n)| format!("{r} {n}")).collect();
        tracing::info!(
            refused,
            "bearer tokens refused: {refused} ({}); at most one such line a minute, and \
             each refusal at DEBUG under the reference its 401 gave",
            reasons.join(", ")
        );
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
pub(crate) fn protect(app: axum::Router, auth: JwtAuth, path: &str) -> axum::Router {
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

#[cfg(test)]
mod tests {
    use std::io::Write;

    use jsonwebtoken::errors::{Error, ErrorKind};
    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    /// What a subscriber wrote.
    #[derive(Clone, Default)]
    struct Written(Arc<Mutex<Vec<u8>>>);

    impl Write for Written {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Written {
        type Writer = Self;
        fn make_writer(&'a self) -> Self {
            self.clone()
        }
    }

    impl Written {
        fn lines(&self) -> Vec<String> {
            let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
            text.lines().map(str::to_owned).collect()
        }
    }

    /// A burst of refusals costs one line at once and one at the end of
    /// the minute, which counts them by reason; a refusal after a quiet
    /// minute is written at once again.
    #[tokio::test(start_paused = true)]
    async fn refusals_are_summed_up_at_most_once_a_minute() {
        let written = Written::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(written.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let refusals = Arc::new(Refusals::default());
        refusals.record("expired");
        assert_eq!(written.lines().len(), 1, "{:?}", written.lines());
        assert!(
            written.lines()[0].contains("INFO")
                && written.lines()[0].contains("bearer tokens refused: 1 (expired 1)"),
            "{:?}",
            written.lines()
        );
        for _ in 0..500 {
            refusals.record("wrong audience");
        }
        refusals.record("expired");
        tokio::time::sleep(SUMMARY_EVERY - Duration::from_secs(1)).await;
        assert_eq!(written.lines().len(), 1, "nothing more within the minute");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let lines = written.lines();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[1].contains("bearer tokens refused: 501 (expired 1, wrong audience 500)"),
            "{lines:?}"
        );
        // Quiet for a minute: the next one is written at once.
        tokio::time::sleep(SUMMARY_EVERY).await;
        assert_eq!(written.lines().len(), 2, "nothing to write: no line");
        refusals.record("bad signature");
        let lines = written.lines();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[2].contains("refused: 1 (bad signature 1)"),
            "{lines:?}"
        );
    }

    /// jsonwebtoken's messages map to the summary's reasons.
    #[test]
    fn reasons_name_what_was_wrong() {
        let invalid = |kind: ErrorKind| AuthError::Invalid(Error::from(kind).to_string());
        for (why, named) in [
            (invalid(ErrorKind::ExpiredSignature), "expired"),
            (invalid(ErrorKind::ImmatureSignature), "not yet valid"),
            (invalid(ErrorKind::InvalidSignature), "bad signature"),
            (invalid(ErrorKind::InvalidIssuer), "wrong issuer"),
            (invalid(ErrorKind::InvalidAudience), "wrong audience"),
            (invalid(ErrorKind::InvalidAlgorithm), "wrong algorithm"),
            (
                invalid(ErrorKind::MissingRequiredClaim("exp".into())),
                "missing claim",
            ),
            (invalid(ErrorKind::InvalidToken), "malformed"),
            (
                AuthError::Invalid("algorithm HS256 does not fit the key".into()),
                "wrong algorithm",
            ),
            (
                AuthError::Invalid("`sub` is not a non-empty string".into()),
                "missing claim",
            ),
            (AuthError::UnknownKey(Some("k9".into())), "unknown key"),
        ] {
            assert_eq!(reason(&why), named, "{why}");
        }
    }
}
