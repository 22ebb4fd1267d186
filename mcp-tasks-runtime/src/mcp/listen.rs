//! Push: `subscriptions/listen` with `notifications.taskIds`, and the
//! `notifications/tasks` it streams (tasks ext. § Notifications; core
//! Subscriptions); with `notifications.toolsListChanged`, the
//! `notifications/tools/list_changed` of the engine's tools.
//!
//! # Why the request is renamed at the edge
//!
//! rmcp 3.11 serves `subscriptions/listen` itself, through its
//! `SubscriptionFilter`, which has no `taskIds`: the ids are dropped when the
//! request is typed, and the acknowledgement rmcp sends is built from what is
//! left. A handler cannot add them back. So the edge of each transport
//! ([`rename`], called by the HTTP body edge and by the stdio reader, the two
//! places that see a request as JSON before rmcp types it) renames a
//! 2026-07-28 `subscriptions/listen` to a method of our own ([`METHOD`]). The
//! request then takes rmcp's ordinary path, with every check rmcp makes on a
//! request (Host and Origin, the version header and `_meta`, the
//! `Mcp-Method` header, which the HTTP edge renames with the body), and
//! reaches [`TaskServer`](super::TaskServer) as a custom request, served by
//! [`Listen::serve`]. Nothing of rmcp's is copied.
//!
//! The stream is rmcp's too. Over Streamable HTTP, a handler that sends a
//! notification before its result turns the answer into an SSE stream, with
//! keep-alive comments, and a client that closes the stream cancels the
//! request. Over stdio, the notifications share the connection, and
//! `notifications/cancelled` with the listen request's id cancels it.
//!
//! # What the stream carries
//!
//! - First, the acknowledgement: `notifications/subscriptions/acknowledged`
//!   listing the ids agreed to, and `toolsListChanged: true` when asked for.
//!   Unknown ids, expired ones and another principal's are left out, never
//!   confirmed (A15); so are the types this server does not send (prompt and
//!   resource changes), and `taskIds` when none were named.
//! - Then, for each agreed id, a `notifications/tasks` with the task as it
//!   is when the listen begins, so a client never misses a change made
//!   between its last `tasks/get` and the listen; after that, one on every
//!   change a `tasks/get` would show (its status, the terminal one included;
//!   a new question; a new status message). Each is the complete
//!   `DetailedTask`, as `tasks/get` shows it, less `resultType`. A task
//!   whose time to live runs out is gone (`tasks/get` says "not found"):
//!   nothing is sent for it, and it is no longer followed.
//! - Every message carries `_meta["io.modelcontextprotocol/subscriptionId"]`,
//!   the listen request's id.
//! - When asked for, a `notifications/tools/list_changed` (its params only
//!   the subscription id) each time the engine's tools change as a client
//!   sees them ([`Engine::set_registry`](crate::Engine::set_registry));
//!   changes made before the stream sends the last one make one more.
//! - Once every task it follows has ended (its terminal notification sent),
//!   nothing more can come: the stream ends, and so does a stream that
//!   follows no task; a stream that follows the tool list stays open until
//!   its client or the server ends it. Ending gracefully answers the listen
//!   request with `{"resultType":"complete"}` and the subscription id, as
//!   [`TaskServer::close_listeners`](super::TaskServer::close_listeners) does for every stream at shutdown.
//!
//! Task notifications are not advertised: the tasks extension's capability
//! is `{}` (tasks ext. § Capability Negotiation) and the core capabilities
//! have no entry for them, so a client learns that push is served by asking.
//! A server without it answers `-32601`, and the client polls (as
//! `TaskClient` does). Tool list changes are: `tools.listChanged`.
//!
//! Changes reach the stream from the engine's watch: in this process
//! directly, and from other instances through the store's change feed
//! (Postgres). Nothing of a listener is kept once it goes away.

mod listeners;

use std::{collections::HashSet, sync::Arc};

