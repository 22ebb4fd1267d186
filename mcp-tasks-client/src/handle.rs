//! Long work: a [`TaskHandle`], the stream of its states, and the poller
//! that follows a task, answering its questions on the way.

use super::*;

pub(super) enum HandleState {
    /// Answered inline: no task.
    Done(Box<CallToolResult>),
    /// A task on the server, and the tool that made it (when this client
    /// called it).
    Task {
        id: String,
        poll: Option<u64>,
        tool: Option<String>,
    },
}

/// A task a [`TaskClient`] started or resumed.
///
/// Dropping a handle does not cancel its task: the task goes on on the
/// server (that is the point of tasks) until it ends or its time to live
/// runs out. Keep its [`reference`](Self::reference) to come back to it, and
/// call [`cancel`](Self::cancel) to stop it.
///
/// A handle serializes (serde) as its [`TaskReference`].
pub struct TaskHandle {
    pub(super) client: TaskClient,
    pub(super) state: HandleState,
    /// The input keys this handle answered: never answered twice, even when
    /// a poll still shows one before the server applied the answer.
    pub(super) answered: Arc<Mutex<HashSet<String>>>,
}

impl fmt::Debug for TaskHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskHandle")
            .field("endpoint", &self.client.inner.endpoint)
            .field("id", &self.id())
            .finish_non_exhaustive()
    }
}

impl Serialize for TaskHandle {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.reference() {
            Some(reference) => reference.serialize(serializer),
            None => Err(serde::ser::Error::custom(
                "the call was answered without a task: there is nothing to refer to",
            )),
        }
    }
}

/// One observed state of a task, from [`TaskHandle::updates`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TaskUpdate {
    /// The status.
    pub status: TaskStatus,
    /// The server's progress line (`statusMessage`), if any.
    pub status_message: Option<String>,
    /// Everything `tasks/get` said.
    pub task: DetailedTask,
}

impl TaskHandle {
    /// The task's id; `None` when the server answered the call at once.
    pub fn id(&self) -> Option<&str> {
        match &self.state {
            HandleState::Task { id, .. } => Some(id),
            HandleState::Done(_) => None,
        }
    }

    /// What to store to come back to this task later; `None` when there is
    /// no task.
    pub fn reference(&self) -> Option<TaskReference> {
        self.id().map(|id| TaskReference {
            endpoint: self.client.inner.endpoint.clone(),
            task_id: id.to_owned(),
        })
    }

