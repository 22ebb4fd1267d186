//! The handlers that answer a server's questions (elicitation, sampling,
//! roots), for tasks, MRTR rounds and 2025-11-25 sessions alike.

use super::*;

/// A form question as a typed handler sees it
/// ([`TaskClientBuilder::on_form_async`]): its message, and where it comes
/// from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FormQuestion {
    /// What the form asks (the elicitation's `message`).
    pub message: String,
    /// The question's key in the task's or the MRTR round's
    /// `inputRequests`; `None` for an `elicitation/create` request of a
    /// 2025-11-25 session, which has none.
    pub key: Option<String>,
    /// The tool that asks: the one this client called, for a question of a
    /// call or a task [`TaskClient::start`] started; `None` for a task
    /// followed with [`TaskClient::resume`] (a [`TaskReference`] does not
    /// record its tool) and in a 2025-11-25 session.
    pub tool: Option<String>,
    /// The task that asks; `None` for a question asked inline (an MRTR
    /// round, before or without a task) and in a 2025-11-25 session.
    pub task_id: Option<String>,
}

/// Who asks a batch of questions: the tool and the task, as far as known.
#[derive(Debug, Clone, Default)]
pub(super) struct Asked {
    pub(super) tool: Option<String>,
    pub(super) task_id: Option<String>,
}

/// Who asks one question: [`Asked`] and the question's key.
#[derive(Debug, Clone, Default)]
pub(super) struct Context {
    key: Option<String>,
    tool: Option<String>,
    task_id: Option<String>,
}