use futures::{FutureExt as _, StreamExt as _, stream::FuturesUnordered};
use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{
        ClientCapabilities, CustomNotification, CustomRequest, CustomResult, Implementation,
        ServerNotification,
    },
    service::RequestContext,
};
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use self::listeners::Holder;
pub(super) use self::listeners::{Counted, Listeners};
use super::{envelope::SERVER_INFO, wire};
use crate::{
    Error,
    input::InputCapabilities,
    store::{TaskRecord, TaskStatus},
    tool::Registry,
};

/// The spec's name for the request.
pub(crate) const SPEC_METHOD: &str = "subscriptions/listen";

/// Our name for a 2026-07-28 `subscriptions/listen`, given at the edge.
pub(crate) const METHOD: &str = "mcp-tasks/subscriptions/listen";

/// The notification of a change of the tool list.
const TOOLS_CHANGED: &str = "notifications/tools/list_changed";

/// The key every message of a stream carries in `_meta`.
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The most task ids one listen request may name.
pub const MAX_LISTEN_IDS: usize = 1024;

/// Renames a `subscriptions/listen` request (JSON-RPC, as received) to
/// [`METHOD`]; returns whether it did. The caller leaves a 2025-11-25
/// session's requests alone: that era has no `subscriptions/listen`, and
/// rmcp answers them `-32601`.
pub(crate) fn rename(message: &mut Value) -> bool {
    let Some(obj) = message.as_object_mut() else {
        return false;
    };
    if obj.get("method").and_then(Value::as_str) != Some(SPEC_METHOD) {
        return false;
    }
    obj.insert("method".into(), json!(METHOD));
    true
}

/// What a listen request asks for.
struct Requested {
    /// The task ids it names, in order, without repeats (`None`: it names
    /// none).
    task_ids: Option<Vec<String>>,
    /// Whether it asks for `notifications/tools/list_changed`.
    tools: bool,
}

