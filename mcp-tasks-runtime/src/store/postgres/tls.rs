//! TLS to the server, as the connection URL's `sslmode` asks, with the
//! meanings libpq gives it (rustls on ring, through tokio-postgres-rustls).
//!
//! | `sslmode` | TLS | the server's certificate |
//! | --- | --- | --- |
//! | `disable` | never | — |
//! | `prefer` (the default) | when the server offers it, else plain | not checked |
//! | `require` | always | not checked; with a CA (`sslrootcert`, or `~/.postgresql/root.crt`), as `verify-ca` |
//! | `verify-ca` | always | signed by the CA |
//! | `verify-full` | always | signed by the CA, and names the host connected to |
//!
//! The CA is the PEM file `sslrootcert` names, else `~/.postgresql/root.crt`
//! when it exists (as libpq looks for it); `verify-ca` and `verify-full`
//! without one are refused before connecting. `allow` (libpq's "plain,
//! unless the server insists"), `sslrootcert=system` and client
//! certificates (`sslcert`, `sslkey`) are not supported: each is refused
//! with a message that says so, as is any other unknown value.
//!
//! As libpq does, `PGSSLMODE` and `PGSSLROOTCERT` in the environment stand
//! for `sslmode` and `sslrootcert` when the URL does not set them (the URL
//! wins); `PGSSLCERT` and `PGSSLKEY` are not read (no client certificates).
//!
//! Under `prefer`, a server that refuses TLS gets a plain connection, as
//! libpq gives it, and a WARN saying so, naming the host, once per store and
//! host ([`Connector`]).
//!
//! tokio-postgres reads neither the `verify-*` modes nor `sslrootcert`, so
//! [`take`] takes them out of the URL (in either of its forms) before the
//! rest is handed to it.

use std::{
    collections::HashSet,
    path::PathBuf,
    sync::{Arc, Mutex, PoisonError},
};

use futures::future::BoxFuture;
use tokio_postgres::{
    Client, Config, Socket,
    tls::{MakeTlsConnect, TlsConnect},
};

use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, Error as TlsError, RootCertStore,
    SignatureScheme,
    client::{
        WebPkiServerVerifier,
        danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    },
    crypto::{CryptoProvider, WebPkiSupportedAlgorithms},
    pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject},
};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::{error::Result, store::StoreError};

/// What the URL asks of TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    fn parse(value: &str) -> Result<Self> {
        Ok(match value {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            "allow" => {
                return Err(refused(
                    "sslmode=allow is not supported: use disable, prefer, require, verify-ca \
                     or verify-full",
                ));
            }
            other => {
                return Err(refused(&format!(
                    "unknown sslmode `{other}`: use disable, prefer, require, verify-ca or \
                     verify-full"
                )));
            }
        })
    }

    /// tokio-postgres's mode: whether TLS is tried, and whether it must be.
    pub(super) fn ssl_mode(self) -> SslMode {
        match self {
            Self::Disable => SslMode::Disable,
            Self::Prefer => SslMode::Prefer,
            Self::Require | Self::VerifyCa | Self::VerifyFull => SslMode::Require,
        }
    }
}

fn refused(message: &str) -> crate::Error {
    StoreError::new(format!("Postgres store: {message}")).into()
}

/// The TLS settings of a connection URL, taken out of it.
#[derive(Debug)]
pub(super) struct Tls {
    /// The mode asked for (`prefer` when the URL says nothing).
    pub(super) mode: Mode,
    /// The CA file named by `sslrootcert`.
    root: Option<PathBuf>,
}

impl Tls {
    /// The connector for these settings. Its certificate checks are those of
    /// the mode; under `disable` it is never used.
    pub(super) fn connector(&self) -> Result<MakeRustlsConnect> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let root = self.root.clone().or_else(default_root);
        let verifier: Arc<dyn ServerCertVerifier> = match (self.mode, root) {
            (Mode::VerifyCa | Mode::VerifyFull, None) => {
                return Err(refused(
                    "sslmode=verify-ca and verify-full need the CA that signed the server's \
                     certificate: name its PEM file with sslrootcert=/path/to/ca.pem (or put it \
                     at ~/.postgresql/root.crt)",
                ));
            }
            (Mode::VerifyFull, Some(root)) => webpki(&root, &provider)?,
            (Mode::Require | Mode::VerifyCa, Some(root)) => Arc::new(AnyName {
                inner: webpki(&root, &provider)?,
            }),
            (Mode::Disable | Mode::Prefer | Mode::Require, _) => Arc::new(Unchecked {
                algorithms: provider.signature_verification_algorithms,
            }),
        };
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| StoreError::new("Postgres store: could not set up TLS").with_source(e))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(MakeRustlsConnect::new(config))
    }
}

