//! The settings of the transports: [`HttpOptions`] and [`StdioOptions`].

use std::time::Duration;

/// Settings of the Streamable HTTP transport ([`TaskServerBuilder::http`](crate::mcp::TaskServerBuilder::http)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HttpOptions {
    /// The endpoint path (default `/mcp`).
    pub path: String,
    /// Reject `tasks/*` requests that omit `Mcp-Name` (default `false`: fill
    /// it in from the body; a header that contradicts the body is always
    /// rejected).
    pub strict_headers: bool,
    /// Accepted `Host` values (default: loopback names only, against DNS
    /// rebinding). Set your public host names when serving beyond loopback.
    pub allowed_hosts: Vec<String>,
    /// Accepted browser `Origin`s (default: loopback origins on any port);
    /// a request with another `Origin` gets HTTP 403.
    pub allowed_origins: Vec<String>,
    /// Largest request body accepted, in bytes (default 4 MiB).
    pub max_body_bytes: usize,
    /// How long a client may take to send a request's headers (default
    /// 10 s), counted from when the server starts waiting for them: on a new
    /// connection, and between requests on a kept-alive one, so it is also
    /// how long an idle connection stays open. hyper's
    /// `header_read_timeout`, which has one timer for both; past it the
    /// connection is closed.
    pub header_read_timeout: Duration,
    /// How long a request's whole body may take to arrive, counted from
    /// when its headers were read (default 120 s): a deadline, not a
    /// timeout between chunks, so a body that trickles in a byte at a time
    /// is cut as surely as one that stalls. Past it the request is answered
    /// `408 Request Timeout`, with a message naming `body_read_timeout`,
    /// and the connection is closed. At the default, a body of
    /// [`max_body_bytes`](Self::max_body_bytes) (4 MiB) needs at least
    /// 35 KB/s (about 280 kbit/s) to arrive whole. A body that declares its
    /// length (`Content-Length`) gets less when it is short: 5 s plus 1 s
    /// per 32 KiB declared (a 1 KB request, 5 s), so that a short body sent
    /// a byte at a time frees its connection within seconds.
    pub body_read_timeout: Duration,
    /// How many connections are served at once (default 1024). The rest
    /// wait, unaccepted, in the listener's backlog until one closes; with
    /// the timeouts above, a stalled client frees its place in bounded time.
    /// Only [`serve`](crate::mcp::serve) applies it (a
    /// [`router`](crate::mcp::router) embedded in another server is served by that server).
    pub max_connections: usize,
    /// How many connections one client address may hold open at once
    /// (default 128; every loopback address together, 4 times as many).
    /// Counted when a connection is accepted, by its peer's address as
    /// every per-client limit keys it (no token is known yet): an IPv4
    /// address, an IPv6 address by its /64, every loopback address as one
    /// (see [`loopback_addresses_apart`](Self::loopback_addresses_apart)).
    /// One more is not left waiting in the backlog, where it would starve
    /// others: it is answered at once `HTTP/1.1 429 Too Many Requests`
    /// (`Connection: close`, `Retry-After: 1`, a text body naming
    /// `max_connections_per_client`) and closed, once its request's head
    /// has come (or 1 s has passed; at most 256 such answers at once, the
    /// rest are closed unanswered). Applied, like `max_connections`, by
    /// `serve` only.
    pub max_connections_per_client: usize,
    /// How many 2025-11-25 sessions one client may have open at once
    /// (default 256). A client is its principal (the
    /// [`principal`](crate::mcp::TaskServerBuilder::principal) function's
    /// answer, or the bearer token's subject under
    /// `TaskServerBuilder::auth`), otherwise its address
    /// keyed as for `max_connections_per_client` (every loopback address
    /// together gets 4 times as many). One more `initialize` is answered
    /// HTTP 429 with a JSON-RPC error naming `max_sessions_per_client`,
    /// until one closes (`DELETE`) or goes idle.
    pub max_sessions_per_client: usize,
    /// How many 2025-11-25 sessions the server holds open at once, of all
    /// clients together (default 2048). Measured (a debug build of the
    /// `demo` example, SQLite), a session costs about
    /// 51 KB of memory and 1 to 2 KB of store with small `initialize`
    /// params, and about 156 KB and 64 KB with params at
    /// [`max_initialize_bytes`](Self::max_initialize_bytes): at the
    /// default, about 100 MB of memory, at worst about 320 MB and 130 MB of
    /// store. One more `initialize` is answered HTTP 429 with
    /// `Retry-After: 1` and a JSON-RPC error naming `max_sessions`.
    pub max_sessions: usize,
    /// Counts each loopback address (127.0.0.0/8, `::1`) as a client of
    /// its own (default `false`). By default every loopback address is one
    /// client, "this machine", with 4 times the per-client caps
    /// (`max_sessions_per_client`, `max_connections_per_client`): any local
    /// process can bind another 127.x address, so counting them apart
    /// gives a local process as many budgets as it likes. Counting them
    /// apart suits tests, or a host whose local clients each have an
    /// address of their own. Either way, behind a reverse proxy on the same
    /// host every client has the proxy's address: give callers a principal
    /// there.
    pub loopback_addresses_apart: bool,
    /// How many sessions one client may open a minute (default 300, at
    /// most that many at once, then one every `60 / n` seconds). One more
    /// is answered HTTP 429 with `Retry-After` and a JSON-RPC error naming
    /// `sessions_per_minute`.
    pub sessions_per_minute: u32,
    /// Largest `initialize` params accepted, in bytes of JSON (default
    /// 64 KiB): a session keeps them in memory and in the store. A larger
    /// `initialize` is answered HTTP 400 with a `-32602` error naming
    /// `max_initialize_bytes`, and nothing is kept.
    pub max_initialize_bytes: usize,
    /// How long a session may go without a message before it is closed
    /// and its stored state deleted (default 5 minutes, rmcp's). Every
    /// message in the session renews it, the client's and the server's
    /// (the progress of a call still running keeps its session open); an
    /// open stream with nothing on it does not.
    pub session_idle_timeout: Duration,
    /// Most JSON values (scalars, arrays, objects) in one request body
    /// (default 100,000). They are counted before the body is parsed, so a
    /// body of many small values (a parsed value costs tens of bytes, its
    /// text as little as two) is refused before it costs memory: HTTP 400
    /// with a `-32600` error naming `max_json_values`.
    pub max_json_values: usize,
    /// Deepest nesting of arrays and objects in one request body (default
    /// 64): deeper is refused as [`HttpOptions::max_json_values`] is, naming
    /// `max_json_depth`.
    pub max_json_depth: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            path: "/mcp".into(),
            strict_headers: false,
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            allowed_origins: vec![
                "http://localhost:*".into(),
                "http://127.0.0.1:*".into(),
                "http://[::1]:*".into(),
                "https://localhost:*".into(),
                "https://127.0.0.1:*".into(),
            ],
            max_body_bytes: 4 * 1024 * 1024,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(120),
            max_connections: 1024,
            max_connections_per_client: 128,
            max_sessions_per_client: 256,
            max_sessions: 2048,
            loopback_addresses_apart: false,
            sessions_per_minute: 300,
            max_initialize_bytes: 64 * 1024,
            session_idle_timeout: Duration::from_secs(300),
            max_json_values: DEFAULT_MAX_JSON_VALUES,
            max_json_depth: DEFAULT_MAX_JSON_DEPTH,
        }
    }
}

