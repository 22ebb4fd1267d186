//! `notifications/message`: which requests get log messages, decided in one
//! place, [`log`].
//!
//! - A 2026-07-28 request asks for them with
//!   `_meta["io.modelcontextprotocol/logLevel"]`, for itself only: without
//!   it no message is sent (core Changelog, logging), with it the messages at
//!   that level and above. Nothing another request or client did changes
//!   that (core Basic § Statelessness).
//! - A 2025-11-25 (or earlier) session sets its level with
//!   `logging/setLevel`; the level is that session's alone. Until it sets
//!   one, every message is sent.
//!
//! Each session is served by its own handler (the HTTP transport makes one
//! per session, stdio serves one client), which keeps the session's level
//! and puts it in each of the session's requests (the older era's layer,
//! feature `mcp-2025-11-25`).

#![allow(deprecated)] // Logging is deprecated by SEP-2577; sessions still use it.

use std::sync::{
    Arc,
    atomic::{AtomicU8, Ordering},
};

use rmcp::{
    RoleServer,
    model::{LoggingLevel, LoggingMessageNotificationParam},
    service::RequestContext,
};
use serde_json::Value;

/// No level set yet.
const UNSET: u8 = u8::MAX;

/// A session's `logging/setLevel` level, shared by the requests of that
/// session (a request carries it in its extensions).
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "mcp-2025-11-25"), allow(dead_code))]
pub(crate) struct SessionLevel(Arc<AtomicU8>);

impl Default for SessionLevel {
    fn default() -> Self {
        Self(Arc::new(AtomicU8::new(UNSET)))
    }
}

impl SessionLevel {
    /// Records the level the session asked for.
    #[cfg_attr(not(feature = "mcp-2025-11-25"), allow(dead_code))]
    pub(crate) fn set(&self, level: LoggingLevel) {
        self.0.store(rank(level), Ordering::Relaxed);
    }

    fn get(&self) -> Option<u8> {
        Some(self.0.load(Ordering::Relaxed)).filter(|r| *r != UNSET)
    }
}

/// A level's severity, least severe (`debug`) first.
fn rank(level: LoggingLevel) -> u8 {
    level as u8
}

/// Whether a message at `level` goes to the client of the request `cx`:
/// a 2026-07-28 request's own `logLevel` decides; a session's
/// `logging/setLevel` decides for the session's requests (every message,
/// until it sets one); otherwise nothing goes.
pub fn wants_log(cx: &RequestContext<RoleServer>, level: LoggingLevel) -> bool {
    let threshold = match (cx.meta.log_level(), cx.extensions.get::<SessionLevel>()) {
        (Some(asked), _) => Some(rank(asked)),
        (None, Some(session)) => session.get(),
        (None, None) => return false,
    };
    threshold.is_none_or(|t| rank(level) >= t)
}

/// Sends `notifications/message` at `level` from `logger` with `data` to
/// the client of the request `cx`, when [`wants_log`] says it asked for it;
/// whether it was sent.
///
/// The one way for a tool served next to the task tools (a wrapped rmcp
/// handler) to log so that each client gets what it asked for:
///
/// ```
/// use mcp_tasks_runtime::mcp;
/// use rmcp::{RoleServer, model::LoggingLevel, service::RequestContext};
///
/// # #[allow(deprecated)]
/// async fn step(cx: &RequestContext<RoleServer>) {
///     mcp::log(cx, LoggingLevel::Info, "my-tool", "halfway there".into()).await;
/// }
/// ```
pub async fn log(
    cx: &RequestContext<RoleServer>,
    level: LoggingLevel,
    logger: &str,
    data: Value,
) -> bool {
    if !wants_log(cx, level) {
        return false;
    }
    let mut params = LoggingMessageNotificationParam::new(level, data);
    params.logger = Some(logger.to_owned());
    // In a 2025-11-25 session, on this request's own POST stream.
    #[cfg(feature = "mcp-2025-11-25")]
    if let Some(parts) = cx.extensions.get::<axum::http::request::Parts>()
        && let Some(streams) = parts
            .extensions
            .get::<crate::mcp_2025::sessions::SessionStreams>()
    {
        let message = rmcp::model::ServerJsonRpcMessage::notification(
            rmcp::model::ServerNotification::LoggingMessageNotification(
                rmcp::model::Notification::new(params.clone()),
            ),
        );
        if streams.send(&cx.id, message).await {
            return true;
        }
    }
    cx.peer.notify_logging_message(params).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_rank_least_severe_first() {
        assert!(rank(LoggingLevel::Debug) < rank(LoggingLevel::Info));
        assert!(rank(LoggingLevel::Alert) < rank(LoggingLevel::Emergency));
        let session = SessionLevel::default();
        assert_eq!(session.get(), None);
        session.set(LoggingLevel::Warning);
        assert_eq!(session.get(), Some(rank(LoggingLevel::Warning)));
    }
}
