//! What a task may ask its client, and what the client said it can answer:
//! the core's typed view of MCP's input requests. The MCP front door turns
//! them into wire messages; stores keep them as JSON in the shape below.

use std::{
    collections::HashMap,
    sync::{Arc, LazyLock, Mutex, PoisonError},
};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// A JSON object.
type JsonObject = Map<String, Value>;

/// One question a task puts to its client.
///
/// Stored (and shown on the wire) as `{"method": …, "params": …}`:
///
/// ```
/// use mcp_tasks_runtime::question::{FormRequest, InputRequest};
///
/// let ask = InputRequest::Form(FormRequest {
///     message: "Roll out?".into(),
///     requested_schema: serde_json::Map::new(),
/// });
/// let json = serde_json::to_value(&ask).unwrap();
/// assert_eq!(json["method"], "elicitation/create");
/// assert_eq!(json["params"]["mode"], "form");
/// assert_eq!(serde_json::from_value::<InputRequest>(json).unwrap(), ask);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "WireRequest", try_from = "WireRequest")]
#[non_exhaustive]
pub enum InputRequest {
    /// `elicitation/create` in form mode: a flat form for the user.
    Form(FormRequest),
    /// `elicitation/create` in URL mode: a page the user is sent to (a
    /// credentials page, an OAuth consent), out of band.
    Url(UrlRequest),
    /// `sampling/createMessage`: a completion from the client's model, with
    /// these params.
    Sample(JsonObject),
    /// `roots/list`: the client's roots.
    ListRoots,
}

/// A form question: `elicitation/create` with `mode: "form"`.
#[derive(Debug, Clone, PartialEq)]
pub struct FormRequest {
    /// What the user is asked.
    pub message: String,
    /// The form: a flat object schema.
    pub requested_schema: JsonObject,
}

/// A URL question: `elicitation/create` with `mode: "url"`. Its answer is
/// the user's action only (`accept`, `decline` or `cancel`), never content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlRequest {
    /// Why the user is sent to the page.
    pub message: String,
    /// The page: an absolute `http` or `https` URL.
    pub url: String,
}

