//! Not public API: the one door generated code goes through. Everything here
//! may change in any release; the macro crate is pinned to this exact version.
//!
//! The generated code checks each user type exactly once, in a `const` whose
//! initializer calls a `const fn` bounded by one of the traits below
//! ([`DecodeArg`] and [`DescribeArg`], [`SerializeOutput`] and
//! [`DescribeOutput`], [`DecodeForm`] and [`DescribeForm`], [`FormField`]),
//! each with a `#[diagnostic::on_unimplemented]` message that says what to
//! write. The `const` holds plain fn pointers ([`Arg`], [`ArgsStruct`],
//! [`Output`], [`Form`]) that the rest of the expansion calls without naming
//! the bound again, so a type that does not fit produces one error, at the
//! user's type, and no cascade. The error type of `Result<T, E>` is checked
//! once, by [`Output::result`] ([`ToolFailure`]).

use std::fmt::Display;

pub use core;
pub use inventory;
pub use serde_json;
pub use std::string::String;
pub use std::time::Duration;

pub use crate::elicit::{Elicit, ElicitChoice, ElicitField};
pub use crate::tool::{
    Annotations, JsonObject, Location, Registration, TaskPolicy, ToolDescriptor, ToolFuture,
    ToolOutcome,
};

pub use crate::tool::schema::ArgsSchema;
pub use crate::tool::{State, StateMap, StateNeed};

use schemars::{JsonSchema, SchemaGenerator};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use crate::elicit::{choice_schema, decode_choice, decode_content, form_schema};
use crate::tool::{
    args::{decode_at, parameter_error, struct_error},
    output, schema,
};

// ===== arguments =====

/// A type a tool argument can have: decodable from JSON.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool argument: it does not implement `Deserialize`",
    label = "this parameter's type must implement `serde::Deserialize`",
    note = "tool arguments are decoded from JSON: derive `serde::Deserialize` on your type, or take a type that implements it (`String`, `u32`, `Vec<T>`, `Option<T>`, ...)",
    note = "for a shared value that is not an argument (a database pool, an HTTP client, a config), take `State<{Self}>` and give the value with `EngineBuilder::state`"
)]
pub trait DecodeArg: Sized {
    /// Whether the argument may be left out (it decodes from `null`).
    fn optional() -> bool;
    /// Decodes the argument.
    ///
    /// # Errors
    ///
    /// `(path inside the value, problem)`.
    fn decode(value: Value) -> Result<Self, (String, String)>;
}

impl<T: DeserializeOwned> DecodeArg for T {
    fn optional() -> bool {
        serde_json::from_value::<T>(Value::Null).is_ok()
    }

    fn decode(value: Value) -> Result<Self, (String, String)> {
        decode_at(value)
    }
}

/// A type a tool argument can have: described by a JSON Schema.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool argument: it does not implement `JsonSchema`",
    label = "this parameter's type must implement `schemars::JsonSchema`",
    note = "tool arguments are described to the model by a JSON Schema: derive `schemars::JsonSchema` on your type, or take a type that implements it (`String`, `u32`, `Vec<T>`, `Option<T>`, ...)",
    note = "for a shared value that is not an argument (a database pool, an HTTP client, a config), take `State<{Self}>` and give the value with `EngineBuilder::state`"
)]
pub trait DescribeArg {
    /// The argument's schema, its definitions going to `generator`.
    fn schema(generator: &mut SchemaGenerator) -> Value;
    /// The schema of an `#[args]` struct: a root schema.
    fn root_schema() -> JsonObject;
}

impl<T: JsonSchema> DescribeArg for T {
    fn schema(generator: &mut SchemaGenerator) -> Value {
        generator.subschema_for::<T>().to_value()
    }

    fn root_schema() -> JsonObject {
        schema::root_schema::<T>()
    }
}

/// One checked tool parameter, from [`arg`].
#[derive(Debug)]
pub struct Arg<T> {
    schema: fn(&mut SchemaGenerator) -> Value,
    optional: fn() -> bool,
    decode: fn(Value) -> Result<T, (String, String)>,
}

