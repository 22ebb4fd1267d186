//! TLS to the server: the connector the builder was given
//! ([`PostgresStoreBuilder::tls`](super::PostgresStoreBuilder::tls)), else
//! rustls (on ring, through tokio-postgres-rustls) as the connection URL's
//! `sslmode` asks, with the meanings libpq gives it:
//!
//! | `sslmode` | TLS | the server's certificate |
//! | --- | --- | --- |
//! | `disable` | never | — |
//! | `prefer` (the default) | when the server offers it, else plain | not checked |
//! | `require` | always | not checked; with a CA (`sslrootcert`, or `~/.postgresql/root.crt`), as `verify-ca` |
//! | `verify-ca` | always | signed by the CA |
//! | `verify-full` | always | signed by the CA, and names the host connected to |
//!
//! tokio-postgres reads `disable`, `prefer` and `require` in either form of
//! the URL; the store reads the rest (`verify-*`, `sslrootcert`) from the
//! URL form's query string ([`take`]), and `PGSSLMODE` and `PGSSLROOTCERT`
//! from the environment when the URL does not set them, as libpq does.
//! `verify-ca` and `verify-full` without a CA are refused before
//! connecting; `allow`, `sslrootcert=system` and client certificates are
//! refused naming the setting (a connector of your own can do what these
//! do).
//!
//! Under `prefer`, a connection that turns out plain (the server refused
//! TLS) is a WARN naming the host, once per store ([`warn_if_plain`]).

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use deadpool_postgres::Hook;
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
use tokio_postgres::{
    Config, Socket,
    config::{Host, SslMode},
    tls::{MakeTlsConnect, TlsConnect},
};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::{error::Result, store::StoreError};

/// A TLS connector a [`PostgresStore`](super::PostgresStore) can connect
/// through: tokio-postgres's [`MakeTlsConnect`] over its socket, cloned for
/// each connection of the pool and the change feed's. Every such connector
/// is one (`tokio_postgres_rustls::MakeRustlsConnect`,
/// `postgres_native_tls::MakeTlsConnector`, `tokio_postgres::NoTls`, ...);
/// hand it to [`PostgresStoreBuilder::tls`](super::PostgresStoreBuilder::tls).
pub trait PostgresTls:
    MakeTlsConnect<
        Socket,
        Stream: Send + Sync,
        TlsConnect: Send + Sync + TlsConnect<Socket, Future: Send>,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<T> PostgresTls for T where
    T: MakeTlsConnect<
            Socket,
            Stream: Send + Sync,
            TlsConnect: Send + Sync + TlsConnect<Socket, Future: Send>,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

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
    /// The mode asked for (`None`: as tokio-postgres read the URL, `prefer`
    /// when it says nothing).
    pub(super) mode: Option<Mode>,
    /// The CA file named by `sslrootcert`.
    root: Option<PathBuf>,
}

impl Tls {
    /// Puts the mode on `config`, or takes it from there when the URL left
    /// it to tokio-postgres.
    pub(super) fn apply(&mut self, config: &mut Config) {
        match self.mode {
            Some(mode) => {
                config.ssl_mode(mode.ssl_mode());
            }
            None => {
                self.mode = Some(match config.get_ssl_mode() {
                    SslMode::Disable => Mode::Disable,
                    SslMode::Require => Mode::Require,
                    _ => Mode::Prefer,
                });
            }
        }
    }

    fn mode(&self) -> Mode {
        self.mode.unwrap_or(Mode::Prefer)
    }