/// libpq's default CA file, `~/.postgresql/root.crt`, when it exists.
fn default_root() -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os("HOME")?).join(".postgresql/root.crt");
    path.is_file().then_some(path)
}

/// rustls's own checks (chain and name) against the CAs in the PEM file
/// `root`.
fn webpki(
    root: &std::path::Path,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>> {
    let unreadable = |e: &dyn std::fmt::Display| {
        refused(&format!(
            "could not read the CA file sslrootcert={} (PEM certificates): {e}",
            root.display()
        ))
    };
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(root).map_err(|e| unreadable(&e))? {
        let cert = cert.map_err(|e| unreadable(&e))?;
        roots.add(cert).map_err(|e| unreadable(&e))?;
    }
    if roots.is_empty() {
        return Err(unreadable(&"it holds no certificate"));
    }
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| unreadable(&e))
}

/// The pool's way to open a connection: deadpool's own (the connection's
/// task spawned), watching whether TLS was used; under `prefer`, a plain
/// connection to a host is a WARN, once per host for the store's life.
pub(super) struct Connector {
    tls: MakeRustlsConnect,
    /// Whether a plain connection is worth a warning: `prefer`, to a host
    /// over TCP (never TLS over a Unix socket).
    watch: bool,
    /// What the store points at, for a host without a name (`hostaddr`).
    target: String,
    /// The hosts already warned about.
    warned: Mutex<HashSet<String>>,
}

impl Connector {
    pub(super) fn new(tls: MakeRustlsConnect, mode: Mode, config: &Config, target: String) -> Self {
        let tcp = config
            .get_hosts()
            .iter()
            .any(|h| matches!(h, tokio_postgres::config::Host::Tcp(_)));
        Self {
            tls,
            watch: mode == Mode::Prefer && tcp,
            target,
            warned: Mutex::default(),
        }
    }

    /// The WARN for a plain connection to `host`, unless it was given.
    fn plain(&self, host: &str) {
        let host = if host.is_empty() { &self.target } else { host };
        let first = self
            .warned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(host.to_owned());
        if first {
            tracing::warn!(
                host,
                "Postgres store: the connection to {host} is NOT encrypted: the server refused \
                 TLS and sslmode is prefer (the default), which then connects in plain text. \
                 Set sslmode=require or verify-full (in the URL, or PGSSLMODE) to refuse plain \
                 text, or sslmode=disable to say it is meant"
            );
        }
    }
}

impl deadpool_postgres::Connect for Connector {
    fn connect(
        &self,
        pg_config: &Config,
    ) -> BoxFuture<'_, Result<(Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>> {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let tls = Watched {
            inner: self.tls.clone(),
            seen: seen.clone(),
        };
        let pg_config = pg_config.clone();
        Box::pin(async move {
            let (client, connection) = pg_config.connect(tls).await?;
            let task = tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::warn!(target: "deadpool.postgres", "Connection error: {e}");
                }
            });
            let seen = std::mem::take(&mut *seen.lock().unwrap_or_else(PoisonError::into_inner));
            if self.watch && !seen.encrypted {
                self.plain(&seen.host);
            }
            Ok((client, task))
        })
    }
}

/// What one connection did: the host it went to last, and whether TLS
/// started there.
#[derive(Debug, Default)]
struct Seen {
    host: String,
    encrypted: bool,
}

/// rustls's connector, telling [`Seen`] what tokio-postgres did with it.
#[derive(Clone)]
struct Watched {
    inner: MakeRustlsConnect,
    seen: Arc<Mutex<Seen>>,
}

impl MakeTlsConnect<Socket> for Watched {
    type Stream = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream;
    type TlsConnect = WatchedConnect;
    type Error = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Error;

    /// Called once per host tried, before connecting to it.
    fn make_tls_connect(&mut self, domain: &str) -> Result<WatchedConnect, Self::Error> {
        let inner = MakeTlsConnect::<Socket>::make_tls_connect(&mut self.inner, domain)?;
        *self.seen.lock().unwrap_or_else(PoisonError::into_inner) = Seen {
            host: domain.to_owned(),
            encrypted: false,
        };
        Ok(WatchedConnect {
            inner,
            seen: self.seen.clone(),
        })
    }
}