/// Checks that `T` can be a tool argument (the one error, at the user's type).
pub const fn arg<T: DecodeArg + DescribeArg>() -> Arg<T> {
    Arg {
        schema: T::schema,
        optional: T::optional,
        decode: T::decode,
    }
}

impl ArgsSchema {
    /// Adds the argument `name`, described by its parameter's doc comment.
    #[must_use]
    pub fn arg<T>(mut self, spec: &Arg<T>, name: &str, description: Option<&str>) -> Self {
        let schema = (spec.schema)(self.generator());
        self.add(name, schema, (spec.optional)(), description);
        self
    }
}

/// A call's arguments, taken one parameter at a time.
#[derive(Debug)]
pub struct Arguments(JsonObject);

impl Arguments {
    /// Wraps the call's `arguments`.
    pub fn new(arguments: JsonObject) -> Self {
        Self(arguments)
    }

    /// Decodes the argument `name`; a missing one decodes from `null`, so an
    /// `Option` may be left out.
    ///
    /// # Errors
    ///
    /// `missing required argument `name``, or the problem at `name` (or at a
    /// path inside it).
    pub fn take<T>(&mut self, spec: &Arg<T>, name: &str) -> Result<T, String> {
        match self.0.remove(name) {
            None => (spec.decode)(Value::Null)
                .map_err(|_| format!("missing required argument `{name}`")),
            Some(value) => (spec.decode)(value).map_err(|e| parameter_error(name, e)),
        }
    }
}

/// The input schema of a tool with no arguments.
pub fn no_args_schema() -> JsonObject {
    schema::no_args_schema()
}

/// Checks the arguments of a tool that takes none, as its schema says.
///
/// # Errors
///
/// Names the first unexpected argument.
pub fn no_args(arguments: JsonObject) -> Result<(), String> {
    crate::tool::args::no_args(&arguments)
}

/// A checked `#[args]` struct, from [`args_struct`].
#[derive(Debug)]
pub struct ArgsStruct<T> {
    schema: fn() -> JsonObject,
    decode: fn(Value) -> Result<T, (String, String)>,
}

/// Checks that `T` can be a tool's `#[args]` struct.
pub const fn args_struct<T: DecodeArg + DescribeArg>() -> ArgsStruct<T> {
    ArgsStruct {
        schema: T::root_schema,
        decode: T::decode,
    }
}

impl<T> ArgsStruct<T> {
    /// The struct's schema: its fields are the tool's arguments.
    pub fn schema(&self) -> JsonObject {
        (self.schema)()
    }

    /// Decodes the whole `arguments` object.
    ///
    /// # Errors
    ///
    /// The problem, naming the field: `missing field `name``, or
    /// `<field>: <problem>`.
    pub fn decode(&self, arguments: JsonObject) -> Result<T, String> {
        (self.decode)(Value::Object(arguments)).map_err(struct_error)
    }
}

// ===== state =====

/// A type a `State<T>` parameter can hold: shareable between tasks.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be shared state: it must be `Send + Sync + 'static`",
    label = "the `T` of a `State<T>` parameter must be `Send + Sync + 'static`",
    note = "every call of the tool, on any thread, gets the same value: wrap what is not `Sync` in a `std::sync::Mutex` (or `tokio::sync::Mutex`), take owned types instead of references, and register the value with `EngineBuilder::state`"
)]
pub trait StateType: Send + Sync + 'static {}

impl<T: Send + Sync + 'static> StateType for T {}

/// A checked `State<T>` parameter, from [`state_spec`].
#[derive(Debug)]
pub struct StateSpec<T> {
    need: StateNeed,
    get: fn(&StateMap) -> Option<State<T>>,
}

/// Checks that `T` can be shared state (the one error, at the user's type).
pub const fn state_spec<T: StateType>() -> StateSpec<T> {
    StateSpec {
        need: StateNeed::of::<T>(),
        get: StateMap::get::<T>,
    }
}

