//! The builder, and the connection every request goes through: connecting
//! (again, after a break), timeouts, and retries with backoff.

use super::*;

/// Configures a [`TaskClient`]: where it connects, the handlers that answer
/// the server's questions, and how it polls. Made by [`TaskClient::http`],
/// [`TaskClient::stdio`] or [`TaskClient::builder`].
pub struct TaskClientBuilder {
    pub(super) endpoint: Endpoint,
    pub(super) handlers: Handlers,
    pub(super) tasks: bool,
    pub(super) name: String,
    pub(super) version: String,
    pub(super) retry_for: Duration,
    pub(super) request_timeout: Duration,
    pub(super) max_poll_interval: Duration,
    pub(super) push: bool,
}

impl fmt::Debug for TaskClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskClientBuilder")
            .field("endpoint", &self.endpoint)
            .field("capabilities", &self.handlers.capabilities(self.tasks))
            .finish_non_exhaustive()
    }
}

impl TaskClientBuilder {
    /// Answers the forms whose fields fit `T` with `answer(message)`: `Some`
    /// accepts with the value's fields, `None` declines. A form fits when
    /// each of `T`'s fields is one of the form's and each field the form
    /// requires is one of `T`'s. Several typed handlers may be registered;
    /// the first that fits answers, and forms none fits go to
    /// [`on_elicit`](Self::on_elicit). Without one they are declined, with a
    /// WARN log line that says why: the fields the form asks for, and what
    /// keeps each typed handler from fitting. Declares form elicitation.
    ///
    /// ```no_run
    /// use mcp_tasks_client::TaskClient;
    /// use mcp_tasks_runtime::Elicit;
    /// use schemars::JsonSchema;
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, JsonSchema, Elicit)]
    /// struct Approval {
    ///     approve: bool,
    /// }
    ///
    /// let builder = TaskClient::http("http://127.0.0.1:8080/mcp")
    ///     .on_form(|message: &str| Some(Approval { approve: message.contains("staging") }));
    /// ```
    ///
    /// For a handler that waits (for a person, say) or that needs to know
    /// which task asks, use [`on_form_async`](Self::on_form_async).
    #[must_use]
    pub fn on_form<T, F>(self, answer: F) -> Self
    where
        T: Elicit + Serialize + 'static,
        F: Fn(&str) -> Option<T> + Send + Sync + 'static,
    {
        self.form::<T>(Arc::new(move |question: FormQuestion| {
            let content =
                answer(&question.message).and_then(|value| serde_json::to_value(value).ok());
            Box::pin(std::future::ready(content))
        }))
    }

    /// As [`on_form`](Self::on_form), with a handler that is async and
    /// receives the question's context: its message, its key, the tool and
    /// the task that ask ([`FormQuestion`]). The handler runs once per
    /// question, however many followers of one [`TaskHandle`]
    /// ([`updates`](TaskHandle::updates) streams and
    /// [`result`](TaskHandle::result)) see it while it waits.
    ///
    /// ```no_run
    /// use mcp_tasks_client::{FormQuestion, TaskClient};
    /// use mcp_tasks_runtime::Elicit;
    /// use schemars::JsonSchema;
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, JsonSchema, Elicit)]
    /// struct Approval {
    ///     approve: bool,
    /// }
    ///
    /// let builder = TaskClient::http("http://127.0.0.1:8080/mcp").on_form_async(
    ///     |question: FormQuestion| async move {
    ///         let task = question.task_id.as_deref().unwrap_or("an inline call");
    ///         println!("{task} asks {}: {}", question.key.unwrap_or_default(), question.message);
    ///         // Wait for a person here; `None` declines.
    ///         Some(Approval { approve: true })
    ///     },
    /// );
    /// ```
    #[must_use]
    pub fn on_form_async<T, F, Fut>(self, answer: F) -> Self
    where
        T: Elicit + Serialize + 'static,
        F: Fn(FormQuestion) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Option<T>> + Send + 'static,
    {
        self.form::<T>(Arc::new(move |question: FormQuestion| {
            let answered = answer(question);
            Box::pin(async move {
                answered
                    .await
                    .and_then(|value| serde_json::to_value(value).ok())
            })
        }))
    }

    fn form<T: Elicit>(mut self, answer: FormFn) -> Self {
        let schema = Value::Object(T::requested_schema());
        self.handlers.forms.push(FormHandler {
            fields: names(&schema, "properties"),
            required: names(&schema, "required"),
            answer,
        });
        // Most specific first: a form fits the handler that names the most of
        // its fields.
        self.handlers.forms.sort_by(|a, b| {
            (b.fields.len(), b.required.len()).cmp(&(a.fields.len(), a.required.len()))
        });
        self
    }

    /// Answers every elicitation no typed [`on_form`](Self::on_form) handler
    /// takes. Declares form elicitation (and URL mode with
    /// [`url_elicitation`](Self::url_elicitation)).
    ///
    /// ```no_run
    /// use mcp_tasks_client::{ElicitResult, ElicitationAction, TaskClient};
    ///
    /// let builder = TaskClient::http("http://127.0.0.1:8080/mcp").on_elicit(|request| async move {
    ///     println!("{request:?}");
    ///     ElicitResult::new(ElicitationAction::Decline)
    /// });
    /// ```
    #[must_use]
    pub fn on_elicit<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(ElicitRequestParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ElicitResult> + Send + 'static,
    {
        self.handlers.elicit = Some(Arc::new(move |request| Box::pin(handler(request))));
        self
    }

    /// Also declares URL-mode elicitation: the [`on_elicit`](Self::on_elicit)
    /// handler then receives URL requests too (it should open the URL for
    /// the user, and answer `accept` once they agreed to go).
    #[must_use]
    pub fn url_elicitation(mut self) -> Self {
        self.handlers.url = true;
        self
    }

    /// Answers `sampling/createMessage` requests; declares sampling.
    ///
    /// ```no_run
    /// use mcp_tasks_client::{CreateMessageResult, TaskClient};
    ///
    /// let builder = TaskClient::http("http://127.0.0.1:8080/mcp").on_sampling(|params| async move {
    ///     let _ = params.messages;
    ///     serde_json::from_value::<CreateMessageResult>(serde_json::json!({
    ///         "model": "local", "role": "assistant",
    ///         "content": {"type": "text", "text": "Paris"}
    ///     }))
    ///     .unwrap()
    /// });
    /// ```
    #[must_use]
    pub fn on_sampling<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(CreateMessageRequestParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = CreateMessageResult> + Send + 'static,
    {
        self.handlers.sampling = Some(Arc::new(move |params| Box::pin(handler(params))));
        self
    }

    /// The roots `roots/list` answers with; declares roots.
    #[must_use]
    pub fn roots(mut self, roots: Vec<Root>) -> Self {
        self.handlers.roots = Some(roots);
        self
    }

    /// Whether the client declares the Tasks extension (it does by default).
    /// Without it, servers run task tools inline, asking their questions as
    /// MRTR rounds, and [`TaskClient::start`] gets handles without tasks.
    #[must_use]
    pub fn tasks(mut self, declare: bool) -> Self {
        self.tasks = declare;
        self
    }

    /// The `clientInfo` sent with each request (the crate's name and version
    /// by default).
    #[must_use]
    pub fn client_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.name = name.into();
        self.version = version.into();
        self
    }

    /// How long polling keeps retrying a server it cannot reach (restarting,
    /// say) before the task's stream ends with [`ClientError::Transport`]:
    /// two minutes by default. Retries back off from 100 ms to 5 s.
    #[must_use]
    pub fn retry_for(mut self, window: Duration) -> Self {
        self.retry_for = window;
        self
    }

    /// How long one request may take before it counts as a failed attempt
    /// (30 s by default).
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Whether to follow tasks by push (`subscriptions/listen`) when the
    /// server serves it (default `true`). States then arrive as the server
    /// changes them, with a `tasks/get` only at the start, after an answer,
    /// and every [`max_poll_interval`](Self::max_poll_interval) as a safety
    /// net; a server that refuses the listen is polled as before. `false`
    /// always polls.
    #[must_use]
    pub fn push(mut self, push: bool) -> Self {
        self.push = push;
        self
    }

    /// The longest wait between two polls, whatever `pollIntervalMs` the
    /// server asks for (30 s by default).
    #[must_use]
    pub fn max_poll_interval(mut self, interval: Duration) -> Self {
        self.max_poll_interval = interval;
        self
    }

    /// Connects (`server/discover`, falling back to a 2025-11-25 session for
    /// a server that only speaks that).
    ///
    /// # Errors
    ///
    /// [`ClientError::Connect`] when the server cannot be reached or does not
    /// speak MCP.
    pub async fn connect(self) -> Result<TaskClient, ClientError> {
        let info = ClientConfig::new(
            self.handlers.capabilities(self.tasks),
            Implementation::new(self.name.clone(), self.version.clone()),
        );
        let handler = Handler {
            info,
            handlers: Arc::new(self.handlers),
            pushed: Arc::default(),
        };
        let inner = Inner {
            endpoint: self.endpoint,
            handler,
            connection: tokio::sync::Mutex::new(None),
            retry_for: self.retry_for,
            request_timeout: self.request_timeout,
            max_poll_interval: self.max_poll_interval,
            push: self.push,
        };
        inner.peer().await?;
        Ok(TaskClient {
            inner: Arc::new(inner),
        })
    }
}

