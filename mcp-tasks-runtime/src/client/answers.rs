//! The handlers that answer a server's questions (elicitation, sampling,
//! roots), for tasks, MRTR rounds and 2025-11-25 sessions alike.

use super::*;

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

    pub(super) async fn elicit(&self, request: ElicitRequestParams) -> ElicitResult {
        if let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = &request
        {
            let schema = serde_json::to_value(requested_schema).unwrap_or_default();
            let asked = names(&schema, "properties");
            let required = names(&schema, "required");
            let fits = |form: &&FormHandler| {
                form.fields.is_subset(&asked) && required.is_subset(&form.fields)
            };
            if let Some(form) = self.forms.iter().find(fits) {
                return match (form.answer)(message) {
                    Some(content) => {
                        ElicitResult::new(ElicitationAction::Accept).with_content(content)
                    }
                    None => ElicitResult::new(ElicitationAction::Decline),
                };
            }
        }
        match &self.elicit {
            Some(elicit) => elicit(request).await,
            None => {
                // The server reads this as the user's decline: say here
                // that no handler took it, and which fields it asked for.
                let fields = match &request {
                    ElicitRequestParams::FormElicitationParams {
                        requested_schema, ..
                    } => {
                        let schema = serde_json::to_value(requested_schema).unwrap_or_default();
                        names(&schema, "properties")
                            .into_iter()
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                    _ => "a URL request (see `url_elicitation`)".to_owned(),
                };
                tracing::warn!(
                    fields = %fields,
                    "declined an elicitation no handler fits: add an `on_form` whose type has these fields, or `on_elicit`"
                );
                ElicitResult::new(ElicitationAction::Decline)
            }
        }
    }

    /// The answer to one input request, as the JSON that goes back.
    pub(super) async fn answer(&self, request: InputRequest) -> Result<Value, ClientError> {
        let answer = match request {
            InputRequest::Elicitation(request) => {
                serde_json::to_value(self.elicit(request.params).await)
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

    /// Answers every request in `requests`.
    pub(super) async fn answer_all(
        &self,
        requests: InputRequests,
    ) -> Result<InputResponses, ClientError> {
        let mut answers = InputResponses::new();
        for (key, request) in requests {
            let answer = self.answer(request).await?;
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
        Ok(self.handlers.elicit(request).await)
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