impl<T> StateSpec<T> {
    /// The need this parameter records on the tool.
    pub const fn need(&self) -> StateNeed {
        self.need
    }

    /// The engine's value.
    ///
    /// # Errors
    ///
    /// Names the type when `state` lacks it (an engine checks every tool's
    /// needs before it starts, so only a hand-made `StateMap` gets here).
    pub fn take(&self, state: &StateMap) -> Result<State<T>, String> {
        (self.get)(state).ok_or_else(|| {
            format!(
                "no `{}` was given as state (`EngineBuilder::state`)",
                self.need.type_name()
            )
        })
    }
}

// ===== output =====

/// A type a tool fn can return (as `T` or as the `Ok` of `Result<T, E>`):
/// serializable to JSON.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool's output: it does not implement `Serialize`",
    label = "the output type must implement `serde::Serialize`",
    note = "a tool returns text (`String`, `&'static str`), nothing (`()`), a raw `CallToolResult`, or structured content: derive `serde::Serialize` and `schemars::JsonSchema` on your type"
)]
pub trait SerializeOutput: Sized {
    /// The `CallToolResult` (as JSON) for a returned value.
    ///
    /// # Errors
    ///
    /// An internal error when the value does not serialize.
    fn into_outcome(self) -> ToolOutcome;
}

impl<T: Serialize + 'static> SerializeOutput for T {
    fn into_outcome(self) -> ToolOutcome {
        output::success(&self)
    }
}

/// A type a tool fn can return: described by a JSON Schema.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool's output: it does not implement `JsonSchema`",
    label = "the output type must implement `schemars::JsonSchema`",
    note = "a structured output is described to the client by its `outputSchema`: derive `schemars::JsonSchema` on your type"
)]
pub trait DescribeOutput {
    /// The `outputSchema`, when the output is an object.
    fn output_schema() -> Option<JsonObject>;
}

impl<T: JsonSchema + 'static> DescribeOutput for T {
    fn output_schema() -> Option<JsonObject> {
        output::output_schema::<T>()
    }
}

/// A checked output type, from [`output()`].
#[derive(Debug)]
pub struct Output<T> {
    schema: fn() -> Option<JsonObject>,
    outcome: fn(T) -> ToolOutcome,
}

/// Checks that `T` can be a tool's output (the one error, at the user's type).
pub const fn output<T: SerializeOutput + DescribeOutput>() -> Output<T> {
    Output {
        schema: T::output_schema,
        outcome: T::into_outcome,
    }
}

impl<T> Output<T> {
    /// The `outputSchema`, if any.
    pub fn schema(&self) -> Option<JsonObject> {
        (self.schema)()
    }

    /// The outcome of a fn returning `T`.
    ///
    /// # Errors
    ///
    /// See [`SerializeOutput::into_outcome`].
    pub fn outcome(&self, value: T) -> ToolOutcome {
        (self.outcome)(value)
    }

    /// The outcome of a fn returning `Result<T, E>`.
    ///
    /// # Errors
    ///
    /// See [`ToolFailure::into_outcome`].
    pub fn result<E: ToolFailure>(&self, value: Result<T, E>) -> ToolOutcome {
        match value {
            Ok(v) => (self.outcome)(v),
            Err(e) => e.into_outcome(),
        }
    }
}

/// An error type a tool fn can return in `Result<T, E>`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool's error",
    label = "the error type must implement `Display`",
    note = "return `Result<T, ToolError>`, or any error that implements `std::fmt::Display` (its text becomes the tool error the model reads)"
)]
pub trait ToolFailure {
    /// The outcome: a tool error (`isError: true`) with the error's text, or,
    /// for [`ToolError::rpc`](crate::ToolError::rpc) and [`RpcError`](crate::tool::RpcError), a JSON-RPC error.
    ///
    /// # Errors
    ///
    /// The JSON-RPC error the task fails with.
    fn into_outcome(self) -> ToolOutcome;
}