impl InputRequest {
    /// The MCP method that carries the question.
    pub fn method(&self) -> &'static str {
        match self {
            Self::Form(_) | Self::Url(_) => "elicitation/create",
            Self::Sample(_) => "sampling/createMessage",
            Self::ListRoots => "roots/list",
        }
    }

    /// The client capability the question needs: `elicitation` (form
    /// mode), `elicitation.url` (URL mode), `sampling` (`sampling.tools` when the params carry `tools` or
    /// `toolChoice`) or `roots`.
    pub fn capability(&self) -> &'static str {
        match self {
            Self::Form(_) => "elicitation",
            Self::Url(_) => "elicitation.url",
            Self::Sample(params) if uses_tools(params) => "sampling.tools",
            Self::Sample(_) => "sampling",
            Self::ListRoots => "roots",
        }
    }

    /// Checks a client's answer to this question before it is taken: every
    /// answer must be a JSON object; a form's answer is an `ElicitResult`
    /// whose `action` is `accept`, `decline` or `cancel`, and whose
    /// `content`, when accepted, fits the form's `requestedSchema`
    /// (JSON Schema 2020-12, formats included; fields the form does not name
    /// are let through). A URL question's answer is only an `action`
    /// (`content`, if any, must be empty). Sampling and roots answers are
    /// passed on as they are.
    ///
    /// The engine calls it on every answer to an outstanding question: an
    /// answer that does not fit is not taken, and the question stays open.
    ///
    /// # Errors
    ///
    /// What is wrong, naming the field when one is at fault.
    ///
    /// ```
    /// use mcp_tasks_runtime::question::{FormRequest, InputRequest};
    /// use serde_json::json;
    ///
    /// let schema = json!({
    ///     "type": "object",
    ///     "properties": {"approve": {"type": "boolean"}},
    ///     "required": ["approve"],
    /// });
    /// let ask = InputRequest::Form(FormRequest {
    ///     message: "Roll out?".into(),
    ///     requested_schema: schema.as_object().cloned().unwrap_or_default(),
    /// });
    /// assert!(ask.check_answer(&json!({"action": "accept", "content": {"approve": true}})).is_ok());
    /// assert!(ask.check_answer(&json!({"action": "decline"})).is_ok());
    /// let wrong = ask.check_answer(&json!({"action": "accept", "content": {"approve": "yes"}}));
    /// assert!(wrong.unwrap_err().contains("approve"));
    /// let missing = ask.check_answer(&json!({"action": "accept", "content": {}}));
    /// assert!(missing.unwrap_err().contains("approve"));
    /// assert!(ask.check_answer(&json!("yes")).is_err());
    ///
    /// let url = InputRequest::Url(mcp_tasks_runtime::question::UrlRequest {
    ///     message: "Sign in to the registry".into(),
    ///     url: "https://registry.example.com/login".into(),
    /// });
    /// assert!(url.check_answer(&json!({"action": "accept"})).is_ok());
    /// assert!(url.check_answer(&json!({"action": "maybe"})).is_err());
    /// assert!(url.check_answer(&json!({"action": "accept", "content": {"token": "x"}})).is_err());
    /// ```
    pub fn check_answer(&self, answer: &Value) -> Result<(), String> {
        let Value::Object(answer) = answer else {
            return Err(format!(
                "the answer must be a JSON object, not {}",
                json_kind(answer)
            ));
        };
        let form = match self {
            Self::Form(form) => form,
            Self::Url(_) => return check_url_answer(answer),
            Self::Sample(_) | Self::ListRoots => return Ok(()),
        };
        match answer.get("action").and_then(Value::as_str) {
            Some("decline" | "cancel") => Ok(()),
            Some("accept") => match answer.get("content") {
                None => check_form(&form.requested_schema, &Value::Object(Map::new())),
                Some(content @ Value::Object(_)) => check_form(&form.requested_schema, content),
                Some(other) => Err(format!(
                    "`content` must be an object of the form's fields, not {}",
                    json_kind(other)
                )),
            },
            _ => Err("`action` must be `accept`, `decline` or `cancel`".into()),
        }
    }

    /// The request's params, as they go on the wire.
    pub fn params(&self) -> JsonObject {
        match self {
            Self::Form(form) => {
                let mut p = JsonObject::new();
                p.insert("mode".into(), json!("form"));
                p.insert("message".into(), json!(form.message));
                p.insert(
                    "requestedSchema".into(),
                    Value::Object(form.requested_schema.clone()),
                );
                p
            }
            Self::Url(ask) => {
                let mut p = JsonObject::new();
                p.insert("mode".into(), json!("url"));
                p.insert("message".into(), json!(ask.message));
                p.insert("url".into(), json!(ask.url));
                p
            }
            Self::Sample(params) => params.clone(),
            Self::ListRoots => JsonObject::new(),
        }
    }

    /// Puts `prefix` before what an elicitation (form or URL) asks: why the
    /// last answer was refused. Other questions carry no message.
    pub(crate) fn prefix_message(&mut self, prefix: &str) {
        let message = match self {
            Self::Form(form) => &mut form.message,
            Self::Url(ask) => &mut ask.message,
            Self::Sample(_) | Self::ListRoots => return,
        };
        *message = format!("{prefix} {message}");
    }
}

/// Checks an answer to a URL question: an `action`, and no content (the
/// user's input goes to the page, never through the client).
fn check_url_answer(answer: &JsonObject) -> Result<(), String> {
    match answer.get("action").and_then(Value::as_str) {
        Some("accept" | "decline" | "cancel") => {}
        _ => return Err("`action` must be `accept`, `decline` or `cancel`".into()),
    }
    match answer.get("content") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(c)) if c.is_empty() => Ok(()),
        Some(_) => Err("a URL elicitation's answer carries no `content`".into()),
    }
}

/// Checks a URL a question sends the user to: an absolute `http` or `https`
/// URL with a host, and no credentials in it (`user:password@`).
///
/// # Errors
///
/// What is wrong with it (the URL itself is not repeated).
pub(crate) fn check_url(url: &str) -> Result<(), String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("the URL does not parse: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "the URL must be `http` or `https`, not `{}`",
            parsed.scheme()
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("the URL has no host".into());
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("the URL must not carry credentials".into());
    }
    Ok(())
}

/// Whether sampling params use tools (`tools` or `toolChoice`), which needs
/// the client's `sampling.tools`.
fn uses_tools(params: &JsonObject) -> bool {
    params.contains_key("tools") || params.contains_key("toolChoice")
}

