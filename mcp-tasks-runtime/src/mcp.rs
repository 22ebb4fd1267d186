//! The MCP front door: serves the engine's task tools to MCP clients over rmcp,
//! the official Rust SDK, which provides JSON-RPC, `server/discover`, the
//! 2026-07-28 per-request `_meta` and version checks, and both transports.
//!
//! | method | what [`TaskServer`] does | wire rules |
//! |---|---|---|
//! | `server/discover` | advertises `tools` with `listChanged: true` (see [Tool list changes](#tool-list-changes)) and `extensions["io.modelcontextprotocol/tasks"] = {}` merged into the wrapped handler's capabilities, less its prompts' and resources' `listChanged` and `resources.subscribe` (2026-07-28 delivers those through `subscriptions/listen`, which serves task ids and the engine's tool list only; `initialize` keeps them for sessions) | core Discover; tasks ext. § Capability Negotiation |
//! | `tools/list` | the wrapped handler's tools followed by the engine's tools as they are now (sorted) | core Tools (`tools/list`) |
//! | `tools/call` | arguments are checked first: bad ones are a tool error (`isError: true`, its text naming the field) and no task is created; an unknown tool, or params that are no `tools/call` (no `name`, `arguments` not an object), `-32602`; a declaring request to a task-capable tool gets a `CreateTaskResult` once the task is durable; otherwise the tool runs inline, and a question becomes an MRTR `InputRequiredResult` whose `requestState` carries the journal encrypted and authenticated (XChaCha20-Poly1305), good for one retry, whose `inputResponses` count only for the keys that round asked (others, and a first call's, are ignored); a `required` tool without the extension gets `-32021` | tasks ext. § Capability Negotiation, § Task Creation; core MRTR (`requestState`) |
//! | `tasks/get` | the task's current `DetailedTask` with `resultType: "complete"`, its `inputRequests` only those the poll's declared capabilities can answer (the same for `notifications/tasks` and the listen request's); unknown or expired ids `-32602` | tasks ext. `tasks/get`, § Input Requests |
//! | `tasks/update` | journals answers to outstanding keys, ignores the rest, acks `{"resultType":"complete"}`; no `taskId`, or `inputResponses` missing or not an object, `-32602` | tasks ext. `tasks/update` |
//! | `tasks/cancel` | requests cancellation, acks `{"resultType":"complete"}` (also for finished tasks) | tasks ext. `tasks/cancel` |
//! | `subscriptions/listen` | with `notifications.taskIds`: the acknowledgement (ids agreed to; unknown and foreign ids left out), each task's state, then a `notifications/tasks` per change, the terminal one included; with `notifications.toolsListChanged: true`: a `notifications/tools/list_changed` whenever the engine's tools change, the stream staying open for it; the other types (prompts, resources) are left out of the acknowledgement and never sent; every message carries the subscription id; SSE over HTTP, the connection over stdio; `taskIds` without the extension `-32021`; malformed params `-32602`; a graceful end answers the request (see `listen`) | tasks ext. § Notifications; core Subscriptions |
//! | `tasks/result`, `tasks/list` | `-32601` (rmcp answers unknown methods) | tasks ext. SEP-2663, backward compatibility (removed methods) |
//! | `initialize`, `ping`, `logging/setLevel`, `resources/subscribe\|unsubscribe` in a 2026-07-28 request | `-32601` (HTTP 404), whatever the params, and no session is opened; served in sessions | core Changelog (removed methods) |
//! | `notifications/message` | sent by [`log`]: to a 2026-07-28 request only when its `_meta` names a `logLevel`, at that level and above; to a session at the level its `logging/setLevel` chose (each session its own) | core Basic § Statelessness; core Changelog (logging) |
//! | a known method whose params do not fit it | `-32602` naming the problem, not `-32601` (`malformed`) | tasks ext. § Task Creation; core MRTR § Error Handling |
//! | anything else | the wrapped handler (prompts, resources, completions, its own tools; in a session also `logging/setLevel` and `resources/subscribe\|unsubscribe`) | |
//!
//! rmcp checks the tasks capability on `tasks/*` before the handler runs
//! (`-32021` before any id lookup, tasks ext. § Error Handling), and refuses
//! to send a `CreateTaskResult` to a request that did not declare the
//! extension (tasks ext. § Capability Negotiation).
//!
//! Every result to a 2026-07-28 request carries
//! `_meta["io.modelcontextprotocol/serverInfo"]` (core Basic § `_meta`),
//! added by the transport. Over HTTP, a body that is not one JSON-RPC message
//! gets `-32700` or `-32600` (HTTP 400), one whose `params` is not an object
//! `-32602` (HTTP 400; without an `id` for a notification), and a request
//! outside a session that names no protocol version at all `-32602` (HTTP
//! 400), or `-32022` when its header names one the server does not serve
//! (core Basic § `_meta`, Versioning, Streamable HTTP; see `envelope`). Over
//! stdio the same lines get the same errors (a malformed notification is only
//! logged), and a line is read within [`StdioOptions::max_line_bytes`].
//!
//! Clients of 2025-11-25 and earlier (sessions opened with `initialize`,
//! plain calls, that revision's tasks) are served too with the
//! `mcp-2025-11-25` feature, on by default; without it, 2026-07-28 only.
//!
//! # Tool list changes
//!
//! The engine's tools may be replaced while it serves
//! ([`Engine::set_registry`](crate::Engine::set_registry)), so every server
//! declares `tools.listChanged: true`, in `server/discover` and in
//! `initialize`; one whose tools never change never sends the notification.
//! `tools/list` and `tools/call` see the new tools at once, and each client
//! hears of a change that it can see (a tool added, removed or defined
//! anew):
//!
//! - a 2026-07-28 client on a `subscriptions/listen` stream that asked for
//!   `toolsListChanged`, as `notifications/tools/list_changed` carrying the
//!   subscription id. Without a principal, such streams count per client
//!   address against [`Limits::max_listens_per_principal`](crate::engine::Limits::max_listens_per_principal);
//! - a session of 2025-11-25 or earlier, as `notifications/tools/list_changed`
//!   on its standalone GET stream (Streamable HTTP; a session with none open
//!   misses it) or on the connection (stdio), from the moment its client
//!   sent `notifications/initialized`.
//!
//! Several changes in a row may make one notification; none is queued per
//! client (each stream or session waits for the latest set, and a session
//! that does not take its notification within 5 s is passed over). The
//! wrapped handler's own tools are its to announce, in sessions; a listen
//! stream does not carry them.
//!
//! # Why the HTTP transport is wrapped
//!
//! rmcp's Streamable HTTP server requires an `Mcp-Name` header equal to
//! `params.taskId` on `tasks/get|update|cancel`. Widely used clients omit that
//! header (the id is only in the body), so by default [`serve`] fills in a
//! *missing* `Mcp-Name` from the body before rmcp sees the request. A header
//! that is present and contradicts the body is left alone, so rmcp still
//! rejects it (`-32020`, HTTP 400). [`HttpOptions::strict_headers`] turns the
//! filling off. This is the narrowest point: one middleware on the POST body,
//! nothing else changed.

mod builder;
mod envelope;
mod http;
pub(crate) mod listen;
pub(crate) mod logging;
pub(crate) mod malformed;
pub(crate) mod options;
pub(crate) mod peer;
mod serve;
pub(crate) mod server;
mod stdio;
pub(crate) mod tool_call;
pub(crate) mod wire;

#[cfg(feature = "jwt")]
pub use crate::auth::{AuthError, Jwks, JwtAuth, VerifiedToken};
pub use crate::request_state::{RequestStateKey, RequestStateKeyError};
pub use builder::TaskServerBuilder;
#[cfg(feature = "admin")]
pub(crate) use http::HostCheck;
pub use http::router;
pub use listen::MAX_LISTEN_IDS;
pub use logging::{log, wants_log};
pub use options::{HttpOptions, StdioOptions};
pub use serve::{Serve, serve, serve_stdio};
pub use server::{NoExtras, TaskServer};

/// The result a tool returns to shape its `CallToolResult` by hand: content
/// blocks, `structuredContent`, `isError`. rmcp's type, re-exported here
/// (see the crate docs' semver policy).
pub use rmcp::model::CallToolResult;