/// Why no typed handler fits a form of `fields`, of which `required`.
fn misfit(forms: &[FormHandler], fields: &BTreeSet<String>, required: &BTreeSet<String>) -> String {
    let list = |set: &BTreeSet<String>| {
        set.iter()
            .map(|f| format!("`{f}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let asks = format!(
        "the form asks for [{}] (required: [{}])",
        list(fields),
        list(required)
    );
    if forms.is_empty() {
        return format!("{asks} and no `on_form` handler is registered");
    }
    let reasons: Vec<String> = forms
        .iter()
        .map(|form| {
            let extra: BTreeSet<String> = form.fields.difference(fields).cloned().collect();
            if extra.is_empty() {
                let missing: BTreeSet<String> =
                    required.difference(&form.fields).cloned().collect();
                format!("[{}] lacks required {}", list(&form.fields), list(&missing))
            } else {
                format!(
                    "[{}] has {} the form does not ask",
                    list(&form.fields),
                    list(&extra)
                )
            }
        })
        .collect();
    format!("{asks}; the `on_form` types: {}", reasons.join("; "))
}

/// A typed form handler: answers the forms whose fields fit its type.
#[derive(Clone)]
pub(super) struct FormHandler {
    pub(super) fields: BTreeSet<String>,
    pub(super) required: BTreeSet<String>,
    pub(super) answer: FormFn,
}

/// Everything registered on the builder that answers a server's questions.
#[derive(Clone, Default)]
pub(super) struct Handlers {
    pub(super) forms: Vec<FormHandler>,
    pub(super) elicit: Option<ElicitFn>,
    pub(super) url: bool,
    pub(super) sampling: Option<SamplingFn>,
    pub(super) roots: Option<Vec<Root>>,
}

pub(super) fn names(schema: &Value, key: &str) -> BTreeSet<String> {
    match &schema[key] {
        Value::Object(m) => m.keys().cloned().collect(),
        Value::Array(a) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => BTreeSet::new(),
    }
}

impl Handlers {
    /// The capabilities these handlers answer for, and no more.
    pub(super) fn capabilities(&self, tasks: bool) -> ClientCapabilities {
        let mut caps = Map::new();
        if !self.forms.is_empty() || self.elicit.is_some() {
            let mut elicitation = json!({"form": {}});
            if self.url && self.elicit.is_some() {
                elicitation["url"] = json!({});
            }
            caps.insert("elicitation".to_owned(), elicitation);
        }
        if self.sampling.is_some() {
            caps.insert("sampling".to_owned(), json!({}));
        }
        if self.roots.is_some() {
            caps.insert("roots".to_owned(), json!({}));
        }
        if tasks {
            caps.insert(
                "extensions".to_owned(),
                json!({"io.modelcontextprotocol/tasks": {}}),
            );
        }
        serde_json::from_value(Value::Object(caps)).unwrap_or_default()
    }

    pub(super) async fn elicit(
        &self,
        request: ElicitRequestParams,
        asked: Context,
    ) -> ElicitResult {
        let mut why = "it is a URL request (see `url_elicitation`)".to_owned();
        if let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = &request
        {
            let schema = serde_json::to_value(requested_schema).unwrap_or_default();
            let fields = names(&schema, "properties");
            let required = names(&schema, "required");
            let fits = |form: &&FormHandler| {
                form.fields.is_subset(&fields) && required.is_subset(&form.fields)
            };
            if let Some(form) = self.forms.iter().find(fits) {
                let question = FormQuestion {
                    message: message.clone(),
                    key: asked.key,
                    tool: asked.tool,
                    task_id: asked.task_id,
                };
                return match (form.answer)(question).await {
                    Some(content) => {
                        ElicitResult::new(ElicitationAction::Accept).with_content(content)
                    }
                    None => ElicitResult::new(ElicitationAction::Decline),
                };
            }
            why = misfit(&self.forms, &fields, &required);
        }
        match &self.elicit {
            Some(elicit) => elicit(request).await,
            None => {
                // The server reads this as the user's decline: say here
                // that no handler took it, and why.
                tracing::warn!(
                    key = asked.key.as_deref().unwrap_or("-"),
                    tool = asked.tool.as_deref().unwrap_or("-"),
                    "declined an elicitation no handler fits: {why}; add an `on_form` \
                     whose type fits it, or an `on_elicit`"
                );
                ElicitResult::new(ElicitationAction::Decline)
            }
        }
    }

    /// The answer to one input request, as the JSON that goes back.
    pub(super) async fn answer(
        &self,
        request: InputRequest,
        asked: Context,
    ) -> Result<Value, ClientError> {
        let answer = match request {
            InputRequest::Elicitation(request) => {
                serde_json::to_value(self.elicit(request.params, asked).await)
            }
            InputRequest::CreateMessage(request) => match &self.sampling {
                Some(sampling) => serde_json::to_value(sampling(request.params).await),
                None => {
                    return Err(ClientError::Protocol(
                        "the server asked for sampling, which this client does not offer"
                            .to_owned(),
                    ));
                }
            },
            InputRequest::ListRoots(_) => match &self.roots {
                Some(roots) => serde_json::to_value(ListRootsResult::new(roots.clone())),
                None => {
                    return Err(ClientError::Protocol(
                        "the server asked for roots, which this client does not offer".to_owned(),
                    ));
                }
            },
            _ => {
                return Err(ClientError::Protocol(
                    "the server asked for input of a kind this client does not know".to_owned(),
                ));
            }
        };
        answer.map_err(|e| ClientError::Protocol(format!("an answer did not serialize: {e}")))
    }

    /// Answers every request in `requests`, asked by `asked`.
    pub(super) async fn answer_all(
        &self,
        requests: InputRequests,
        asked: &Asked,
    ) -> Result<InputResponses, ClientError> {
        let mut answers = InputResponses::new();
        for (key, request) in requests {
            let context = Context {
                key: Some(key.clone()),
                tool: asked.tool.clone(),
                task_id: asked.task_id.clone(),
            };
            let answer = self.answer(request, context).await?;
            answers.insert(key, answer);
        }
        Ok(answers)
    }
}

/// rmcp's side of the handlers: a 2025-11-25 server asks its questions as
/// requests in the session; they get the same answers.
#[derive(Clone)]
pub(super) struct Handler {
    pub(super) info: ClientConfig,
    pub(super) handlers: Arc<Handlers>,
    /// The tasks followed by push, and where their states go.
    pub(super) pushed: Arc<super::push::Pushed>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(self.handlers.elicit(request, Context::default()).await)
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        match &self.handlers.sampling {
            Some(sampling) => Ok(sampling(params).await),
            None => Err(ErrorData::method_not_found::<
                rmcp::model::CreateMessageRequestMethod,
            >()),
        }
    }

    async fn on_task_status(
        &self,
        params: rmcp::model::TaskStatusNotificationParams,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.pushed.deliver(params.task);
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        Ok(ListRootsResult::new(
            self.handlers.roots.clone().unwrap_or_default(),
        ))
    }
}
