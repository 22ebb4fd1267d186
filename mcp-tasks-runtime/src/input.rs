//! What a task may ask its client, and what the client said it can answer:
//! the core's typed view of MCP's input requests. The MCP front door turns
//! them into wire messages; stores keep them as JSON in the shape below.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// A JSON object.
type JsonObject = Map<String, Value>;

/// One question a task puts to its client.
///
/// Stored (and shown on the wire) as `{"method": …, "params": …}`:
///
/// ```
/// use mcp_tasks_runtime::store::{FormRequest, InputRequest};
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

impl InputRequest {
    /// The MCP method that carries the question.
    pub fn method(&self) -> &'static str {
        match self {
            Self::Form(_) => "elicitation/create",
            Self::Sample(_) => "sampling/createMessage",
            Self::ListRoots => "roots/list",
        }
    }

    /// The client capability the question needs: `elicitation` (form
    /// mode), `sampling` (`sampling.tools` when the params carry `tools` or
    /// `toolChoice`) or `roots`.
    pub fn capability(&self) -> &'static str {
        match self {
            Self::Form(_) => "elicitation",
            Self::Sample(params) if uses_tools(params) => "sampling.tools",
            Self::Sample(_) => "sampling",
            Self::ListRoots => "roots",
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
            Self::Sample(params) => params.clone(),
            Self::ListRoots => JsonObject::new(),
        }
    }
}

/// Whether sampling params use tools (`tools` or `toolChoice`), which needs
/// the client's `sampling.tools`.
fn uses_tools(params: &JsonObject) -> bool {
    params.contains_key("tools") || params.contains_key("toolChoice")
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
/// fails at once with [`AskError::Unsupported`](crate::AskError::Unsupported).
///
/// Stored as MCP's capability object (`{"elicitation": {}, "roots": {}}`),
/// and read as MCP defines it: `elicitation` allows form questions when it
/// is `{}` (older clients) or names `form` (`{"url": {}}` alone does not);
/// sampling with `tools` or `toolChoice` needs `sampling.tools`.
///
/// ```
/// use mcp_tasks_runtime::store::InputCapabilities;
/// use serde_json::json;
///
/// let caps: InputCapabilities = serde_json::from_value(json!({"elicitation": {}}))?;
/// assert!(caps.elicitation && !caps.sampling);
/// let caps: InputCapabilities = serde_json::from_value(json!({"elicitation": {"url": {}}}))?;
/// assert!(!caps.elicitation, "URL mode only: no forms");
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
    /// `sampling`: [`sample`](crate::sample).
    pub sampling: bool,
    /// `sampling.tools`: [`sample`](crate::sample) with `tools` or
    /// `toolChoice` in its params.
    pub sampling_tools: bool,
    /// `roots`: [`list_roots`](crate::list_roots).
    pub roots: bool,
}

impl InputCapabilities {
    /// Nothing declared: every question fails with `Unsupported`.
    pub const NONE: Self = Self {
        elicitation: false,
        sampling: false,
        sampling_tools: false,
        roots: false,
    };

    /// Everything declared.
    pub const ALL: Self = Self {
        elicitation: true,
        sampling: true,
        sampling_tools: true,
        roots: true,
    };

    /// Whether the client can answer `request`.
    pub fn allows(self, request: &InputRequest) -> bool {
        match request {
            InputRequest::Form(_) => self.elicitation,
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
            sampling: sampling.is_some(),
            sampling_tools: has(sampling, "tools"),
            roots: declared("roots").is_some(),
        }
    }
}

impl From<InputCapabilities> for WireCapabilities {
    fn from(c: InputCapabilities) -> Self {
        let declared = |on: bool| on.then(|| json!({}));
        Self {
            elicitation: declared(c.elicitation),
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