/// `a string`, `an array`, ...: what a JSON value is, for messages.
pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// How many compiled forms [`form_validator`] keeps (then it starts over).
const FORM_CACHE: usize = 256;

/// Compiled forms, by their JSON text: a tool asks the same few forms
/// over and over. `None`: the schema does not compile.
type FormCache = HashMap<String, Option<Arc<jsonschema::Validator>>>;

static FORMS: LazyLock<Mutex<FormCache>> = LazyLock::new(Mutex::default);

/// The compiled `requestedSchema`, compiled once per form shape.
fn form_validator(schema: &JsonObject) -> Option<Arc<jsonschema::Validator>> {
    let text = serde_json::to_string(schema).ok()?;
    let cached = FORMS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&text)
        .cloned();
    if let Some(v) = cached {
        return v;
    }
    let compiled = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(&Value::Object(schema.clone()));
    let compiled = match compiled {
        Ok(v) => Some(Arc::new(v)),
        Err(e) => {
            // Not a schema the validator reads: the answer goes to the
            // tool, whose own decoding checks it.
            tracing::debug!(error = %e, "a requestedSchema does not compile; its answers are not checked");
            None
        }
    };
    let mut forms = FORMS.lock().unwrap_or_else(PoisonError::into_inner);
    if forms.len() >= FORM_CACHE {
        forms.clear();
    }
    forms.insert(text, compiled.clone());
    compiled
}

/// Checks a form's `content` against its `requestedSchema`: the first few
/// faults, each naming its field (the answer's values are not repeated).
fn check_form(schema: &JsonObject, content: &Value) -> Result<(), String> {
    let Some(validator) = form_validator(schema) else {
        return Ok(());
    };
    let faults: Vec<String> = validator
        .iter_errors(content)
        .take(3)
        .map(|e| {
            let field = e.instance_path.as_str().trim_start_matches('/');
            if field.is_empty() {
                e.masked().to_string()
            } else {
                format!("`{}`: {}", field.replace('/', "."), e.masked())
            }
        })
        .collect();
    if faults.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the content does not fit the form: {}",
            faults.join("; ")
        ))
    }
}

/// The stored and wire shape of an [`InputRequest`].
#[derive(Serialize, Deserialize)]
struct WireRequest {
    method: String,
    #[serde(default)]
    params: JsonObject,
}

impl From<InputRequest> for WireRequest {
    fn from(r: InputRequest) -> Self {
        Self {
            method: r.method().to_owned(),
            params: r.params(),
        }
    }
}

impl TryFrom<WireRequest> for InputRequest {
    type Error = String;

    fn try_from(w: WireRequest) -> Result<Self, String> {
        match w.method.as_str() {
            "elicitation/create" => {
                let mut p = w.params;
                let message = match p.remove("message") {
                    Some(Value::String(m)) => m,
                    _ => return Err("an elicitation request needs a string `message`".into()),
                };
                if p.get("mode").and_then(Value::as_str) == Some("url") {
                    return match p.remove("url") {
                        Some(Value::String(url)) => Ok(Self::Url(UrlRequest { message, url })),
                        _ => Err("a URL elicitation request needs a string `url`".into()),
                    };
                }
                let requested_schema = match p.remove("requestedSchema") {
                    Some(Value::Object(s)) => s,
                    _ => {
                        return Err(
                            "an elicitation request needs an object `requestedSchema`".into()
                        );
                    }
                };
                Ok(Self::Form(FormRequest {
                    message,
                    requested_schema,
                }))
            }
            "sampling/createMessage" => Ok(Self::Sample(w.params)),
            "roots/list" => Ok(Self::ListRoots),
            other => Err(format!("`{other}` is not an input request method")),
        }
    }
}

