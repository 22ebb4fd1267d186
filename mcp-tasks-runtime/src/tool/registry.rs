//! The set of tools a server offers: collected at link time or built by hand.

use std::{borrow::Cow, collections::BTreeMap, sync::Arc};

use serde_json::{Value, json};

use crate::{
    error::{Error, Result},
    tool::{JsonObject, Registration, StateMap, ToolDescriptor},
};

/// A registered tool with its schemas computed once.
#[derive(Debug, Clone)]
pub struct RegisteredTool {
    descriptor: ToolDescriptor,
    definition: Arc<JsonObject>,
}

impl RegisteredTool {
    /// The tool's descriptor.
    pub fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    /// The MCP `Tool` definition, as `tools/list` shows it.
    pub fn definition(&self) -> &JsonObject {
        &self.definition
    }
}

/// The tools a server offers, by name, in a deterministic (sorted) order.
///
/// [`Registry::from_inventory`] collects every `#[task_tool]` linked into the
/// binary; [`Registry::new`] and [`Registry::with`] build a subset by hand.
///
/// ```
/// use mcp_tasks_runtime::{task_tool, tool::Registry};
///
/// /// Says hello.
/// #[task_tool]
/// async fn hello(name: String) -> String {
///     format!("Hello, {name}!")
/// }
///
/// let registry = Registry::new().with(hello_tool()).unwrap();
/// assert_eq!(registry.get("hello").unwrap().descriptor().description(), Some("Says hello."));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Registry {
    tools: BTreeMap<Cow<'static, str>, RegisteredTool>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every tool registered with `#[task_tool]` in the binary.
    ///
    /// # Errors
    ///
    /// [`Error::DuplicateTool`] naming both definitions when two tools share a
    /// name; [`Error::InvalidTool`] for a tool whose name or schema is not valid MCP.
    pub fn from_inventory() -> Result<Self> {
        let mut registry = Self::new();
        let mut all: Vec<&'static ToolDescriptor> = inventory::iter::<Registration>
            .into_iter()
            .map(|r| (r.0)())
            .collect();
        // Link order is unspecified: sort so that errors name definitions stably.
        all.sort_by_key(|d| (d.location.path, d.location.file, d.location.line));
        for descriptor in all {
            registry.insert(descriptor.clone())?;
        }
        Ok(registry)
    }

    /// Adds `descriptor`.
    ///
    /// # Errors
    ///
    /// As [`Registry::from_inventory`].
    pub fn with(mut self, descriptor: &ToolDescriptor) -> Result<Self> {
        self.insert(descriptor.clone())?;
        Ok(self)
    }

    /// Adds `descriptor` in place.
    ///
    /// # Errors
    ///
    /// As [`Registry::from_inventory`].
    pub fn insert(&mut self, descriptor: ToolDescriptor) -> Result<()> {
        if let Some(existing) = self.tools.get(descriptor.name()) {
            let first = existing.descriptor.location;
            let second = descriptor.location;
            return Err(Error::DuplicateTool {
                name: descriptor.name().to_owned(),
                first: first.path.to_owned(),
                first_location: first.to_string(),
                second: second.path.to_owned(),
                second_location: second.to_string(),
            });
        }
        let definition = definition(&descriptor)?;
        self.tools.insert(
            descriptor.name.clone(),
            RegisteredTool {
                descriptor,
                definition: Arc::new(definition),
            },
        );
        Ok(())
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools.get(name)
    }

    /// Checks that `state` holds every [`State<T>`](crate::State) type the
    /// tools take.
    ///
    /// # Errors
    ///
    /// [`Error::MissingState`] naming the first tool (by name) that takes a
    /// type `state` lacks, and the type.
    pub fn check_state(&self, state: &StateMap) -> Result<()> {
        for tool in self.tools.values() {
            let d = &tool.descriptor;
            if let Some(need) = d.state.iter().find(|n| !state.provides(n)) {
                return Err(Error::MissingState {
                    tool: d.name().to_owned(),
                    type_name: need.type_name().to_owned(),
                    location: d.location.to_string(),
                });
            }
        }
        Ok(())
    }

    /// All tools, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.tools.values()
    }

    /// How many tools there are.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

/// Whether `name` is a valid MCP tool name: 1–128 characters of `[A-Za-z0-9_.-]`.
pub(crate) fn is_valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn definition(d: &ToolDescriptor) -> Result<JsonObject> {
    let invalid = |message: String| Error::InvalidTool {
        name: d.name().to_owned(),
        message,
    };
    if !is_valid_tool_name(d.name()) {
        return Err(invalid(
            "a tool name is 1 to 128 characters of A-Z, a-z, 0-9, `_`, `-` and `.`".into(),
        ));
    }
    if d.version == 0 {
        return Err(invalid(
            "a tool's version starts at 1 (`with_version(1)`, or `#[task_tool(version = 1)]`)"
                .into(),
        ));
    }
    if d.replays_from == 0 || d.replays_from > d.version {
        return Err(invalid(format!(
            "it replays from version {} but is version {}: the oldest version it replays is \
             between 1 and its own version",
            d.replays_from, d.version
        )));
    }
    let input = d.input_schema();
    if input.get("type") != Some(&json!("object")) {
        return Err(invalid(format!(
            "the input schema must have `\"type\": \"object\"` at its root (an `#[args]` type must be a struct with named fields: its fields are the arguments), found {}",
            Value::Object(input.clone())
        )));
    }
    let output = d.output_schema();
    if let Some(output) = &output
        && output.get("type") != Some(&json!("object"))
    {
        return Err(invalid(format!(
            "the output schema must have `\"type\": \"object\"` at its root, found {}",
            Value::Object(output.clone())
        )));
    }
    if let Some(defined) = d.definition() {
        // Shown as given, its schemas checked.
        return Ok(defined.clone());
    }
    let mut tool = JsonObject::new();
    tool.insert("name".into(), json!(d.name));
    if let Some(title) = d.title {
        tool.insert("title".into(), json!(title));
    }
    if let Some(description) = d.description {
        tool.insert("description".into(), json!(description));
    }
    tool.insert("inputSchema".into(), Value::Object(input));
    if let Some(output) = output {
        tool.insert("outputSchema".into(), Value::Object(output));
    }
    if !d.annotations.is_empty() {
        let mut a = JsonObject::new();
        let hints = [
            ("readOnlyHint", d.annotations.read_only),
            ("destructiveHint", d.annotations.destructive),
            ("idempotentHint", d.annotations.idempotent),
            ("openWorldHint", d.annotations.open_world),
        ];
        for (key, value) in hints {
            if let Some(v) = value {
                a.insert(key.into(), json!(v));
            }
        }
        tool.insert("annotations".into(), Value::Object(a));
    }
    Ok(tool)
}