/// Setters `field(value) -> Self`, each documented as setting its field;
/// those marked `at least N` raise a smaller value to `N`, and `lists`
/// take any strings.
macro_rules! setters {
    ($ty:ident { $($field:ident: $t:ty $(, at least $min:literal)?;)* } $(lists { $($list:ident,)* })?) => {
        impl $ty {
            $(
                #[doc = concat!("Sets [`", stringify!($ty), "::", stringify!($field), "`]"
                    $(, " (at least ", stringify!($min), ")")?, ".")]
                #[must_use]
                pub fn $field(mut self, value: $t) -> Self {
                    self.$field = value $(.max($min))?;
                    self
                }
            )*
            $($(
                #[doc = concat!("Replaces [`", stringify!($ty), "::", stringify!($list), "`].")]
                #[must_use]
                pub fn $list(mut self, values: impl IntoIterator<Item = impl Into<String>>) -> Self {
                    self.$list = values.into_iter().map(Into::into).collect();
                    self
                }
            )*)?
        }
    };
}

setters!(HttpOptions {
    strict_headers: bool;
    max_body_bytes: usize;
    header_read_timeout: Duration;
    body_read_timeout: Duration;
    max_connections: usize, at least 1;
    max_connections_per_client: usize, at least 1;
    max_sessions_per_client: usize, at least 1;
    max_sessions: usize, at least 1;
    loopback_addresses_apart: bool;
    sessions_per_minute: u32, at least 1;
    max_initialize_bytes: usize;
    session_idle_timeout: Duration;
    max_json_values: usize, at least 1;
    max_json_depth: usize, at least 1;
} lists {
    allowed_hosts,
    allowed_origins,
});