pub(super) struct Inner {
    pub(super) endpoint: Endpoint,
    pub(super) handler: Handler,
    /// The live connection; `None` after a transport failure, until the next
    /// request connects again.
    pub(super) connection: tokio::sync::Mutex<Option<Arc<RunningService<RoleClient, Handler>>>>,
    pub(super) retry_for: Duration,
    pub(super) request_timeout: Duration,
    pub(super) max_poll_interval: Duration,
    /// Follow tasks by push when the server serves it.
    pub(super) push: bool,
}

impl Inner {
    /// The peer of the live connection, connecting if there is none.
    pub(super) async fn peer(&self) -> Result<Peer<RoleClient>, ClientError> {
        let mut connection = self.connection.lock().await;
        if let Some(live) = connection.as_ref()
            && !live.is_closed()
            && !live.peer().is_transport_closed()
        {
            return Ok(live.peer().clone());
        }
        let service = tokio::time::timeout(self.request_timeout, self.connect())
            .await
            .map_err(|_| ClientError::Connect {
                endpoint: self.endpoint.to_string(),
                message: format!("no answer within {:?}", self.request_timeout),
            })??;
        let peer = service.peer().clone();
        *connection = Some(Arc::new(service));
        Ok(peer)
    }

    /// Drops the live connection, so the next request connects again.
    pub(super) async fn reset(&self) {
        self.connection.lock().await.take();
    }