/// What a listen request asks for; the notification types this server does
/// not send (prompt and resource changes) are left out, as the
/// acknowledgement leaves them out.
fn requested(request: &CustomRequest) -> Result<Requested, McpError> {
    let invalid = |message: &str| McpError::invalid_params(message.to_owned(), None);
    let params = match &request.params {
        Some(Value::Object(params)) => params,
        None | Some(Value::Null) => {
            return Err(invalid(
                "subscriptions/listen: params.notifications is required (an object)",
            ));
        }
        Some(_) => return Err(invalid("subscriptions/listen: params must be an object")),
    };
    let filter = match params.get("notifications") {
        Some(Value::Object(filter)) => filter,
        Some(_) => {
            return Err(invalid(
                "subscriptions/listen: params.notifications must be an object",
            ));
        }
        None => {
            return Err(invalid(
                "subscriptions/listen: params.notifications is required (an object)",
            ));
        }
    };
    let tools = match filter.get("toolsListChanged") {
        None => false,
        Some(Value::Bool(tools)) => *tools,
        Some(_) => {
            return Err(invalid(
                "subscriptions/listen: notifications.toolsListChanged must be a boolean",
            ));
        }
    };
    let ids = match filter.get("taskIds") {
        None => {
            return Ok(Requested {
                task_ids: None,
                tools,
            });
        }
        Some(Value::Array(ids)) => ids,
        Some(_) => {
            return Err(invalid(
                "subscriptions/listen: notifications.taskIds must be an array of task ids",
            ));
        }
    };
    if ids.len() > MAX_LISTEN_IDS {
        return Err(McpError::invalid_params(
            format!(
                "subscriptions/listen: notifications.taskIds names {} tasks, over the limit \
                 of {MAX_LISTEN_IDS} per listen request",
                ids.len()
            ),
            None,
        ));
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(ids.len());
    for (i, id) in ids.iter().enumerate() {
        let Some(id) = id.as_str() else {
            return Err(McpError::invalid_params(
                format!("subscriptions/listen: notifications.taskIds[{i}] must be a string"),
                None,
            ));
        };
        if seen.insert(id) {
            out.push(id.to_owned());
        }
    }
    Ok(Requested {
        task_ids: Some(out),
        tools,
    })
}

/// `notifications/tasks` params for `record`: the `DetailedTask` as
/// `tasks/get` shows it to the listen request (`shown`: the questions its
/// client declared it can answer, tasks ext. § Input Requests), less
/// `resultType`, with the subscription id.
fn task_params(
    record: &TaskRecord,
    subscription: &Value,
    shown: InputCapabilities,
) -> Result<Value, McpError> {
    let detailed = wire::detailed(record.clone(), shown)?;
    let mut params = match serde_json::to_value(&detailed) {
        Ok(Value::Object(map)) => map,
        Ok(_) | Err(_) => {
            return Err(McpError::internal_error(
                "a task could not be written as JSON",
                None,
            ));
        }
    };
    params.remove("resultType");
    params.insert("_meta".into(), json!({ SUBSCRIPTION_ID: subscription }));
    let mut params = Value::Object(params);
    wire::drop_empty_elicitation_ids(&mut params);
    Ok(params)
}

/// Set by the HTTP edge when the client closes a listen stream: the handler
/// then returns, and its answer is written to a stream no one reads (the
/// edge drains it), rather than rmcp cancelling the request and logging
/// that it could not deliver the answer. A listen always ends that way.
#[derive(Debug, Clone, Default)]
pub(super) struct StreamEnd(Arc<watch::Sender<bool>>);

impl StreamEnd {
    pub(super) fn fire(&self) {
        self.0.send_replace(true);
    }

    async fn fired(&self) {
        let mut rx = self.0.subscribe();
        if rx.wait_for(|fired| *fired).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Waits until the HTTP client closes the stream (never, over stdio).
async fn client_closed(cx: &RequestContext<RoleServer>) {
    let end = cx
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<StreamEnd>())
        .cloned();
    match end {
        Some(end) => end.fired().await,
        None => std::future::pending().await,
    }
}

/// Waits until the server closes its listeners.
async fn until_closing(closing: &mut watch::Receiver<bool>) {
    if closing.wait_for(|closing| *closing).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Waits for the next change of one watched task.
async fn next_change(
    id: String,
    mut rx: tokio::sync::watch::Receiver<TaskRecord>,
) -> (String, Option<tokio::sync::watch::Receiver<TaskRecord>>) {
    match rx.changed().await {
        Ok(()) => (id, Some(rx)),
        Err(_) => (id, None),
    }
}

/// Waits until the tools a client sees change (never, for a stream that
/// did not ask, or once the engine is gone).
async fn tools_changed(tools: &mut Option<watch::Receiver<Arc<Registry>>>) {
    if let Some(rx) = tools
        && rx.changed().await.is_ok()
    {
        return;
    }
    std::future::pending().await
}

/// What a listen stream needs of its server.
pub(super) struct Listen<'a> {
    pub(super) engine: &'a crate::Engine,
    pub(super) listeners: &'a Arc<Listeners>,
    pub(super) server_info: Implementation,
}

impl Listen<'_> {
    /// Serves one `subscriptions/listen` of `principal`'s until the client
    /// ends it or the server closes its listeners.
    pub(super) async fn serve(
        &self,
        request: &CustomRequest,
        cx: &RequestContext<RoleServer>,
        principal: Option<String>,
    ) -> Result<CustomResult, McpError> {
        let Requested { task_ids, tools } = requested(request)?;
        if task_ids.is_some() && !wire::caller(cx).tasks {
            return Err(McpError::missing_required_client_capability(
                ClientCapabilities::builder().enable_tasks().build(),
            ));
        }
        let mut closing = self.listeners.closing.subscribe();
        let subscription = serde_json::to_value(&cx.id).unwrap_or(Value::Null);
        let engine = self.engine;

        // Watch before reading, so no change falls between the two.
        let tools = tools.then(|| engine.watch_registry());
        let mut watched = Vec::new();
        let named = task_ids.is_some();
        for id in self.known(task_ids.unwrap_or_default()).await? {
            match engine.subscribe(&id, principal.as_deref()).await {
                Ok(rx) => watched.push((id, rx)),
                Err(Error::TaskNotFound(_)) => {}
                Err(e) => {
                    self.forget(watched);
                    return Err(e.into());
                }
            }
        }
        let address = (tools.is_some() && principal.is_none()).then(|| wire::client_addr(cx));
        let _open = match self.count_open(principal, &watched, address) {
            Ok(open) => open,
            Err(refused) => {
                self.forget(watched);
                return Err(refused);
            }
        };
        // The types asked for and served, and nothing else (core
        // Subscriptions, acknowledgement).
        let mut agreed = Map::new();
        if named {
            let ids: Vec<&str> = watched.iter().map(|(id, _)| id.as_str()).collect();
            agreed.insert("taskIds".into(), json!(ids));
        }
        if tools.is_some() {
            agreed.insert("toolsListChanged".into(), json!(true));
        }
        let ack = json!({
            "_meta": { SUBSCRIPTION_ID: subscription },
            "notifications": agreed,
        });
        let outcome = self
            .stream(cx, &subscription, ack, &watched, tools, &mut closing)
            .await
            .map(|()| ended(&subscription, self.server_info.clone()));
        self.forget(watched);
        outcome
    }

    /// The stream after the subscriptions are made: the acknowledgement, each
    /// task's state, then its changes and those of the tool list (`tools`,
    /// when asked for).
    async fn stream(
        &self,
        cx: &RequestContext<RoleServer>,
        subscription: &Value,
        ack: Value,
        watched: &[(String, tokio::sync::watch::Receiver<TaskRecord>)],
        mut tools: Option<watch::Receiver<Arc<Registry>>>,
        closing: &mut watch::Receiver<bool>,
    ) -> Result<(), McpError> {
        let send = |method: &'static str, params: Value| {
            let peer = cx.peer.clone();
            async move {
                let notification = CustomNotification::new(method, Some(params));
                peer.send_notification(ServerNotification::CustomNotification(notification))
                    .await
                    .is_ok()
            }
        };
        if !send("notifications/subscriptions/acknowledged", ack).await {
            return Err(McpError::internal_error(
                "the listen stream closed before its acknowledgement",
                None,
            ));
        }
        let shown = wire::caller(cx).input;
        let mut last: Vec<Option<Value>> = vec![None; watched.len()];
        let mut changes = FuturesUnordered::new();
        for (i, (id, rx)) in watched.iter().enumerate() {
            // The state when the listen began.
            let record = rx.borrow().clone();
            if !record.status.is_terminal() {
                changes.push(
                    next_change(id.clone(), rx.clone())
                        .map(move |c| (i, c))
                        .boxed(),
                );
            }
            let params = task_params(&record, subscription, shown)?;
            if !send("notifications/tasks", params.clone()).await {
                return Ok(());
            }
            last[i] = Some(params);
        }
        loop {
            // Every task it follows has ended, and it does not follow the
            // tool list: nothing more can come, so the stream ends, answered.
            if changes.is_empty() && tools.is_none() {
                return Ok(());
            }
            tokio::select! {
                // An ended stream sends nothing more, even when a change
                // is ready at the same moment.
                biased;
                () = cx.ct.cancelled() => return Ok(()),
                () = client_closed(cx) => return Ok(()),
                () = until_closing(closing) => return Ok(()),
                // One notification for the changes made since the last: the
                // receiver holds the latest set, never a queue.
                () = tools_changed(&mut tools) => {
                    let params = json!({"_meta": { SUBSCRIPTION_ID: subscription }});
                    if !send(TOOLS_CHANGED, params).await {
                        return Ok(());
                    }
                }
                Some((i, (id, rx))) = changes.next() => {
                    let Some(mut rx) = rx else { continue };
                    let record = rx.borrow_and_update().clone();
                    if record.status == TaskStatus::Failed && self.purged(&id).await {
                        // Its time to live ran out and the task is gone: a
                        // `tasks/get` now says "not found", which no
                        // notification can say, so none is sent.
                        continue;
                    }
                    let params = task_params(&record, subscription, shown)?;
                    if last[i].as_ref() != Some(&params) {
                        if !send("notifications/tasks", params.clone()).await {
                            return Ok(());
                        }
                        last[i] = Some(params);
                    }
                    // A finished task changes no more.
                    if !record.status.is_terminal() {
                        changes.push(next_change(id, rx).map(move |c| (i, c)).boxed());
                    }
                }
            }
        }
    }

    /// Of the task `ids` a listen names, those the store holds, in the
    /// order named: one read for them all, however many are unknown.
    async fn known(&self, ids: Vec<String>) -> Result<Vec<String>, McpError> {
        if ids.is_empty() {
            return Ok(ids);
        }
        let stored = self.engine.store().versions(&ids).await?;
        let stored: HashSet<&str> = stored.iter().map(|(id, _)| id.as_str()).collect();
        Ok(ids
            .iter()
            .filter(|id| stored.contains(id.as_str()))
            .cloned()
            .collect())
    }

    /// Counts a listen stream of `principal`'s following `watched` (and,
    /// without a principal, the tool list for the client at `address`), as
    /// `Limits::max_listens_per_principal` and `Limits::max_listens_per_task`
    /// say, or refuses it naming the limit.
    fn count_open(
        &self,
        principal: Option<String>,
        watched: &[(String, tokio::sync::watch::Receiver<TaskRecord>)],
        address: Option<Option<std::net::IpAddr>>,
    ) -> Result<Counted, McpError> {
        let limits = self.engine.limits();
        let per_principal = limits.max_listens_per_principal;
        let holders = match principal {
            Some(principal) => vec![(Holder::Principal(principal), per_principal)],
            None => watched
                .iter()
                .map(|(id, _)| (Holder::Task(id.clone()), limits.max_listens_per_task))
                .chain(address.map(|a| (Holder::Address(a), per_principal)))
                .collect(),
        };
        self.listeners.opened(holders).map_err(|(full, max)| {
            let (limit, message) = match full {
                Holder::Principal(_) => (
                    "max_listens_per_principal",
                    format!(
                        "this caller already holds {max} open subscriptions/listen streams \
                         (max_listens_per_principal); close one, or follow several tasks on one"
                    ),
                ),
                Holder::Address(_) => (
                    "max_listens_per_principal",
                    format!(
                        "this client already holds {max} open subscriptions/listen streams \
                         that follow the tool list (max_listens_per_principal, counted by \
                         address without a principal); close one"
                    ),
                ),
                Holder::Task(id) => (
                    "max_listens_per_task",
                    format!(
                        "task {id} is already followed by {max} open subscriptions/listen \
                         streams (max_listens_per_task); close one, or follow it on one"
                    ),
                ),
            };
            McpError::from(Error::LimitExceeded {
                limit,
                message,
                retry_after_ms: None,
            })
        })
    }

    /// Whether task `id` is no longer in the store.
    async fn purged(&self, id: &str) -> bool {
        matches!(self.engine.store().get(id).await, Ok(None))
    }

    /// Drops this listener's interest in its tasks.
    fn forget(&self, watched: Vec<(String, tokio::sync::watch::Receiver<TaskRecord>)>) {
        let ids: Vec<String> = watched.into_iter().map(|(id, _)| id).collect();
        for id in ids {
            self.engine.forget_watch(&id);
        }
    }
}

/// The final answer of a listen stream (core Subscriptions, stream
/// lifecycle), with the server's `serverInfo`.
fn ended(subscription: &Value, info: Implementation) -> CustomResult {
    let mut meta = Map::new();
    meta.insert(SUBSCRIPTION_ID.to_owned(), subscription.clone());
    meta.insert(
        SERVER_INFO.to_owned(),
        json!({ "name": info.name, "version": info.version }),
    );
    CustomResult::new(json!({ "resultType": "complete", "_meta": meta }))
}