struct WatchedConnect {
    inner: <MakeRustlsConnect as MakeTlsConnect<Socket>>::TlsConnect,
    seen: Arc<Mutex<Seen>>,
}

impl TlsConnect<Socket> for WatchedConnect {
    type Stream = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream;
    type Error =
        <<MakeRustlsConnect as MakeTlsConnect<Socket>>::TlsConnect as TlsConnect<Socket>>::Error;
    type Future =
        <<MakeRustlsConnect as MakeTlsConnect<Socket>>::TlsConnect as TlsConnect<Socket>>::Future;

    /// Called only when the server accepted TLS: the handshake starts.
    fn connect(self, stream: Socket) -> Self::Future {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .encrypted = true;
        self.inner.connect(stream)
    }
}

/// `verify-ca`: the chain is checked, the name is not.
#[derive(Debug)]
struct AnyName {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            // A certificate for another name is fine here: the name is
            // checked last, once the chain is good.
            Err(TlsError::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// `prefer` and `require` without a CA: the connection is encrypted, and
/// the server's certificate is not checked (libpq's meaning: protection
/// against eavesdropping, not against a server in the middle). The
/// handshake's signatures are still checked.
#[derive(Debug)]
struct Unchecked {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Takes `sslmode` and `sslrootcert` (and refuses the TLS settings this
/// store does not support) out of `url`, in its URL form
/// (`postgres://…?sslmode=…`) or its `key=value` form; returns the rest of
/// the URL, for tokio-postgres, and the TLS settings, with `PGSSLMODE` and
/// `PGSSLROOTCERT` from the environment for what the URL does not set.
pub(super) fn take(url: &str) -> Result<(String, Tls)> {
    take_with(url, |name| std::env::var(name).ok())
}

/// [`take`], with `env` for the environment.
fn take_with(url: &str, env: impl Fn(&str) -> Option<String>) -> Result<(String, Tls)> {
    let (rest, params) = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        take_from_query(url)
    } else {
        take_from_pairs(url)
    };
    let mut tls = Tls {
        mode: Mode::Prefer,
        root: None,
    };
    let set = |key: &str| params.iter().any(|(k, _)| k == key);
    let env = |name: &str| env(name).filter(|v| !v.is_empty());
    if !set("sslmode")
        && let Some(value) = env("PGSSLMODE")
    {
        tls.mode = Mode::parse(&value).map_err(|_| {
            refused(&format!(
                "PGSSLMODE={value} in the environment is not a sslmode this store supports: \
                 use disable, prefer, require, verify-ca or verify-full"
            ))
        })?;
    }
    if !set("sslrootcert")
        && let Some(value) = env("PGSSLROOTCERT")
    {
        if value == "system" {
            return Err(refused(
                "PGSSLROOTCERT=system in the environment is not supported: name the CA's PEM file",
            ));
        }
        tls.root = Some(PathBuf::from(value));
    }
    for (key, value) in params {
        match key.as_str() {
            "sslmode" => tls.mode = Mode::parse(&value)?,
            "sslrootcert" if value == "system" => {
                return Err(refused(
                    "sslrootcert=system is not supported: name the CA's PEM file",
                ));
            }
            "sslrootcert" => tls.root = Some(PathBuf::from(value)),
            other => {
                return Err(refused(&format!(
                    "{other} is not supported: the store does not present client certificates"
                )));
            }
        }
    }
    Ok((rest, tls))
}

/// Whether `key` is one of the settings [`take`] takes.
fn is_tls_key(key: &str) -> bool {
    matches!(
        key,
        "sslmode" | "sslrootcert" | "sslcert" | "sslkey" | "sslpassword"
    )
}

/// [`take`] for the URL form: the settings are in the query string.
fn take_from_query(url: &str) -> (String, Vec<(String, String)>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), Vec::new());
    };
    let mut taken = Vec::new();
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = percent_decode(key);
        if is_tls_key(&key) {
            taken.push((key, percent_decode(value)));
        } else {
            kept.push(pair);
        }
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (rest, taken)
}

