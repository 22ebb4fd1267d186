//! What `ask_user` may ask: flat forms MCP's form elicitation can express.

use schemars::{JsonSchema, generate::SchemaSettings};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::tool::schema::object;

/// A type that can be asked of the user as an MCP form (`elicitation/create`,
/// form mode): a flat object whose fields are strings, numbers, integers,
/// booleans, unit-only enums (one choice), `Vec`s of unit-only enums (several
/// choices), or `Option`s of those.
///
/// Derive it with `#[derive(Elicit)]` next to `Deserialize` and `JsonSchema`;
/// the derive checks every field at compile time and names the one that a form
/// cannot express. On a unit-only enum it makes a choice, which can be a
/// field of a form or be asked alone. `bool` is implemented for
/// [`confirm`](crate::confirm).
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
    note = "derive it: `#[derive(Deserialize, JsonSchema, Elicit)]` on a struct of string / number / integer / boolean / enum fields",
    note = "a type shown as `!` or `_` means no form type was named: name it, as in `let answer: MyForm = ask_user(..).await?` or `ask_user::<MyForm>(..)`"
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
/// enum (derive [`Elicit`] on it), a `Vec` of such an enum (a multi-select),
/// or `Option` of one of those.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a field of an MCP form",
    label = "this field is not a string, number, integer, boolean or unit-only enum",
    note = "MCP form elicitation accepts only flat objects of primitive fields; ask for nested data in several questions or as a string"
)]
pub trait ElicitField {}

/// A unit-only enum with `#[derive(Elicit)]`: a choice, so `Vec<T>` is a
/// multi-select field. Implemented by the derive only.
#[doc(hidden)]
pub trait ElicitChoice: ElicitField {}

macro_rules! fields {
    ($($t:ty),*) => { $(impl ElicitField for $t {})* };
}
fields!(
    String, bool, i8, i16, i32, i64, isize, u8, u16, u32, u64, usize, f32, f64
);
impl<T: ElicitField> ElicitField for Option<T> {}
// Not recommended in errors: for `Vec<String>`, "`String` is not a choice"
// would hide the message that names the form's field.
#[diagnostic::do_not_recommend]
impl<T: ElicitChoice> ElicitField for Vec<T> {}

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

/// The `requestedSchema` of a unit-only enum asked alone: one `value` field
/// holding the choice.
pub(crate) fn choice_schema<T: JsonSchema>() -> Map<String, Value> {
    let mut settings = SchemaSettings::draft2020_12();
    settings.inline_subschemas = true;
    let mut field = settings
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    if let Value::Object(m) = &mut field {
        m.remove("$schema");
        m.remove("title");
    }
    clean_form(object(json!({
        "type": "object",
        "properties": {"value": field},
        "required": ["value"],
    })))
}

/// Decodes the answer to a choice asked alone: its `value` field.
pub(crate) fn decode_choice<T: DeserializeOwned>(content: Value) -> Result<T, String> {
    match content {
        Value::Object(mut m) => match m.remove("value") {
            Some(v) => decode_content(v).map_err(|e| format!("value: {e}")),
            None => Err("missing field `value`".into()),
        },
        _ => Err("expected an object".into()),
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
    let Value::Object(mut p) = non_null(v) else {
        return json!({"type": "string"});
    };
    if p.get("type") == Some(&json!("array")) {
        // A multi-select: `items` is a choice.
        if let Some(items) = p.remove("items") {
            let items = match choice(non_null(items)) {
                Choice::Untitled(values) => json!({"type": "string", "enum": values}),
                Choice::Titled(options) => json!({"anyOf": options}),
                Choice::Other(other) => other,
            };
            p.insert("items".into(), items);
        }
    } else if p.contains_key("oneOf") || p.contains_key("anyOf") || p.contains_key("enum") {
        let kept: Vec<(String, Value)> = ["description", "title", "default"]
            .into_iter()
            .filter_map(|k| p.remove(k).map(|v| (k.to_owned(), v)))
            .collect();
        p = match choice(Value::Object(p)) {
            Choice::Untitled(values) => object(json!({"type": "string", "enum": values})),
            Choice::Titled(options) => object(json!({"type": "string", "oneOf": options})),
            Choice::Other(Value::Object(other)) => other,
            Choice::Other(_) => Map::new(),
        };
        p.extend(kept);
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

/// `Option<T>`'s schema without its `null`: `"type": ["T", "null"]` or
/// `anyOf: [T, {"type": "null"}]` becomes `T`; `null` leaves `enum`s.
fn non_null(v: Value) -> Value {
    let Value::Object(mut p) = v else { return v };
    if let Some(Value::Array(types)) = p.get("type").cloned() {
        let non_null: Vec<Value> = types.into_iter().filter(|t| t != "null").collect();
        if non_null.len() == 1 {
            p.insert("type".into(), non_null[0].clone());
        }
    }
    if let Some(Value::Array(any)) = p.get("anyOf").cloned() {
        let mut rest = any.into_iter().filter(|s| {
            s.get("type") != Some(&json!("null")) && s.get("const") != Some(&Value::Null)
        });
        if let (Some(Value::Object(inner)), None) = (rest.next(), rest.next()) {
            p.remove("anyOf");
            for (k, v) in inner {
                p.entry(k).or_insert(v);
            }
        }
    }
    if let Some(Value::Array(e)) = p.get_mut("enum") {
        e.retain(|x| !x.is_null());
    }
    Value::Object(p)
}

enum Choice {
    /// `enum: [...]`: plain values.
    Untitled(Vec<Value>),
    /// `{const, title}` options (some variants have doc comments).
    Titled(Vec<Value>),
    Other(Value),
}

/// Reads a unit-only enum's schema, as schemars writes it: `enum: [...]`, or
/// `oneOf` of `{const, description}` and `{enum: [...]}` when some variants
/// are documented.
fn choice(v: Value) -> Choice {
    let Value::Object(p) = &v else {
        return Choice::Other(v);
    };
    if let Some(Value::Array(values)) = p.get("enum") {
        return Choice::Untitled(values.clone());
    }
    let Some(Value::Array(options)) = p.get("oneOf").or_else(|| p.get("anyOf")) else {
        return Choice::Other(v);
    };
    let mut titled = Vec::new();
    for option in options {
        if let Some(Value::Array(values)) = option.get("enum") {
            titled.extend(values.iter().map(|c| json!({"const": c, "title": c})));
        } else if let Some(c) = option.get("const") {
            let title = option
                .get("title")
                .or_else(|| option.get("description"))
                .unwrap_or(c);
            titled.push(json!({"const": c, "title": title}));
        } else {
            return Choice::Other(v);
        }
    }
    Choice::Titled(titled)
}

/// Decodes `content` into `T`, for derived [`Elicit`] impls.
///
/// # Errors
///
/// The serde error, naming the field.
pub(crate) fn decode_content<T: DeserializeOwned>(content: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(content).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.inner().to_string()
        } else {
            format!("{path}: {}", e.inner())
        }
    })
}
