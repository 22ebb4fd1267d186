//! What a task tool is: its [`ToolDescriptor`] (name, docs, schemas, policy,
//! handler) and the values its handler produces. `#[task_tool]` builds these;
//! name them when building a tool by hand.

pub(crate) mod args;
pub(crate) mod output;
mod registry;
pub(crate) mod schema;
mod state;

use std::{borrow::Cow, fmt, future::Future, pin::Pin, sync::Arc, time::Duration};

use serde_json::{Map, Value};

pub use self::{
    registry::{RegisteredTool, Registry},
    state::{State, StateMap, StateNeed},
};
pub use crate::error::RpcError;

/// A JSON object.
pub type JsonObject = Map<String, Value>;

/// The future a tool handler returns.
pub type ToolFuture = Pin<Box<dyn Future<Output = ToolOutcome> + Send + 'static>>;

/// How a tool call ended: a `CallToolResult` (as JSON, `isError` included) or a
/// JSON-RPC error (the task ends `failed`).
pub type ToolOutcome = Result<JsonObject, RpcError>;

/// Whether a tool runs as a task. Internal policy: it never goes on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskPolicy {
    /// Always inline: the client gets the plain result.
    Forbidden,
    /// A task when the request declared the tasks extension, inline otherwise.
    #[default]
    Optional,
    /// Only as a task: a client that did not declare the extension gets `-32021`.
    Required,
}

/// MCP tool annotations (hints to the client; never trusted for security).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Annotations {
    /// `readOnlyHint`: the tool does not modify its environment.
    pub read_only: Option<bool>,
    /// `destructiveHint`: the tool may perform destructive updates.
    pub destructive: Option<bool>,
    /// `idempotentHint`: repeated calls with the same arguments have no further effect.
    pub idempotent: Option<bool>,
    /// `openWorldHint`: the tool interacts with external entities.
    pub open_world: Option<bool>,
}

impl Annotations {
    /// No hints.
    pub const NONE: Self = Self {
        read_only: None,
        destructive: None,
        idempotent: None,
        open_world: None,
    };

    pub(crate) fn is_empty(&self) -> bool {
        *self == Self::NONE
    }
}

/// Where a tool was defined, for diagnostics such as duplicate names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// `module_path!()` of the definition, with the fn name.
    pub path: &'static str,
    /// `file!()`.
    pub file: &'static str,
    /// `line!()`.
    pub line: u32,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// Decodes a call's arguments and, if they fit, returns the future that runs the
/// tool, with the [`State`] values it takes from the engine's
/// [`StateMap`]. Errors name the offending field (or the missing state type).
pub type PrepareFn = fn(JsonObject, &StateMap) -> Result<ToolFuture, String>;

/// The handler of a tool built at run time ([`ToolDescriptor::from_definition`]):
/// a [`PrepareFn`] that may hold what it needs, such as a connection or the
/// tool's own name.
pub type Handler = Arc<dyn Fn(JsonObject, &StateMap) -> Result<ToolFuture, String> + Send + Sync>;

/// How a descriptor runs its tool: a fn of the binary, or a handler built at run time.
#[derive(Clone)]
enum Prepare {
    Fn(PrepareFn),
    Handler(Handler),
}

/// Everything the framework knows about one tool.
///
/// `#[task_tool]` builds one per fn (and registers it); it can also be built by
/// hand with [`ToolDescriptor::new`] and the `with_*` methods (for tests, or
/// a tool written without the macro), or from an MCP `Tool` definition known
/// only at run time with [`ToolDescriptor::from_definition`] (a tool another
/// server offers, say).
#[derive(Clone)]
pub struct ToolDescriptor {
    pub(crate) name: Cow<'static, str>,
    pub(crate) title: Option<&'static str>,
    pub(crate) description: Option<&'static str>,
    pub(crate) policy: TaskPolicy,
    pub(crate) ttl: Option<Duration>,
    pub(crate) poll_interval: Option<Duration>,
    pub(crate) annotations: Annotations,
    pub(crate) input_schema: fn() -> JsonObject,
    pub(crate) output_schema: fn() -> Option<JsonObject>,
    prepare: Prepare,
    /// The `Tool` definition it was built from, shown as given.
    pub(crate) defined: Option<Arc<JsonObject>>,
    pub(crate) state: &'static [StateNeed],
    pub(crate) location: Location,
    pub(crate) version: u32,
    pub(crate) replays_from: u32,
}