/// What the calling client declared it can answer: the input capabilities of
/// the request that created a task. A question whose capability is missing
/// fails at once with [`AskError::Unsupported`](crate::question::AskError::Unsupported).
///
/// Stored as MCP's capability object (`{"elicitation": {}, "roots": {}}`),
/// and read as MCP defines it: `elicitation` allows form questions when it
/// is `{}` (older clients) or names `form` (`{"url": {}}` alone does not);
/// URL questions need `elicitation.url`; sampling with `tools` or
/// `toolChoice` needs `sampling.tools`.
///
/// ```
/// use mcp_tasks_runtime::question::InputCapabilities;
/// use serde_json::json;
///
/// let caps: InputCapabilities = serde_json::from_value(json!({"elicitation": {}}))?;
/// assert!(caps.elicitation && !caps.sampling);
/// let caps: InputCapabilities = serde_json::from_value(json!({"elicitation": {"url": {}}}))?;
/// assert!(!caps.elicitation, "URL mode only: no forms");
/// assert!(caps.elicitation_url);
/// let caps: InputCapabilities = serde_json::from_value(json!({"elicitation": {}}))?;
/// assert!(!caps.elicitation_url, "a bare `elicitation` is form mode only");
/// let caps: InputCapabilities = serde_json::from_value(json!({"sampling": {"tools": {}}}))?;
/// assert!(caps.sampling && caps.sampling_tools);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "Value", into = "WireCapabilities")]
#[non_exhaustive]
pub struct InputCapabilities {
    /// `elicitation` in form mode (`{}` or `{"form": {}}`): form questions
    /// ([`ask_user`](crate::ask_user), [`confirm`](crate::confirm)).
    pub elicitation: bool,
    /// `elicitation.url`: URL questions ([`ask_url`](crate::question::ask_url)).
    pub elicitation_url: bool,
    /// `sampling`: [`sample`](crate::question::sample).
    pub sampling: bool,
    /// `sampling.tools`: [`sample`](crate::question::sample) with `tools` or
    /// `toolChoice` in its params.
    pub sampling_tools: bool,
    /// `roots`: [`list_roots`](crate::question::list_roots).
    pub roots: bool,
}

impl InputCapabilities {
    /// Nothing declared: every question fails with `Unsupported`.
    pub const NONE: Self = Self {
        elicitation: false,
        elicitation_url: false,
        sampling: false,
        sampling_tools: false,
        roots: false,
    };

    /// Everything declared.
    pub const ALL: Self = Self {
        elicitation: true,
        elicitation_url: true,
        sampling: true,
        sampling_tools: true,
        roots: true,
    };

    /// Whether the client can answer `request`.
    pub fn allows(self, request: &InputRequest) -> bool {
        match request {
            InputRequest::Form(_) => self.elicitation,
            InputRequest::Url(_) => self.elicitation_url,
            InputRequest::Sample(params) => {
                self.sampling && (self.sampling_tools || !uses_tools(params))
            }
            InputRequest::ListRoots => self.roots,
        }
    }
}

/// MCP's capability object, as stored.
#[derive(Serialize)]
struct WireCapabilities {
    #[serde(skip_serializing_if = "Option::is_none")]
    elicitation: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sampling: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    roots: Option<Value>,
}

/// Reads MCP's capability object leniently: a capability is declared when
/// its key holds an object; anything else (`null`, a missing key) is not.
impl From<Value> for InputCapabilities {
    fn from(v: Value) -> Self {
        let declared = |key: &str| v.get(key).filter(|c| c.is_object());
        let has =
            |c: Option<&Value>, key: &str| c.and_then(|c| c.get(key)).is_some_and(Value::is_object);
        let elicitation = declared("elicitation");
        let sampling = declared("sampling");
        Self {
            // `{}` is form mode (older clients); `{"url": {}}` alone is not.
            elicitation: elicitation.is_some()
                && (has(elicitation, "form") || !has(elicitation, "url")),
            elicitation_url: has(elicitation, "url"),
            sampling: sampling.is_some(),
            sampling_tools: has(sampling, "tools"),
            roots: declared("roots").is_some(),
        }
    }
}

impl From<InputCapabilities> for WireCapabilities {
    fn from(c: InputCapabilities) -> Self {
        let declared = |on: bool| on.then(|| json!({}));
        // `{}` alone is form mode, as stored before URL mode existed.
        let elicitation = match (c.elicitation, c.elicitation_url) {
            (form, true) => Some(if form {
                json!({"form": {}, "url": {}})
            } else {
                json!({"url": {}})
            }),
            (form, false) => declared(form),
        };
        Self {
            elicitation,
            sampling: c.sampling.then(|| {
                if c.sampling_tools {
                    json!({"tools": {}})
                } else {
                    json!({})
                }
            }),
            roots: declared(c.roots),
        }
    }
}