    /// The task's status as it changes, ending with its terminal status.
    /// Each item is a state that differs from the one before (status or
    /// message). Questions the task asks are answered by the client's
    /// handlers as they come, once per question however many followers
    /// (this stream, others, [`result`](Self::result)) see it.
    ///
    /// The stream is a [`futures::Stream`]: read it with
    /// [`futures::StreamExt::next`], which needs `futures` among your
    /// dependencies and `use futures::StreamExt as _;` (as below). Its
    /// last item's message is the end's own: when a task ends, the last
    /// [`status`](mcp_tasks_runtime::durable::status) line is replaced by "The task completed."
    /// (or "The task was cancelled.", or the failure's message).
    ///
    /// States come by push (`notifications/tasks` on a
    /// `subscriptions/listen` stream) when the server serves it, and
    /// otherwise from polling `tasks/get` at the server's `pollIntervalMs`
    /// (with jitter, and with backoff while the server cannot be reached);
    /// see [`TaskClientBuilder::push`]. A stream that ends with an error
    /// (the task expired, the server could not be reached for the retry
    /// window) says so in its last item.
    ///
    /// ```no_run
    /// # async fn run(handle: mcp_tasks_client::TaskHandle) {
    /// use futures::StreamExt as _;
    ///
    /// let mut updates = handle.updates();
    /// while let Some(Ok(update)) = updates.next().await {
    ///     println!("{:?} {}", update.status, update.status_message.unwrap_or_default());
    /// }
    /// # }
    /// ```
    pub fn updates(&self) -> BoxStream<'static, Result<TaskUpdate, ClientError>> {
        match &self.state {
            HandleState::Done(_) => futures::stream::empty().boxed(),
            HandleState::Task { id, poll, .. } => {
                poll_stream(self.poller(id.clone(), *poll)).boxed()
            }
        }
    }

    pub(super) fn poller(&self, id: String, poll: Option<u64>) -> Poller {
        let tool = match &self.state {
            HandleState::Task { tool, .. } => tool.clone(),
            HandleState::Done(_) => None,
        };
        Poller {
            client: self.client.clone(),
            tool,
            task_id: id,
            answered: self.answered.clone(),
            interval: self.client.poll_interval(poll),
            last: None,
            first: true,
            done: false,
            push: None,
        }
    }

    /// Follows the task to its end and returns its result as `Out` (see
    /// [`TaskClient::call`]).
    ///
    /// # Errors
    ///
    /// As [`TaskClient::call`].
    pub async fn result<Out: DeserializeOwned>(self) -> Result<Out, ClientError> {
        let (id, poll) = match self.state {
            HandleState::Done(result) => return decode(*result),
            HandleState::Task { ref id, poll, .. } => (id.clone(), poll),
        };
        let mut poller = self.poller(id.clone(), poll);
        let mut last = None;
        while let Some(update) = poller.next().await {
            last = Some(update?);
        }
        let task = last.ok_or_else(|| ClientError::Protocol("no state was seen".to_owned()))?;
        match task.task.payload {
            TaskPayload::Completed { result } => {
                let result: CallToolResult = serde_json::from_value(Value::Object(result))
                    .map_err(|e| ClientError::Decode(format!("the task's result: {e}")))?;
                decode(result)
            }
            TaskPayload::Failed { error } => Err(ClientError::Failed {
                task_id: id,
                error: serde_json::from_value(Value::Object(error.clone())).unwrap_or_else(|_| {
                    ErrorData::internal_error(Value::Object(error).to_string(), None)
                }),
            }),
            TaskPayload::Cancelled => Err(ClientError::Cancelled { task_id: id }),
            _ => Err(ClientError::Protocol(
                "the task stopped before it ended".to_owned(),
            )),
        }
    }

    /// Asks the server to cancel the task (`tasks/cancel`). Cancelling is
    /// cooperative: the task may still end `completed` or `failed`; follow it
    /// with [`updates`](Self::updates) or [`result`](Self::result) to see how
    /// it ended. Cancelling a task that already ended does nothing.
    ///
    /// # Errors
    ///
    /// [`ClientError::NoTask`] when there is no task;
    /// [`ClientError::Expired`] when the server no longer knows it; others as
    /// [`TaskClient::call`].
    pub async fn cancel(&self) -> Result<(), ClientError> {
        let id = self.id().ok_or(ClientError::NoTask)?.to_owned();
        self.client
            .inner
            .retrying(|peer: Peer<RoleClient>| {
                let id = id.clone();
                async move { peer.cancel_task(CancelTaskParams::new(id)).await }
            })
            .await
            .map_err(|e| expired(e, &id))
    }
}

/// Follows one task: where its states come from, and what is done with them.
pub(super) struct Poller {
    pub(super) client: TaskClient,
    pub(super) task_id: String,
    /// The tool that made the task, when this client called it.
    pub(super) tool: Option<String>,
    pub(super) answered: Arc<Mutex<HashSet<String>>>,
    pub(super) interval: Duration,
    /// The last state handed out: status and message.
    pub(super) last: Option<(TaskStatus, Option<String>)>,
    pub(super) first: bool,
    pub(super) done: bool,
    /// The push stream, once tried (`Some(None)`: none could be opened).
    pub(super) push: Option<Option<super::push::Push>>,
}

pub(super) fn poll_stream(
    poller: Poller,
) -> impl Stream<Item = Result<TaskUpdate, ClientError>> + Send {
    futures::stream::unfold(poller, |mut poller| async move {
        let item = poller.next().await?;
        Some((item, poller))
    })
}

impl Poller {
    /// The task's next state that differs from the last one; `None` after
    /// the terminal one.
    pub(super) async fn next(&mut self) -> Option<Result<TaskUpdate, ClientError>> {
        if self.done {
            return None;
        }
        let item = self.step().await;
        if !matches!(&item, Ok(update) if !update.status.is_terminal()) {
            self.done = true;
        }
        Some(item)
    }

