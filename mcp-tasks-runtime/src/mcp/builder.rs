//! [`TaskServerBuilder`]: the server's settings, fixed when it is built.

use std::{sync::Arc, time::Duration};

use axum::http::request::Parts;
use rmcp::{ServerHandler, model::Implementation};

use super::{
    options::{HttpOptions, StdioOptions},
    server::{NoExtras, Settings, TaskServer},
};
use crate::{
    engine::Engine,
    request_state::{RequestStateKey, RequestStateKeyError},
};

/// Builds a [`TaskServer`]: made by [`TaskServer::builder`].
#[must_use = "a builder does nothing until `build` is called"]
pub struct TaskServerBuilder<H = NoExtras> {
    engine: Engine,
    extra: H,
    settings: Settings,
}

impl<H> std::fmt::Debug for TaskServerBuilder<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskServerBuilder").finish_non_exhaustive()
    }
}

impl TaskServer {
    /// A server for `engine`'s tools and nothing else.
    ///
    /// # Panics
    ///
    /// When the operating system's random number generator fails while
    /// drawing the default `requestState` key.
    pub fn builder(engine: Engine) -> TaskServerBuilder {
        let settings = Settings::new(engine.registry());
        TaskServerBuilder {
            engine,
            extra: NoExtras,
            settings,
        }
    }

    /// A server with default settings.
    ///
    /// # Panics
    ///
    /// As [`TaskServer::builder`].
    pub fn new(engine: Engine) -> Self {
        Self::builder(engine).build()
    }
}

impl<H> TaskServerBuilder<H> {
    /// Also serves `handler`'s tools, prompts, resources and completions.
    pub fn extras<H2: ServerHandler>(self, handler: H2) -> TaskServerBuilder<H2> {
        TaskServerBuilder {
            engine: self.engine,
            extra: handler,
            settings: self.settings,
        }
    }

    /// The `serverInfo` name and version.
    pub fn name(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.settings.info = Some(Implementation::new(name, version));
        self
    }