/// `%XX` escapes decoded (as tokio-postgres decodes the query string).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// [`take`] for the `key=value` form: pairs separated by white space, a
/// value in single quotes when it holds spaces, `\` escaping the next
/// character.
fn take_from_pairs(url: &str) -> (String, Vec<(String, String)>) {
    let chars: Vec<char> = url.chars().collect();
    let mut taken = Vec::new();
    let mut rest = String::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && chars[i] != '=' && !chars[i].is_whitespace() {
            i += 1;
        }
        let key: String = chars[start..i].iter().collect();
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        if chars.get(i) == Some(&'=') {
            i += 1;
        }
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        let mut value = String::new();
        let quoted = chars.get(i) == Some(&'\'');
        if quoted {
            i += 1;
        }
        while i < chars.len() {
            match chars[i] {
                '\\' if i + 1 < chars.len() => {
                    value.push(chars[i + 1]);
                    i += 2;
                }
                '\'' if quoted => {
                    i += 1;
                    break;
                }
                c if c.is_whitespace() && !quoted => break,
                c => {
                    value.push(c);
                    i += 1;
                }
            }
        }
        if is_tls_key(&key) {
            taken.push((key, value));
        } else {
            if !rest.is_empty() {
                rest.push(' ');
            }
            rest.extend(&chars[start..i]);
        }
    }
    (rest, taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_taken_from_either_form() {
        let (rest, tls) = take(
            "postgres://u@h:5432/db?application_name=x&sslmode=verify-ca&sslrootcert=%2Ftmp%2Fca.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u@h:5432/db?application_name=x");
        assert_eq!(tls.mode, Mode::VerifyCa);
        assert_eq!(tls.root, Some(PathBuf::from("/tmp/ca.pem")));

        let (rest, tls) =
            take("host=h sslmode = 'verify-full' sslrootcert='/a b/ca.pem' user=u").unwrap();
        assert_eq!(rest, "host=h user=u");
        assert_eq!(tls.mode, Mode::VerifyFull);
        assert_eq!(tls.root, Some(PathBuf::from("/a b/ca.pem")));

        let (rest, tls) = take("postgres://u@h/db").unwrap();
        assert_eq!(rest, "postgres://u@h/db");
        assert_eq!(tls.mode, Mode::Prefer, "libpq's default");
    }

    /// `PGSSLMODE` and `PGSSLROOTCERT` stand for what the URL does not
    /// set; the URL wins; a value this store does not take is refused
    /// naming the variable.
    #[test]
    fn the_environment_fills_in_what_the_url_leaves_out() {
        let env = |mode: &'static str, root: &'static str| {
            move |name: &str| match name {
                "PGSSLMODE" => Some(mode.to_owned()),
                "PGSSLROOTCERT" => Some(root.to_owned()),
                _ => None,
            }
        };
        let (rest, tls) = take_with("postgres://u@h/db", env("verify-ca", "/ca.pem")).unwrap();
        assert_eq!(rest, "postgres://u@h/db");
        assert_eq!(tls.mode, Mode::VerifyCa);
        assert_eq!(tls.root, Some(PathBuf::from("/ca.pem")));

        let (_, tls) = take_with(
            "host=h sslmode=disable sslrootcert=/mine.pem",
            env("verify-full", "/ca.pem"),
        )
        .unwrap();
        assert_eq!(tls.mode, Mode::Disable, "the URL wins");
        assert_eq!(tls.root, Some(PathBuf::from("/mine.pem")));

        let (_, tls) = take_with("postgres://u@h/db", env("", "")).unwrap();
        assert_eq!((tls.mode, tls.root), (Mode::Prefer, None), "empty is unset");

        let e = take_with("postgres://u@h/db", env("on", ""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("PGSSLMODE=on"), "{e}");
        let e = take_with("postgres://u@h/db", env("", "system"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("PGSSLROOTCERT=system"), "{e}");
    }

    #[test]
    fn unsupported_settings_are_refused_by_name() {
        for (url, named) in [
            (
                "postgres://h/db?sslmode=verify_full",
                "unknown sslmode `verify_full`",
            ),
            ("host=h sslmode=allow", "sslmode=allow is not supported"),
            ("postgres://h/db?sslrootcert=system", "sslrootcert=system"),
            ("postgres://h/db?sslcert=/c.pem", "sslcert is not supported"),
        ] {
            let e = take(url).unwrap_err().to_string();
            assert!(e.contains(named), "{url}: {e}");
        }
    }
}
