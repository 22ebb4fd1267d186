//! Who makes an HTTP request ([`Client`]), for every per-client limit and
//! for the binding of tasks and sessions.

use std::sync::Arc;

use axum::http::request::Parts;

use crate::engine::LOOPBACK_FACTOR;

/// Names the caller of an HTTP request from its head (see
/// [`TaskServerBuilder::principal`](super::TaskServerBuilder::principal)).
pub(crate) type PrincipalFn = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

/// Who makes an HTTP request, for every per-client limit and for the
/// binding of sessions: the principal (the principal function's answer, else
/// the bearer token's subject under [`auth`](super::TaskServerBuilder::auth));
/// without one, the peer's address as
/// [`address_key`](crate::engine::address_key) keys it (IPv6 by its /64,
/// every loopback address together unless counted apart).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Client {
    /// The principal function's answer, or a verified token's `sub`.
    Principal(String),
    /// No principal: the peer's address, keyed.
    Addr(std::net::IpAddr),
    /// No principal, on a loopback address, loopback addresses counted
    /// together: this machine, with [`LOOPBACK_FACTOR`] times the budget.
    Local,
    /// Neither is known (a router served without `ConnectInfo`).
    Unknown,
}

/// The address the engine counts a request's creates by, when it has no
/// principal: the request's [`Client`] address (loopback addresses as one,
/// `127.0.0.1`, unless counted apart), put in the request's extensions by
/// the HTTP edge for `wire::client_addr`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientAddress(pub(crate) std::net::IpAddr);

/// How the HTTP edge tells clients apart (see [`Client`]).
#[derive(Clone)]
pub(crate) struct Clients {
    pub(crate) principal: Option<PrincipalFn>,
    pub(crate) loopback_apart: bool,
}

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clients")
            .field("principal", &self.principal.is_some())
            .field("loopback_apart", &self.loopback_apart)
            .finish()
    }
}

impl Clients {
    /// The client of an HTTP request, from its head.
    pub(crate) fn of(&self, parts: &Parts) -> Client {
        if let Some(who) = &self.principal {
            if let Some(p) = who(parts) {
                return Client::Principal(p);
            }
        } else {
            #[cfg(feature = "jwt")]
            if let Some(token) = parts.extensions.get::<crate::auth::VerifiedToken>() {
                return Client::Principal(token.subject.clone());
            }
        }
        parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map_or(Client::Unknown, |info| self.of_addr(info.0.ip()))
    }

    /// The client at `ip`, without a principal (a connection, before any
    /// request is read).
    pub(crate) fn of_addr(&self, ip: std::net::IpAddr) -> Client {
        let key = crate::engine::address_key(ip, self.loopback_apart);
        if !self.loopback_apart && key.is_loopback() {
            Client::Local
        } else {
            Client::Addr(key)
        }
    }
}

impl Client {
    /// A per-client cap of `cap`, for this client: [`LOOPBACK_FACTOR`]
    /// times it for this machine's loopback addresses together.
    pub(crate) fn cap(&self, cap: usize) -> usize {
        match self {
            Self::Local => cap.saturating_mul(LOOPBACK_FACTOR),
            _ => cap,
        }
    }

    /// The address the engine counts creates by (none for a principal).
    pub(crate) fn address(&self) -> Option<std::net::IpAddr> {
        match self {
            Self::Addr(ip) => Some(*ip),
            Self::Local => Some(std::net::Ipv4Addr::LOCALHOST.into()),
            Self::Principal(_) | Self::Unknown => None,
        }
    }
}

/// What 2025-11-25 sessions ask of their owners.
#[cfg(feature = "mcp-2025-11-25")]
impl Client {
    /// Whether a session opened by `self` may be used by `other`: with a
    /// principal only by the same principal; without, by anyone who holds
    /// its id (an address is no identity: clients behind one NAT share it,
    /// and one client may change it).
    pub(crate) fn may_use(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Principal(_), _) | (_, Self::Principal(_)) => self == other,
            _ => true,
        }
    }

    /// How the session's stored state names its owner (principals only).
    pub(crate) fn stored(&self) -> Option<&str> {
        match self {
            Self::Principal(p) => Some(p),
            _ => None,
        }
    }
}