debug_fields!(ToolDescriptor |t|
    name: t.name,
    policy: t.policy,
    version: t.version,
    location: t.location,
);

fn no_output_schema() -> Option<JsonObject> {
    None
}

fn no_input_schema() -> JsonObject {
    JsonObject::new()
}

impl ToolDescriptor {
    /// A tool named `name` whose arguments follow `input_schema` and which runs
    /// `prepare`. Everything else starts at its default.
    pub const fn new(
        name: &'static str,
        input_schema: fn() -> JsonObject,
        prepare: PrepareFn,
        location: Location,
    ) -> Self {
        Self::with_parts(
            Cow::Borrowed(name),
            input_schema,
            Prepare::Fn(prepare),
            location,
        )
    }

    /// A tool of these parts, everything else at its default.
    const fn with_parts(
        name: Cow<'static, str>,
        input_schema: fn() -> JsonObject,
        prepare: Prepare,
        location: Location,
    ) -> Self {
        Self {
            name,
            title: None,
            description: None,
            policy: TaskPolicy::Optional,
            ttl: None,
            poll_interval: None,
            annotations: Annotations::NONE,
            input_schema,
            output_schema: no_output_schema,
            prepare,
            defined: None,
            state: &[],
            location,
            version: 1,
            replays_from: 1,
        }
    }

    /// A tool whose MCP `Tool` definition (`name`, `inputSchema`, and any of
    /// `title`, `description`, `outputSchema`, `annotations`, `icons`,
    /// `_meta`) is known only at run time, run by `handler`. `tools/list`
    /// shows the definition as given, but for `execution`, which follows the
    /// tool's [`TaskPolicy`] (set it with [`ToolDescriptor::with_policy`]).
    /// The four annotation hints are read into
    /// [`ToolDescriptor::annotations`].
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// use mcp_tasks_runtime::tool::{Location, Registry, ToolDescriptor, ToolOutcome};
    /// use serde_json::json;
    ///
    /// let definition = json!({
    ///     "name": "echo",
    ///     "description": "Says it back.",
    ///     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
    ///     "annotations": {"idempotentHint": true},
    /// });
    /// let echo = ToolDescriptor::from_definition(
    ///     definition.as_object().cloned().unwrap(),
    ///     Arc::new(|args, _state| {
    ///         Ok(Box::pin(async move {
    ///             let text = args["text"].as_str().unwrap_or_default().to_owned();
    ///             ToolOutcome::Ok(json!({"content": [{"type": "text", "text": text}]})
    ///                 .as_object().cloned().unwrap())
    ///         }))
    ///     }),
    ///     Location { path: "echo", file: file!(), line: line!() },
    /// )
    /// .unwrap();
    /// assert_eq!(echo.annotations().idempotent, Some(true));
    /// let registry = Registry::new().with(&echo).unwrap();
    /// assert_eq!(registry.get("echo").unwrap().definition()["description"], "Says it back.");
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTool`](crate::Error::InvalidTool) when `name` is not a
    /// string or `inputSchema` not an object; the registry checks the rest as
    /// for any tool.
    pub fn from_definition(
        mut definition: JsonObject,
        handler: Handler,
        location: Location,
    ) -> crate::Result<Self> {
        let name = match definition.get("name") {
            Some(Value::String(name)) => name.clone(),
            _ => {
                return Err(crate::Error::InvalidTool {
                    name: String::new(),
                    message: "a tool definition needs a string `name`".into(),
                });
            }
        };
        if !definition.get("inputSchema").is_some_and(Value::is_object) {
            return Err(crate::Error::InvalidTool {
                name,
                message: "a tool definition needs an object `inputSchema`".into(),
            });
        }
        definition.remove("execution");
        let hint = |key: &str| {
            definition
                .get("annotations")
                .and_then(|a| a.get(key)?.as_bool())
        };
        let annotations = Annotations {
            read_only: hint("readOnlyHint"),
            destructive: hint("destructiveHint"),
            idempotent: hint("idempotentHint"),
            open_world: hint("openWorldHint"),
        };
        // Its schemas are read from the definition: `input_schema` is never called.
        let parts = Self::with_parts(
            Cow::Owned(name),
            no_input_schema,
            Prepare::Handler(handler),
            location,
        );
        Ok(Self {
            annotations,
            defined: Some(Arc::new(definition)),
            ..parts
        })
    }

    builder_setters! {
        const;

        /// Sets the tool's version (default 1): the version of its code, recorded
        /// with every task it creates ([`TaskRecord::tool_version`]). Raise it
        /// when a deploy changes the steps the fn takes, and branch on
        /// [`patched`](crate::durable::patched) for the tasks already under way; see
        /// [`ToolDescriptor::with_replays_from`] for the journals it can no longer
        /// replay. `#[task_tool(version = 2)]` sets it. A registry refuses 0.
        ///
        /// [`TaskRecord::tool_version`]: crate::store::TaskRecord::tool_version
        #[must_use]
        pub fn with_version(u32) => version;