impl HttpOptions {
    /// Sets the endpoint path.
    #[must_use]
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }
}

/// Settings of the stdio transport ([`TaskServerBuilder::stdio`](super::TaskServerBuilder::stdio)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StdioOptions {
    /// Longest line read from stdin, in bytes, its newline not counted
    /// (default 4 MiB, as [`HttpOptions::max_body_bytes`](HttpOptions::max_body_bytes)).
    /// A longer line is not kept: the bytes past the limit are read and
    /// dropped up to its newline, the client gets a `-32600` error naming
    /// the limit (without an `id`: the message was never parsed, so its id
    /// is unknown), a warning is logged, and the next line is read as usual.
    pub max_line_bytes: usize,
    /// Most JSON values in one message (default 100,000, as
    /// [`HttpOptions::max_json_values`](HttpOptions::max_json_values)):
    /// counted before the message is parsed, so a line of many small values
    /// is refused before it costs memory. A message over it gets a `-32600`
    /// error naming `max_json_values`.
    pub max_json_values: usize,
    /// Deepest nesting of arrays and objects in one message (default 64, as
    /// [`HttpOptions::max_json_depth`](HttpOptions::max_json_depth)).
    /// A message over it gets a `-32600` error naming `max_json_depth`.
    pub max_json_depth: usize,
}

impl Default for StdioOptions {
    fn default() -> Self {
        Self {
            max_line_bytes: 4 * 1024 * 1024,
            max_json_values: DEFAULT_MAX_JSON_VALUES,
            max_json_depth: DEFAULT_MAX_JSON_DEPTH,
        }
    }
}

setters!(StdioOptions {
    max_line_bytes: usize;
    max_json_values: usize, at least 1;
    max_json_depth: usize, at least 1;
});

/// The limits on the shape of one JSON-RPC message, checked by `census`
/// before any tree of it is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::mcp) struct JsonLimits {
    /// Most JSON values (scalars, arrays and objects; keys not counted).
    pub(in crate::mcp) max_values: usize,
    /// Deepest nesting of arrays and objects (a bare scalar is depth 0).
    pub(in crate::mcp) max_depth: usize,
}

impl JsonLimits {
    /// The limits `max_values` and `max_depth`, each at least 1.
    pub(super) fn new(max_values: usize, max_depth: usize) -> Self {
        Self {
            max_values: max_values.max(1),
            max_depth: max_depth.max(1),
        }
    }
}

/// The default of `max_json_values`, for both transports.
pub(in crate::mcp) const DEFAULT_MAX_JSON_VALUES: usize = 100_000;
/// The default of `max_json_depth`, for both transports.
pub(in crate::mcp) const DEFAULT_MAX_JSON_DEPTH: usize = 64;