    pub(super) async fn step(&mut self) -> Result<TaskUpdate, ClientError> {
        loop {
            let mut pushed = None;
            if !self.first {
                match self.push.as_mut().and_then(Option::as_mut) {
                    Some(push) if push.live() => {
                        pushed = push.wait(self.client.inner.max_poll_interval).await;
                    }
                    _ => tokio::time::sleep(jitter(self.interval)).await,
                }
            }
            self.first = false;
            // The one source of states: pushed by the server, or read with
            // `tasks/get` (the same `DetailedTask`).
            let task = match pushed {
                Some(task) => task,
                None => self.fetch().await?,
            };
            if self.push.is_none() && !task.status().is_terminal() {
                self.push = Some(if self.client.inner.push {
                    super::push::Push::open(&self.client, &self.task_id).await
                } else {
                    None
                });
            }
            if let Some(ms) = task.task.poll_interval_ms {
                self.interval = self.client.poll_interval(Some(ms));
            }
            if let TaskPayload::InputRequired { input_requests } = &task.payload
                && self.answer(input_requests.clone()).await?
            {
                // Answered: look again at once, rather than a poll later.
                self.first = true;
            }
            let status = status_of(&task);
            let seen = (status, task.task.status_message.clone());
            if status.is_terminal() || self.last.as_ref() != Some(&seen) {
                self.last = Some(seen);
                return Ok(TaskUpdate {
                    status,
                    status_message: task.task.status_message.clone(),
                    task,
                });
            }
        }
    }

    pub(super) async fn fetch(&self) -> Result<DetailedTask, ClientError> {
        let id = self.task_id.clone();
        self.client
            .inner
            .retrying(|peer: Peer<RoleClient>| {
                let id = id.clone();
                async move { peer.get_task(GetTaskParams::new(id)).await }
            })
            .await
            .map(|got| got.task)
            .map_err(|e| expired(e, &self.task_id))
    }

    /// Answers the keys not answered yet with `tasks/update`; whether there
    /// were any. Every follower of one handle (its [`TaskHandle::updates`]
    /// streams and [`TaskHandle::result`]) shares the set of answered keys,
    /// and a key is claimed in it *before* its handler runs: a handler that
    /// waits for a person is called once per question, however many
    /// followers see the question meanwhile. A key whose answer could not be
    /// made or delivered is given back, for the next poll to try again.
    pub(super) async fn answer(&self, mut requests: InputRequests) -> Result<bool, ClientError> {
        {
            let mut answered = self
                .answered
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            requests.retain(|key, _| answered.insert(key.clone()));
        }
        if requests.is_empty() {
            return Ok(false);
        }
        let claimed: Vec<String> = requests.keys().cloned().collect();
        let delivered = self.deliver(requests).await;
        if delivered.is_err() {
            let mut answered = self
                .answered
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for key in &claimed {
                answered.remove(key);
            }
        }
        delivered.map(|()| true)
    }

    /// Answers `requests` with the client's handlers and sends the answers
    /// with `tasks/update`.
    async fn deliver(&self, requests: InputRequests) -> Result<(), ClientError> {
        let asked = Asked {
            tool: self.tool.clone(),
            task_id: Some(self.task_id.clone()),
        };
        let answers = self
            .client
            .inner
            .handler
            .handlers
            .answer_all(requests, &asked)
            .await?;
        let id = self.task_id.clone();
        self.client
            .inner
            .retrying(|peer: Peer<RoleClient>| {
                let params = UpdateTaskParams::new(id.clone(), answers.clone());
                async move { peer.update_task(params).await }
            })
            .await
            .map_err(|e| expired(e, &self.task_id))?;
        Ok(())
    }
}

/// A task's status as this crate names it. rmcp's enum is
/// `#[non_exhaustive]`: a status it adds later reads as `working`, so the
/// handle keeps polling rather than taking it for an end.
fn status_of(task: &DetailedTask) -> TaskStatus {
    use rmcp::model::TaskStatus as Wire;
    match task.status() {
        Wire::Working => TaskStatus::Working,
        Wire::InputRequired => TaskStatus::InputRequired,
        Wire::Completed => TaskStatus::Completed,
        Wire::Failed => TaskStatus::Failed,
        Wire::Cancelled => TaskStatus::Cancelled,
        _ => TaskStatus::Working,
    }
}