    pub(super) async fn connect(&self) -> Result<RunningService<RoleClient, Handler>, ClientError> {
        let lifecycle = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        };
        let failed = |message: String| ClientError::Connect {
            endpoint: self.endpoint.to_string(),
            message,
        };
        let handler = self.handler.clone();
        match &self.endpoint {
            Endpoint::Http { url } => {
                let transport = StreamableHttpClientTransport::from_config(
                    StreamableHttpClientTransportConfig::with_uri(url.clone()),
                );
                handler
                    .serve_with_lifecycle(transport, lifecycle)
                    .await
                    .map_err(|e| failed(e.to_string()))
            }
            Endpoint::Stdio { command, args } => {
                let mut child = tokio::process::Command::new(command);
                child.args(args);
                let transport = TokioChildProcess::new(child).map_err(|e| failed(e.to_string()))?;
                handler
                    .serve_with_lifecycle(transport, lifecycle)
                    .await
                    .map_err(|e| failed(e.to_string()))
            }
        }
    }

    /// Sends one request with `send`, bounded by the request timeout; a
    /// transport failure drops the connection.
    pub(super) async fn once<T, F, Fut>(&self, send: &F) -> Result<T, Attempt>
    where
        F: Fn(Peer<RoleClient>) -> Fut,
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        let peer = match self.peer().await {
            Ok(peer) => peer,
            Err(e @ ClientError::Connect { .. }) => return Err(Attempt::Transient(e)),
            Err(e) => return Err(Attempt::Final(e)),
        };
        match tokio::time::timeout(self.request_timeout, send(peer)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) if transient(&e) => {
                self.reset().await;
                Err(Attempt::Transient(ClientError::Transport(e)))
            }
            Ok(Err(e)) => Err(Attempt::Final(ClientError::from_service(e))),
            Err(_) => {
                self.reset().await;
                Err(Attempt::Transient(ClientError::Transport(
                    ServiceError::Timeout {
                        timeout: self.request_timeout,
                    },
                )))
            }
        }
    }

    /// Sends an idempotent request (`tasks/get`, `tasks/update`,
    /// `tasks/cancel`), retrying transport failures with backoff for the
    /// client's retry window.
    pub(super) async fn retrying<T, F, Fut>(&self, send: F) -> Result<T, ClientError>
    where
        F: Fn(Peer<RoleClient>) -> Fut,
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        let deadline = Instant::now() + self.retry_for;
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.once(&send).await {
                Ok(value) => return Ok(value),
                Err(Attempt::Final(e)) => return Err(e),
                Err(Attempt::Transient(e)) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(e);
                    }
                    tokio::time::sleep(jitter(backoff).min(deadline - now)).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

/// One attempt's failure.
pub(super) enum Attempt {
    /// Worth trying again.
    Transient(ClientError),
    /// The server's answer.
    Final(ClientError),
}

/// `d` give or take a tenth, so that many clients do not poll in step.
pub(super) fn jitter(d: Duration) -> Duration {
    let r = getrandom::u64().unwrap_or(0) % 2001; // 0..=2000
    let factor = 0.9 + (r as f64) / 10_000.0; // 0.9..=1.1
    d.mul_f64(factor)
}
