//! The key sets tokens are checked against: [`Jwks`], from a file, a
//! document, or a URL whose keys are cached and fetched again.

use std::{
    path::Path,
    sync::{Arc, RwLock},
    time::{Duration, Instant},
};

use axum::http::header;
use jsonwebtoken::{DecodingKey, jwk::JwkSet};

use super::AuthError;

/// How often the keys of a JWKS URL are fetched again (see [`Jwks::refresh`]).
const DEFAULT_REFRESH: Duration = Duration::from_secs(600);
/// The least time between two fetches of a JWKS URL, whatever the tokens
/// ask for (a token naming an unknown `kid` makes the server look again).
const MIN_REFETCH: Duration = Duration::from_secs(10);
/// How long a fetch of a JWKS URL may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

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
    pub(super) async fn keys(&self, kid: Option<&str>) -> Result<Arc<JwkSet>, AuthError> {
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
