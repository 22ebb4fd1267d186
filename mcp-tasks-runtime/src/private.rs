//! Not public API: the one door generated code goes through. Everything here
//! may change in any release; the macro crate is pinned to this exact version.

use std::{fmt::Display, marker::PhantomData};

pub use core;
pub use inventory;
pub use schemars;
pub use serde;
pub use serde_json;
pub use std::boxed::Box;
pub use std::string::String;
pub use std::time::Duration;

pub use crate::elicit::{Elicit, ElicitField, decode_content, form_schema};
pub use crate::error::ToolError;
pub use crate::tool::{
    Annotations, JsonObject, Location, Registration, TaskPolicy, ToolDescriptor, ToolFuture,
    ToolOutcome,
};

use schemars::JsonSchema;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};

use crate::error::RpcError;

/// The input schema of an args struct: JSON Schema 2020-12, object at the root.
pub fn args_schema<T: JsonSchema>() -> JsonObject {
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<T>();
    let Value::Object(mut map) = schema.to_value() else {
        return JsonObject::new();
    };
    // The generated struct's name is an implementation detail.
    if map.get("title").and_then(Value::as_str) == Some("__McpTasksArgs") {
        map.remove("title");
    }
    map
}

/// The input schema of a tool with no arguments.
pub fn empty_args_schema() -> JsonObject {
    let Value::Object(map) = json!({"type": "object", "additionalProperties": false}) else {
        unreachable!()
    };
    map
}

/// Decodes a tool's arguments; the error names the offending field.
///
/// # Errors
///
/// `"<field>: <problem>"`.
pub fn decode_args<T: DeserializeOwned>(args: JsonObject) -> Result<T, String> {
    decode_content(Value::Object(args))
}

/// Asserts at compile time that a parameter type can be a tool argument.
pub const fn assert_arg<T: ToolArgument>() {}

/// A type a tool parameter can have.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool argument",
    label = "this parameter's type must implement `Deserialize` and `JsonSchema`",
    note = "tool arguments are decoded from JSON and described by a JSON Schema: derive `serde::Deserialize` and `schemars::JsonSchema` on `{Self}`"
)]
pub trait ToolArgument {}
impl<T: DeserializeOwned + JsonSchema> ToolArgument for T {}

/// Asserts at compile time that a type can be asked with `ask_user`.
pub const fn assert_elicit_field<T: ElicitField>() {}

/// Boxes a tool's future.
pub fn boxed<F>(fut: F) -> ToolFuture
where
    F: core::future::Future<Output = ToolOutcome> + Send + 'static,
{
    Box::pin(fut)
}

/// Tags a tool's output type for autoref dispatch: raw result > text > structured.
#[derive(Debug)]
pub struct OutputTag<T>(PhantomData<T>);

impl<T> OutputTag<T> {
    /// The tag.
    pub const NEW: Self = Self(PhantomData);

    /// The tag of a value's type.
    pub fn of(_: &T) -> Self {
        Self(PhantomData)
    }
}

/// Tier 1: a raw `CallToolResult`, passed through.
pub trait RawOutput {
    /// The kind.
    fn output_kind(&self) -> RawKind {
        RawKind
    }
}
impl RawOutput for &&OutputTag<rmcp::model::CallToolResult> {}

/// Tier 2: text.
pub trait TextOutput {
    /// The kind.
    fn output_kind(&self) -> TextKind {
        TextKind
    }
}
impl<T: IntoText> TextOutput for &OutputTag<T> {}

/// Tier 3: structured content.
pub trait StructuredOutput<T> {
    /// The kind.
    fn output_kind(&self) -> StructuredKind<T> {
        StructuredKind(PhantomData)
    }
}
impl<T: Serialize + JsonSchema> StructuredOutput<T> for OutputTag<T> {}

/// A type that becomes a text result.
pub trait IntoText {
    /// The text.
    fn into_text(self) -> Option<String>;
}
impl IntoText for String {
    fn into_text(self) -> Option<String> {
        Some(self)
    }
}
impl IntoText for &'static str {
    fn into_text(self) -> Option<String> {
        Some(self.to_owned())
    }
}
impl IntoText for std::borrow::Cow<'static, str> {
    fn into_text(self) -> Option<String> {
        Some(self.into_owned())
    }
}
impl IntoText for () {
    fn into_text(self) -> Option<String> {
        None
    }
}

fn text_result(text: Option<String>, is_error: bool) -> JsonObject {
    let content = match text {
        Some(t) => json!([{"type": "text", "text": t}]),
        None => json!([]),
    };
    let Value::Object(map) = json!({"content": content, "isError": is_error}) else {
        unreachable!()
    };
    map
}

/// Output kind: raw result.
#[derive(Debug)]
pub struct RawKind;
impl RawKind {
    /// No output schema.
    pub fn output_schema(&self) -> Option<JsonObject> {
        None
    }
    /// The result as JSON.
    pub fn into_outcome(self, v: rmcp::model::CallToolResult) -> ToolOutcome {
        match serde_json::to_value(v) {
            Ok(Value::Object(mut map)) => {
                map.remove("resultType");
                Ok(map)
            }
            Ok(_) | Err(_) => Err(RpcError::internal("the tool result does not serialize")),
        }
    }
}

/// Output kind: text.
#[derive(Debug)]
pub struct TextKind;
impl TextKind {
    /// No output schema.
    pub fn output_schema(&self) -> Option<JsonObject> {
        None
    }
    /// The text as a result.
    pub fn into_outcome<T: IntoText>(self, v: T) -> ToolOutcome {
        Ok(text_result(v.into_text(), false))
    }
}