        /// Sets the oldest version whose journals this code still replays
        /// (default 1: every version before it). An unfinished task recorded by
        /// an older version is never replayed: the engine fails it when it
        /// starts, with a reason naming the versions.
        /// `#[task_tool(version = 3, replays_from = 2)]` sets it. A registry
        /// refuses 0, and a value above [`ToolDescriptor::version`].
        ///
        /// ```
        /// use mcp_tasks_runtime::tool::{StateMap, JsonObject, Location, ToolDescriptor, ToolFuture};
        ///
        /// fn schema() -> JsonObject {
        ///     serde_json::json!({"type": "object"}).as_object().cloned().unwrap_or_default()
        /// }
        /// fn prepare(_: JsonObject, _: &StateMap) -> Result<ToolFuture, String> {
        ///     Err("not called here".into())
        /// }
        /// let here = Location { path: "report", file: file!(), line: line!() };
        /// let report = ToolDescriptor::new("report", schema, prepare, here)
        ///     .with_version(3)
        ///     .with_replays_from(2);
        /// assert_eq!((report.version(), report.replays_from()), (3, 2));
        /// assert!(report.replays(2) && report.replays(3));
        /// assert!(!report.replays(1), "too old: its tasks are failed at startup");
        /// assert!(!report.replays(4), "too new: left for an instance that serves it");
        /// ```
        #[must_use]
        pub fn with_replays_from(u32) => replays_from;