impl<E: Display + 'static> ToolFailure for E {
    fn into_outcome(self) -> ToolOutcome {
        output::failure(&self)
    }
}

/// Boxes a tool's future.
pub fn boxed<F>(fut: F) -> ToolFuture
where
    F: core::future::Future<Output = ToolOutcome> + Send + 'static,
{
    Box::pin(fut)
}

// ===== elicitation =====

/// A `#[derive(Elicit)]` type: decodable from the answer's JSON.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a form: it does not implement `Deserialize`",
    label = "`#[derive(Elicit)]` needs `serde::Deserialize` too",
    note = "write `#[derive(Deserialize, JsonSchema, Elicit)]`"
)]
pub trait DecodeForm: Sized {
    /// Decodes a struct's answer.
    ///
    /// # Errors
    ///
    /// Names the field.
    fn decode_form(content: Value) -> Result<Self, String>;
    /// Decodes an enum's answer.
    ///
    /// # Errors
    ///
    /// When `value` is missing or not one of the choices.
    fn decode_choice(content: Value) -> Result<Self, String>;
}

impl<T: DeserializeOwned> DecodeForm for T {
    fn decode_form(content: Value) -> Result<Self, String> {
        decode_content(content)
    }

    fn decode_choice(content: Value) -> Result<Self, String> {
        decode_choice(content)
    }
}

/// A `#[derive(Elicit)]` type: described by a JSON Schema.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a form: it does not implement `JsonSchema`",
    label = "`#[derive(Elicit)]` needs `schemars::JsonSchema` too",
    note = "write `#[derive(Deserialize, JsonSchema, Elicit)]`"
)]
pub trait DescribeForm {
    /// The `requestedSchema` of a struct.
    fn form_schema() -> JsonObject;
    /// The `requestedSchema` of a unit-only enum asked directly: one `value` field.
    fn choice_schema() -> JsonObject;
}

impl<T: JsonSchema> DescribeForm for T {
    fn form_schema() -> JsonObject {
        form_schema::<T>()
    }

    fn choice_schema() -> JsonObject {
        choice_schema::<T>()
    }
}

/// A checked form type, from [`form`].
#[derive(Debug)]
pub struct Form<T> {
    /// The `requestedSchema` of a struct.
    pub form_schema: fn() -> JsonObject,
    /// The `requestedSchema` of a unit-only enum.
    pub choice_schema: fn() -> JsonObject,
    /// Decodes a struct's answer.
    pub decode_form: fn(Value) -> Result<T, String>,
    /// Decodes an enum's answer.
    pub decode_choice: fn(Value) -> Result<T, String>,
}

/// Checks that a `#[derive(Elicit)]` type also derives `Deserialize` and
/// `JsonSchema` (the one error, at the type's name).
pub const fn form<T: DecodeForm + DescribeForm>() -> Form<T> {
    Form {
        form_schema: T::form_schema,
        choice_schema: T::choice_schema,
        decode_form: T::decode_form,
        decode_choice: T::decode_choice,
    }
}

/// Checks one field of a `#[derive(Elicit)]` struct. `Form` is the struct and
/// `Field` a marker type named after the field, so the message can name both.
#[diagnostic::on_unimplemented(
    message = "the field `{Field}` of `{Form}` cannot be a field of an MCP form",
    label = "`{Self}` is not a string, number, integer, boolean or unit-only enum",
    note = "MCP form elicitation asks for a flat object whose fields are strings, numbers, integers, booleans, unit-only enums (`#[derive(Elicit)]` on the enum) or `Vec`s of such enums, each possibly in an `Option`: give `{Field}` one of those types, or ask for nested data in another question"
)]
pub trait FormField<Form, Field> {}

impl<T: ElicitField, Form, Field> FormField<Form, Field> for T {}

/// The check of one form field (the one error, at the field's type).
pub const fn form_field<T: FormField<Form, Field>, Form, Field>() {}