/// Output kind: structured.
#[derive(Debug)]
pub struct StructuredKind<T>(PhantomData<T>);
impl<T: Serialize + JsonSchema> StructuredKind<T> {
    /// The output schema, when `T` is an object.
    pub fn output_schema(&self) -> Option<JsonObject> {
        let map = args_schema::<T>();
        (map.get("type") == Some(&json!("object"))).then_some(map)
    }
    /// `structuredContent` plus its JSON as text.
    pub fn into_outcome(self, v: T) -> ToolOutcome {
        let value = serde_json::to_value(&v).map_err(|e| {
            RpcError::internal(format!("the tool's output does not serialize: {e}"))
        })?;
        let text = value.to_string();
        let mut result = text_result(Some(text), false);
        if value.is_object() && self.output_schema().is_some() {
            result.insert("structuredContent".into(), value);
        }
        Ok(result)
    }
}

/// Tags a tool's error for autoref dispatch: [`ToolError`] > `Display`.
#[derive(Debug)]
pub struct ErrTag<E>(pub E);

/// Tier 1: `ToolError`, which may carry a JSON-RPC error.
pub trait ToolErrorOutcome {
    /// The outcome.
    fn error_outcome(&self) -> ToolOutcome;
}
impl ToolErrorOutcome for &ErrTag<ToolError> {
    fn error_outcome(&self) -> ToolOutcome {
        match self.0.as_rpc() {
            Some(e) => Err(e.clone()),
            None => Ok(text_result(Some(self.0.to_string()), true)),
        }
    }
}

/// Tier 2: any `Display` error: a tool error with its text.
pub trait DisplayErrorOutcome {
    /// The outcome.
    fn error_outcome(&self) -> ToolOutcome;
}
impl<E: Display> DisplayErrorOutcome for ErrTag<E> {
    fn error_outcome(&self) -> ToolOutcome {
        Ok(text_result(Some(self.0.to_string()), true))
    }
}

/// Decodes one argument; a missing one decodes from `null` (so `Option`s may
/// be left out).
///
/// # Errors
///
/// A message naming the argument.
pub fn arg<T: DeserializeOwned>(args: &mut JsonObject, name: &str) -> Result<T, String> {
    match args.remove(name) {
        None => serde_json::from_value(Value::Null)
            .map_err(|_| format!("missing required argument `{name}`")),
        Some(v) => serde_path_to_error::deserialize(v).map_err(|e| {
            let path = e.path().to_string();
            if path == "." {
                format!("`{name}`: {}", e.inner())
            } else {
                format!("`{name}.{path}`: {}", e.inner())
            }
        }),
    }
}

/// Builds the input schema of a tool with one argument per parameter.
#[allow(missing_debug_implementations)]
pub struct ArgsSchema {
    generator: schemars::SchemaGenerator,
    properties: JsonObject,
    required: Vec<Value>,
}

impl Default for ArgsSchema {
    fn default() -> Self {
        Self::new()
    }
}

impl ArgsSchema {
    /// An object schema with no properties yet.
    pub fn new() -> Self {
        Self {
            generator: schemars::generate::SchemaSettings::draft2020_12().into_generator(),
            properties: JsonObject::new(),
            required: Vec::new(),
        }
    }

    /// Adds argument `name` of type `T`.
    #[must_use]
    pub fn arg<T: JsonSchema + DeserializeOwned>(
        mut self,
        name: &str,
        description: Option<&str>,
    ) -> Self {
        let mut schema = self.generator.subschema_for::<T>().to_value();
        if let (Some(d), Value::Object(map)) = (description, &mut schema) {
            map.insert("description".into(), json!(d));
        }
        self.properties.insert(name.to_owned(), schema);
        if serde_json::from_value::<T>(Value::Null).is_err() {
            self.required.push(json!(name));
        }
        self
    }

    /// The finished schema.
    pub fn finish(mut self) -> JsonObject {
        let mut root = JsonObject::new();
        root.insert(
            "$schema".into(),
            json!("https://json-schema.org/draft/2020-12/schema"),
        );
        root.insert("type".into(), json!("object"));
        root.insert("properties".into(), Value::Object(self.properties));
        if !self.required.is_empty() {
            root.insert("required".into(), Value::Array(self.required));
        }
        let defs = self.generator.take_definitions(true);
        if !defs.is_empty() {
            root.insert("$defs".into(), Value::Object(defs));
        }
        root
    }
}

/// The `requestedSchema` of a unit-only enum asked directly: one `value` field.
pub fn choice_schema<T: JsonSchema>() -> JsonObject {
    let mut settings = schemars::generate::SchemaSettings::draft2020_12();
    settings.inline_subschemas = true;
    let mut field = settings
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    if let Value::Object(m) = &mut field {
        m.remove("$schema");
        m.remove("title");
    }
    let wrapper = json!({"type": "object", "properties": {"value": field}, "required": ["value"]});
    let Value::Object(map) = wrapper else {
        unreachable!()
    };
    crate::elicit::clean_form(map)
}

/// Decodes the answer to [`choice_schema`].
///
/// # Errors
///
/// When `value` is missing or not one of the choices.
pub fn decode_choice<T: DeserializeOwned>(content: Value) -> Result<T, String> {
    match content {
        Value::Object(mut m) => match m.remove("value") {
            Some(v) => decode_content(v).map_err(|e| format!("value: {e}")),
            None => Err("missing field `value`".into()),
        },
        _ => Err("expected an object".into()),
    }
}
