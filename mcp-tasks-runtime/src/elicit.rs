//! What `ask_user` may ask: flat forms MCP's form elicitation can express.

use schemars::{JsonSchema, generate::SchemaSettings};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

/// A type that can be asked of the user as an MCP form (`elicitation/create`,
/// form mode): a flat object whose fields are strings, numbers, integers,
/// booleans, unit-only enums, or `Option`s of those.
///
/// Derive it with `#[derive(Elicit)]` next to `Deserialize` and `JsonSchema`;
/// the derive checks every field at compile time and names the one that a form
/// cannot express. `bool` is implemented for [`confirm`](crate::confirm).
///
/// ```
/// use mcp_tasks_runtime::Elicit;
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema, Elicit)]
/// struct Approval {
///     /// Roll it out now?
///     approve: bool,
///     /// Why (optional).
///     reason: Option<String>,
/// }
///
/// let schema = <Approval as Elicit>::requested_schema();
/// assert_eq!(schema["properties"]["approve"]["type"], "boolean");
/// assert_eq!(schema["required"], serde_json::json!(["approve"]));
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be asked with `ask_user`",
    label = "not a form MCP elicitation can express",
    note = "derive it: `#[derive(Deserialize, JsonSchema, Elicit)]` on a struct of string / number / integer / boolean / enum fields"
)]
pub trait Elicit: Sized {
    /// The `requestedSchema`: a flat object schema.
    fn requested_schema() -> Map<String, Value>;

    /// Decodes an `accept` answer's `content`.
    ///
    /// # Errors
    ///
    /// A message when the content does not fit.
    fn from_content(content: Value) -> Result<Self, String>;
}

/// A field type a form can hold: string, number, integer, boolean, a unit-only
/// enum (derive [`Elicit`] on it), or `Option` of one of those.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a field of an MCP form",
    label = "this field is not a string, number, integer, boolean or unit-only enum",
    note = "MCP form elicitation accepts only flat objects of primitive fields; ask for nested data in several questions or as a string"
)]
pub trait ElicitField {}

macro_rules! fields {
    ($($t:ty),*) => { $(impl ElicitField for $t {})* };
}
fields!(
    String, bool, i8, i16, i32, i64, isize, u8, u16, u32, u64, usize, f32, f64
);
impl<T: ElicitField> ElicitField for Option<T> {}

impl Elicit for bool {
    fn requested_schema() -> Map<String, Value> {
        let Value::Object(map) = json!({
            "type": "object",
            "properties": {"confirm": {"type": "boolean", "title": "Confirm"}},
            "required": ["confirm"],
        }) else {
            unreachable!()
        };
        map
    }

    fn from_content(content: Value) -> Result<Self, String> {
        content
            .get("confirm")
            .and_then(Value::as_bool)
            .ok_or_else(|| "expected a boolean field `confirm`".to_owned())
    }
}

/// Builds the `requestedSchema` of a derived [`Elicit`] struct from its
/// `JsonSchema`: inlined, flat, with nullable fields made optional.
pub fn form_schema<T: JsonSchema>() -> Map<String, Value> {
    let mut settings = SchemaSettings::draft2020_12();
    settings.inline_subschemas = true;
    let schema = settings.into_generator().into_root_schema_for::<T>();
    match schema.to_value() {
        Value::Object(root) => clean_form(root),
        _ => Map::new(),
    }
}

/// Reduces an object schema to MCP's flat form vocabulary.
pub(crate) fn clean_form(mut root: Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("type".into(), json!("object"));
    if let Some(Value::Object(props)) = root.remove("properties") {
        let cleaned: Map<String, Value> =
            props.into_iter().map(|(k, v)| (k, primitive(v))).collect();
        out.insert("properties".into(), Value::Object(cleaned));
    } else {
        out.insert("properties".into(), json!({}));
    }
    if let Some(Value::Array(req)) = root.remove("required")
        && !req.is_empty()
    {
        out.insert("required".into(), Value::Array(req));
    }
    out
}

/// Rewrites one property schema into MCP's primitive schema vocabulary.
fn primitive(v: Value) -> Value {
    let Value::Object(mut p) = v else { return v };
    // `Option<T>` comes out as `"type": ["T", "null"]` or `anyOf: [T, null]`.
    if let Some(Value::Array(types)) = p.get("type").cloned() {
        let non_null: Vec<Value> = types.into_iter().filter(|t| t != "null").collect();
        if non_null.len() == 1 {
            p.insert("type".into(), non_null[0].clone());
        }
    }
    if let Some(Value::Array(any)) = p.remove("anyOf") {
        let mut non_null = any
            .into_iter()
            .filter(|s| s.get("type") != Some(&json!("null")));
        if let (Some(Value::Object(inner)), None) = (non_null.next(), non_null.next()) {
            for (k, v) in inner {
                p.entry(k).or_insert(v);
            }
        }
    }
    if let Some(Value::Array(e)) = p.get_mut("enum") {
        e.retain(|x| !x.is_null());
    }
    if let Some(Value::Array(one_of)) = p.get_mut("oneOf") {
        // Unit enum variants with docs: keep `{const, title}` pairs.
        for s in one_of.iter_mut() {
            if let Value::Object(o) = s {
                o.remove("type");
                if let Some(d) = o.remove("description") {
                    o.entry("title").or_insert(d);
                }
            }
        }
        p.entry("type").or_insert(json!("string"));
    }
    // Formats MCP forms do not know (`uint32`, `double`, ...) are dropped.
    if let Some(Value::String(f)) = p.get("format")
        && !matches!(f.as_str(), "email" | "uri" | "date" | "date-time")
    {
        p.remove("format");
    }
    p.remove("$schema");
    Value::Object(p)
}

/// Decodes `content` into `T`, for derived [`Elicit`] impls.
///
/// # Errors
///
/// The serde error, naming the field.
pub fn decode_content<T: DeserializeOwned>(content: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(content).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.inner().to_string()
        } else {
            format!("{path}: {}", e.inner())
        }
    })
}