    /// The `instructions` in `server/discover`.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.settings.instructions = Some(text.into());
        self
    }

    /// Runs a task-capable call inline for up to `window` before answering
    /// (default zero: answer with the task at once). A call that finishes in
    /// the window gets its plain result; a question asked in the window is
    /// answered in MRTR style (`InputRequiredResult`); otherwise the client
    /// gets, when the window ends, the `CreateTaskResult` of the same
    /// execution, whose steps in flight then go on running as the task's:
    /// nothing runs twice, and nobody waits for a long step past the window.
    /// A question asked in flight
    /// ([`ask_in_flight`](crate::durable::ask_in_flight)) ends the window at
    /// once.
    pub fn inline_window(mut self, window: Duration) -> Self {
        self.settings.inline_window = window;
        self
    }

    /// The inline window for one tool, overriding [`Self::inline_window`].
    pub fn tool_inline_window(mut self, tool: impl Into<String>, window: Duration) -> Self {
        self.settings.tool_windows.insert(tool.into(), window);
        self
    }

    /// The key that encrypts and authenticates MRTR `requestState`
    /// (XChaCha20-Poly1305): 32 random bytes written as 64 hex digits or in
    /// base64 (`openssl rand -hex 32`). Servers that share clients (several
    /// instances, or restarts in the middle of a question) must share it; by
    /// default each process draws a random one.
    ///
    /// ```
    /// # use mcp_tasks_runtime::{Engine, mcp::TaskServer, store::MemoryStore, tool::Registry};
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// # let engine = Engine::builder(MemoryStore::new()).registry(Registry::new()).start().await?;
    /// let server = TaskServer::builder(engine)
    ///     .request_state_key("9f0e4c1d2b3a4f5e6d7c8b9a0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c")?
    ///     .build();
    /// # let _ = server;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`RequestStateKeyError`] when `key` is not 32 bytes in hex or base64 (a
    /// passphrase, say), so that a server refuses to start with a weak key.
    pub fn request_state_key(mut self, key: impl AsRef<str>) -> Result<Self, RequestStateKeyError> {
        let key = RequestStateKey::parse(key.as_ref())?;
        self.settings.sealer.seal_with(&key);
        Ok(self)
    }

    /// An earlier `requestState` key, still accepted for reading (states it
    /// sealed open for the rest of their hour) but no longer used to seal:
    /// rotate by moving the current key here and setting a new one with
    /// [`Self::request_state_key`]. May be given several times.
    ///
    /// # Errors
    ///
    /// As [`Self::request_state_key`].
    pub fn old_request_state_key(
        mut self,
        key: impl AsRef<str>,
    ) -> Result<Self, RequestStateKeyError> {
        let key = RequestStateKey::parse(key.as_ref())?;
        self.settings.sealer.open_also(&key);
        Ok(self)
    }

    /// Names the caller of each HTTP request from its head (`who` gets the
    /// request's [`Parts`]: its headers, and the extensions your own HTTP
    /// layer put there): a custom scheme, such as the peer identity that
    /// layer verified (never a header the client chooses). `who` is asked
    /// at the HTTP edge, before anything else reads the request, and its
    /// answer is the caller for every per-client limit and binding:
    ///
    /// - each task is bound to the principal of the request that created it,
    ///   and is invisible — "not found" — to any other principal (and a task
    ///   created without one to every caller that has one);
    /// - each 2025-11-25 session belongs to the principal that opened it (a
    ///   request in it under another is answered HTTP 404, as for an unknown
    ///   session), and sessions are counted per principal
    ///   ([`HttpOptions::max_sessions_per_client`](super::HttpOptions::max_sessions_per_client));
    /// - creates and unfinished tasks count per principal
    ///   ([`Limits`](crate::engine::Limits)).
    ///
    /// When `who` answers `None`, the caller is its address, as without a
    /// principal function. Without this or `auth` (feature `jwt`), the task
    /// id is the only secret. Over stdio there is no HTTP request, so no
    /// principal.
    ///
    /// With `auth` too, `who` decides (tokens are still checked first); it
    /// finds the token's claims as a `mcp::VerifiedToken` in the request's
    /// extensions, to name callers by a claim other than `sub`.
    ///
    /// ```
    /// # use mcp_tasks_runtime::{Engine, mcp::TaskServer, store::MemoryStore, tool::Registry};
    /// # #[derive(Clone)] struct PeerIdentity(String);
    /// # async fn run() -> mcp_tasks_runtime::Result<()> {
    /// # let engine = Engine::builder(MemoryStore::new()).registry(Registry::new()).start().await?;
    /// let server = TaskServer::builder(engine)
    ///     .principal(|parts: &axum::http::request::Parts| {
    ///         // Put there by your own HTTP layer, after checking the peer.
    ///         parts.extensions.get::<PeerIdentity>().map(|p| p.0.clone())
    ///     })
    ///     .build();
    /// # let _ = server;
    /// # Ok(())
    /// # }
    /// ```
    pub fn principal(
        mut self,
        who: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.settings.principal = Some(Arc::new(who));
        self
    }

    /// Requires a valid bearer token (a JWT, checked by `auth`) on every
    /// HTTP request, and binds each task to the token's `sub`: requests
    /// without one get `401` with `WWW-Authenticate: Bearer
    /// resource_metadata="…"`, and the Protected Resource Metadata is
    /// served at `/.well-known/oauth-protected-resource`. Over stdio (the
    /// local user's own process) there is no token and no principal.
    ///
    /// ```
    /// # use mcp_tasks_runtime::{Engine, store::MemoryStore, tool::Registry};
    /// use mcp_tasks_runtime::mcp::{Jwks, JwtAuth, TaskServer};
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// # let engine = Engine::builder(MemoryStore::new()).registry(Registry::new()).start().await?;
    /// let server = TaskServer::builder(engine)
    ///     .auth(JwtAuth::new(
    ///         "https://login.example.com/",
    ///         "https://tasks.example.com/mcp",
    ///         Jwks::url("https://login.example.com/.well-known/jwks.json")?,
    ///     ))
    ///     .build();
    /// # let _ = server;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "jwt")]
    pub fn auth(mut self, auth: crate::auth::JwtAuth) -> Self {
        self.settings.auth = Some(auth);
        self
    }

    /// The Streamable HTTP transport's settings (see [`HttpOptions`]), for
    /// [`serve`](super::serve) and [`router`](super::router).
    pub fn http(mut self, options: HttpOptions) -> Self {
        self.settings.http = options;
        self
    }

    /// The stdio transport's settings (see [`StdioOptions`]), for
    /// [`serve_stdio`](super::serve_stdio).
    pub fn stdio(mut self, options: StdioOptions) -> Self {
        self.settings.stdio = options;
        self
    }

    /// How long running steps may take to finish once a graceful shutdown
    /// begins (default 30 s; see [`Serve`](super::Serve)). Past it the
    /// engine gives up its tasks anyway: each resumes from its journal.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.settings.drain_timeout = timeout;
        self
    }

    /// Builds the server.
    pub fn build(self) -> TaskServer<H> {
        TaskServer::new_with(self.engine, self.extra, self.settings)
    }
}