    /// The connector for these settings. Its certificate checks are those of
    /// the mode; under `disable` it is never used.
    pub(super) fn connector(&self) -> Result<MakeRustlsConnect> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let root = self.root.clone().or_else(default_root);
        let verifier: Arc<dyn ServerCertVerifier> = match (self.mode(), root) {
            (Mode::VerifyCa | Mode::VerifyFull, None) => {
                return Err(refused(
                    "sslmode=verify-ca and verify-full need the CA that signed the server's \
                     certificate: name its PEM file with sslrootcert=/path/to/ca.pem (or put it \
                     at ~/.postgresql/root.crt)",
                ));
            }
            (Mode::VerifyFull, Some(root)) => webpki(&root, &provider)?,
            (Mode::Require | Mode::VerifyCa, Some(root)) => Arc::new(Lenient {
                chain: Some(webpki(&root, &provider)?),
                algorithms: provider.signature_verification_algorithms,
            }),
            (Mode::Disable | Mode::Prefer | Mode::Require, _) => Arc::new(Lenient {
                chain: None,
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

/// `verify-ca` (a chain to check, the name not), and `prefer` and `require`
/// without a CA (nothing to check: libpq's meaning, protection against
/// eavesdropping, not against a server in the middle). Either way the
/// handshake's signatures are checked.
#[derive(Debug)]
struct Lenient {
    /// The CA's checks, for `verify-ca`.
    chain: Option<Arc<WebPkiServerVerifier>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
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

/// Takes `sslmode` and `sslrootcert` out of `url` (refusing the TLS
/// settings this store does not support), for what tokio-postgres does not
/// read; returns the rest of the URL, and the TLS settings, with
/// `PGSSLMODE` and `PGSSLROOTCERT` from the environment for what the URL
/// does not set. In the `key=value` form, tokio-postgres reads `sslmode`
/// itself, and the other settings are refused.
pub(super) fn take(url: &str) -> Result<(String, Tls)> {
    take_with(url, |name| std::env::var(name).ok())
}

/// [`take`], with `env` for the environment.
fn take_with(url: &str, env: impl Fn(&str) -> Option<String>) -> Result<(String, Tls)> {
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    let url_form = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let (base, query) = if url_form {
        url.split_once('?').unwrap_or((url, ""))
    } else {
        let said = |key: &str| url.split_whitespace().any(|w| w.starts_with(key));
        if said("sslrootcert") || said("sslcert") || said("sslkey") || said("sslmode=verify") {
            return Err(refused(
                "verify-ca, verify-full and sslrootcert are read from the URL form \
                 (postgres://...?sslmode=verify-full&sslrootcert=/path/to/ca.pem) or from \
                 PGSSLMODE and PGSSLROOTCERT",
            ));
        }
        (url, "")
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match url::form_urlencoded::parse(pair.as_bytes()).next() {
            Some((key, value)) if key.starts_with("ssl") && key != "sslnegotiation" => {
                taken.push((key.into_owned(), value.into_owned()));
            }
            _ => kept.push(pair),
        }
    }
    let rest = match kept.is_empty() {
        true => base.to_owned(),
        false => format!("{base}?{}", kept.join("&")),
    };
    let set = |key: &str| taken.iter().any(|(k, _)| k == key) || (!url_form && url.contains(key));
    let env = |name: &str| env(name).filter(|v| !v.is_empty());
    let mut tls = Tls {
        mode: None,
        root: None,
    };
    if let Some(value) = env("PGSSLMODE").filter(|_| !set("sslmode")) {
        tls.mode = Some(Mode::parse(&value).map_err(|_| {
            refused(&format!(
                "PGSSLMODE={value} in the environment is not a sslmode this store supports: \
                 use disable, prefer, require, verify-ca or verify-full"
            ))
        })?);
    }
    if let Some(value) = env("PGSSLROOTCERT").filter(|_| !set("sslrootcert")) {
        taken.push(("PGSSLROOTCERT".into(), value));
    }
    for (key, value) in taken {
        match key.as_str() {
            "sslmode" => tls.mode = Some(Mode::parse(&value)?),
            "sslrootcert" | "PGSSLROOTCERT" if value == "system" => {
                return Err(refused(&format!(
                    "{key}=system is not supported: name the CA's PEM file"
                )));
            }
            "sslrootcert" | "PGSSLROOTCERT" => tls.root = Some(PathBuf::from(value)),
            other => {
                return Err(refused(&format!(
                    "{other} is not supported: the store does not present client certificates"
                )));
            }
        }
    }
    Ok((rest, tls))
}

/// Under `prefer`, to a host over TCP: a hook on each new connection of the
/// pool that asks the server whether it is encrypted, and says so once, at
/// WARN, when it is not.
pub(super) fn warn_if_plain(config: &Config) -> Option<Hook> {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .filter_map(|h| match h {
            Host::Tcp(name) => Some(name.clone()),
            Host::Unix(_) => None,
        })
        .collect();
    if config.get_ssl_mode() != SslMode::Prefer || hosts.is_empty() {
        return None;
    }
    let host = Arc::new(hosts.join(","));
    let warned = Arc::new(AtomicBool::new(false));
    Some(Hook::async_fn(move |client, _| {
        let (host, warned) = (host.clone(), warned.clone());
        Box::pin(async move {
            let sql = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()";
            let plain = client
                .query_one(sql, &[])
                .await
                .is_ok_and(|row| !row.get::<_, bool>(0));
            if plain && !warned.swap(true, Ordering::SeqCst) {
                tracing::warn!(
                    host = %host,
                    "Postgres store: the connection to {host} is NOT encrypted: the server \
                     refused TLS and sslmode is prefer (the default), which then connects in \
                     plain text. Set sslmode=require or verify-full (in the URL, or PGSSLMODE) \
                     to refuse plain text, or sslmode=disable to say it is meant"
                );
            }
            Ok(())
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_taken_from_the_query_string() {
        let (rest, tls) = take(
            "postgres://u@h:5432/db?application_name=x&sslmode=verify-ca&sslrootcert=%2Ftmp%2Fca.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u@h:5432/db?application_name=x");
        assert_eq!(tls.mode, Some(Mode::VerifyCa));
        assert_eq!(tls.root, Some(PathBuf::from("/tmp/ca.pem")));

        let (rest, tls) = take("postgres://u@h/db").unwrap();
        assert_eq!(rest, "postgres://u@h/db");
        assert_eq!(tls.mode, None, "as tokio-postgres reads it: prefer");

        // The key=value form: tokio-postgres reads sslmode itself.
        let (rest, tls) = take("host=h sslmode=require user=u").unwrap();
        assert_eq!(rest, "host=h sslmode=require user=u");
        assert_eq!(tls.mode, None);
        let e = take("host=h sslmode=verify-full").unwrap_err().to_string();
        assert!(e.contains("URL form"), "{e}");
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
        assert_eq!(tls.mode, Some(Mode::VerifyCa));
        assert_eq!(tls.root, Some(PathBuf::from("/ca.pem")));

        let (_, tls) = take_with(
            "postgres://h/db?sslmode=disable&sslrootcert=/mine.pem",
            env("verify-full", "/ca.pem"),
        )
        .unwrap();
        assert_eq!(tls.mode, Some(Mode::Disable), "the URL wins");
        assert_eq!(tls.root, Some(PathBuf::from("/mine.pem")));
        let (_, tls) = take_with("host=h sslmode=disable", env("verify-full", "")).unwrap();
        assert_eq!(tls.mode, None, "the URL wins in the key=value form too");

        let (_, tls) = take_with("postgres://u@h/db", env("", "")).unwrap();
        assert_eq!((tls.mode, tls.root), (None, None), "empty is unset");

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
            (
                "postgres://h/db?sslmode=allow",
                "sslmode=allow is not supported",
            ),
            ("postgres://h/db?sslrootcert=system", "sslrootcert=system"),
            ("postgres://h/db?sslcert=/c.pem", "sslcert is not supported"),
        ] {
            let e = take(url).unwrap_err().to_string();
            assert!(e.contains(named), "{url}: {e}");
        }
    }
}
