//! Tool schemas from Rust types: the input schema (one property per
//! parameter, or an `#[args]` struct's root schema) and the output schema.

use schemars::{JsonSchema, SchemaGenerator, generate::SchemaSettings};
use serde_json::{Value, json};

use super::JsonObject;

/// The generator every tool schema comes from: JSON Schema 2020-12.
pub(crate) fn generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12().into_generator()
}

/// `value` if it is an object, else an empty object.
pub(crate) fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

/// The root schema of `T`.
pub(crate) fn root_schema<T: JsonSchema>() -> JsonObject {
    object(generator().into_root_schema_for::<T>().to_value())
}

/// The `outputSchema` of a tool returning `T`: its root schema when `T` is
/// an object (structured content), else none.
pub(crate) fn output_schema<T: JsonSchema>() -> Option<JsonObject> {
    let schema = root_schema::<T>();
    (schema.get("type") == Some(&json!("object"))).then_some(schema)
}

/// The input schema of a tool with no arguments.
pub(crate) fn no_args_schema() -> JsonObject {
    object(json!({"type": "object", "additionalProperties": false}))
}

/// Builds the input schema of a tool with one argument per parameter.
#[derive(Debug)]
pub struct ArgsSchema {
    generator: SchemaGenerator,
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
            generator: generator(),
            properties: JsonObject::new(),
            required: Vec::new(),
        }
    }

    /// Adds the argument `name` with `schema` (from [`Self::generator`]),
    /// described by its parameter's doc comment.
    pub(crate) fn add(
        &mut self,
        name: &str,
        mut schema: Value,
        optional: bool,
        description: Option<&str>,
    ) {
        if let Some(d) = description {
            match &mut schema {
                Value::Object(map) => {
                    map.insert("description".into(), json!(d));
                }
                // `true`: any value.
                _ => schema = json!({"description": d}),
            }
        }
        self.properties.insert(name.to_owned(), schema);
        if !optional {
            self.required.push(json!(name));
        }
    }

    /// Where argument schemas put their definitions.
    pub(crate) fn generator(&mut self) -> &mut SchemaGenerator {
        &mut self.generator
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
        // The call is refused, naming the key, when it carries another.
        root.insert("additionalProperties".into(), Value::Bool(false));
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