        /// Sets the human-readable title.
        #[must_use]
        pub fn with_title(&'static str) => title, wrapped in Some;

        /// Sets the description shown to the model.
        #[must_use]
        pub fn with_description(&'static str) => description, wrapped in Some;

        /// Sets the task policy.
        #[must_use]
        pub fn with_policy(TaskPolicy) => policy;

        /// Sets the task TTL (counted from creation).
        #[must_use]
        pub fn with_ttl(Duration) => ttl, wrapped in Some;

        /// Sets the suggested poll interval.
        #[must_use]
        pub fn with_poll_interval(Duration) => poll_interval, wrapped in Some;

        /// Sets the annotations.
        #[must_use]
        pub fn with_annotations(Annotations) => annotations;

        /// Sets the output schema (for tools returning `structuredContent`).
        #[must_use]
        pub fn with_output_schema(fn() -> Option<JsonObject>) => output_schema;

        /// Sets the state types the tool takes ([`State<T>`](crate::State)
        /// parameters): an engine without one of them refuses to start.
        #[must_use]
        pub fn with_state(&'static [StateNeed]) => state;
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tool's title.
    pub fn title(&self) -> Option<&str> {
        self.title.or_else(|| self.defined_str("title"))
    }

    /// The tool's description.
    pub fn description(&self) -> Option<&str> {
        self.description.or_else(|| self.defined_str("description"))
    }

    fn defined_str(&self, key: &str) -> Option<&str> {
        self.defined.as_deref()?.get(key)?.as_str()
    }

    /// The `Tool` definition it was built from
    /// ([`ToolDescriptor::from_definition`]), if it was.
    pub fn definition(&self) -> Option<&JsonObject> {
        self.defined.as_deref()
    }

    /// The task policy.
    pub fn policy(&self) -> TaskPolicy {
        self.policy
    }

    /// The tool's own TTL, if it sets one.
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl
    }

    /// The tool's own poll interval, if it sets one.
    pub fn poll_interval(&self) -> Option<Duration> {
        self.poll_interval
    }

    /// The annotations.
    pub fn annotations(&self) -> Annotations {
        self.annotations
    }

    /// The state types the tool takes.
    pub fn state(&self) -> &'static [StateNeed] {
        self.state
    }

    /// The tool's version (see [`ToolDescriptor::with_version`]).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The oldest version whose journals the tool replays (see
    /// [`ToolDescriptor::with_replays_from`]).
    pub fn replays_from(&self) -> u32 {
        self.replays_from
    }

    /// Whether this code can replay a task recorded by version `recorded`
    /// of the tool: `replays_from ..= version`.
    pub fn replays(&self, recorded: u32) -> bool {
        (self.replays_from..=self.version).contains(&recorded)
    }

    /// The versions this code replays, for messages: `version 2`, or
    /// `versions 2–3`.
    pub(crate) fn served_versions(&self) -> String {
        if self.replays_from == self.version {
            format!("version {}", self.version)
        } else {
            format!("versions {}–{}", self.replays_from, self.version)
        }
    }

    /// Where the tool was defined.
    pub fn location(&self) -> Location {
        self.location
    }

    /// Computes the input schema (the registry caches it).
    pub fn input_schema(&self) -> JsonObject {
        match self.defined_schema("inputSchema") {
            Some(schema) => schema,
            None => (self.input_schema)(),
        }
    }

    /// Computes the output schema, if the tool returns structured content.
    pub fn output_schema(&self) -> Option<JsonObject> {
        match &self.defined {
            Some(_) => self.defined_schema("outputSchema"),
            None => (self.output_schema)(),
        }
    }

    fn defined_schema(&self, key: &str) -> Option<JsonObject> {
        self.defined.as_deref()?.get(key)?.as_object().cloned()
    }

    /// Decodes `arguments` and returns the future that runs the tool once,
    /// handing it its state from `state`.
    ///
    /// # Errors
    ///
    /// A message naming the offending field when the arguments do not fit,
    /// or the state type when `state` lacks one the tool takes.
    pub fn prepare(&self, arguments: JsonObject, state: &StateMap) -> Result<ToolFuture, String> {
        match &self.prepare {
            Prepare::Fn(prepare) => prepare(arguments, state),
            Prepare::Handler(handler) => handler(arguments, state),
        }
    }
}

/// Link-time registration of a tool, collected by [`Registry::from_inventory`].
/// Generated code submits these; not public API.
///
/// [`Registry::from_inventory`]: crate::tool::Registry::from_inventory
#[derive(Debug)]
#[doc(hidden)]
pub struct Registration(pub fn() -> &'static ToolDescriptor);

inventory::collect!(Registration);
