//! What `#[task_tool]` registers, seen through the runtime's public API:
//! the exact `Tool` definitions (checked against the official schema), the
//! outcome of running each kind of tool, argument errors, and fns that stay
//! callable as written.

use std::sync::LazyLock;

use mcp_tasks_runtime::{
    Elicit,
    tool::{
        Annotations, JsonObject, Registry, RpcError, StateMap, TaskPolicy, ToolDescriptor,
        ToolOutcome,
    },
};
use serde_json::{Value, json};

/// Tools that deploy things: every option.
mod ops {
    use mcp_tasks_runtime::{ToolError, task_tool};

    /// Builds a service and rolls it out.
    ///
    /// Takes a while.
    #[task_tool(
        title = "Deploy a service",
        task = required,
        ttl = "1h",
        poll_interval = "2s",
        destructive,
        idempotent = false,
        open_world = true,
    )]
    pub(crate) async fn deploy(
        /// The service to deploy.
        service: String,
        /// The git ref (default `main`).
        git_ref: Option<String>,
        replicas: u8,
    ) -> Result<String, ToolError> {
        let git_ref = git_ref.unwrap_or_else(|| "main".to_owned());
        Ok(format!("{service}@{git_ref} x{replicas}"))
    }

    /// Ignored: `description` wins.
    #[task_tool(name = "ops.status", description = "Reports the fleet's status.", read_only, task = forbidden)]
    pub(crate) async fn status() -> &'static str {
        "all green"
    }
}

/// Tools whose output is structured, raw, or empty.
mod reports {
    use mcp_tasks_runtime::{ToolError, mcp::CallToolResult, task_tool};
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    /// A sum.
    #[derive(Serialize, JsonSchema)]
    pub(crate) struct Sum {
        /// The total.
        pub(crate) total: u32,
        pub(crate) terms: Vec<u32>,
    }

    /// What to add.
    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct AddArgs {
        /// The numbers.
        pub(crate) numbers: Vec<u32>,
        /// Added at the end.
        #[serde(default)]
        pub(crate) bonus: u32,
    }

    /// Adds numbers.
    #[task_tool(task = optional)]
    pub(crate) async fn add(#[args] args: AddArgs) -> Result<Sum, ToolError> {
        let total = args.numbers.iter().sum::<u32>() + args.bonus;
        Ok(Sum {
            total,
            terms: args.numbers,
        })
    }

    /// Returns a raw result.
    #[task_tool]
    pub(crate) async fn raw(flag: bool) -> CallToolResult {
        if flag {
            CallToolResult::structured(serde_json::json!({"flag": true}))
        } else {
            CallToolResult::structured_error(serde_json::json!({"flag": false}))
        }
    }

    #[task_tool]
    pub(crate) async fn touch() {}

    /// A number, as text.
    #[task_tool]
    pub(crate) async fn count() -> u64 {
        42
    }
}

/// Tools that fail.
mod failures {
    use std::fmt;

    use mcp_tasks_runtime::{ToolError, task_tool};

    #[derive(Debug)]
    pub(crate) struct QuotaError {
        pub(crate) limit: u32,
    }

    impl fmt::Display for QuotaError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "quota of {} exceeded", self.limit)
        }
    }

    type Result<T> = std::result::Result<T, QuotaError>;

    #[task_tool]
    pub(crate) async fn over_quota(limit: u32) -> Result<String> {
        Err(QuotaError { limit })
    }

    #[task_tool]
    pub(crate) async fn declined() -> std::result::Result<String, ToolError> {
        Err(ToolError::new("rollout declined"))
    }

    #[task_tool]
    pub(crate) async fn broken() -> std::result::Result<String, ToolError> {
        Err(ToolError::rpc(-32001, "backend unreachable"))
    }
}

/// Forms for `ask_user`.
mod forms {
    use mcp_tasks_runtime::Elicit;
    use schemars::JsonSchema;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Deserialize, JsonSchema, Elicit)]
    #[serde(rename_all = "lowercase")]
    pub(crate) enum Env {
        Staging,
        Production,
    }

    #[derive(Debug, PartialEq, Deserialize, JsonSchema, Elicit)]
    pub(crate) enum Region {
        /// Europe (Paris).
        Eu,
        /// United States (Ohio).
        Us,
        Asia,
    }

    /// Approve a rollout.
    #[derive(Debug, PartialEq, Deserialize, JsonSchema, Elicit)]
    pub(crate) struct Approval {
        /// Roll it out now?
        pub(crate) approve: bool,
        /// Why.
        pub(crate) reason: Option<String>,
        #[serde(default)]
        pub(crate) replicas: u16,
        pub(crate) ratio: Option<f64>,
        pub(crate) env: Env,
        pub(crate) region: Option<Region>,
        /// Where else.
        #[serde(default)]
        pub(crate) also: Vec<Env>,
        #[serde(default)]
        pub(crate) also_regions: Option<Vec<Region>>,
    }
}

// ===== helpers =====

fn registry() -> &'static Registry {
    static REGISTRY: LazyLock<Registry> =
        LazyLock::new(|| Registry::from_inventory().expect("no duplicate or invalid tool"));
    &REGISTRY
}

fn definition(name: &str) -> Value {
    let tool = registry()
        .get(name)
        .unwrap_or_else(|| panic!("tool `{name}` is registered"));
    Value::Object(tool.definition().clone())
}

fn spec() -> &'static Value {
    static SPEC: LazyLock<Value> = LazyLock::new(|| {
        serde_json::from_str(include_str!("spec/mcp-2026-07-28.schema.json")).expect("spec JSON")
    });
    &SPEC
}

/// A validator for `#/$defs/<name>` of the core schema (with its `$defs`
/// alongside, so `$ref`s resolve).
fn validator(pointer: &str) -> jsonschema::Validator {
    let mut schema = spec().clone();
    schema["$ref"] = json!(pointer);
    jsonschema::validator_for(&schema).expect("the spec schema compiles")
}

fn assert_valid(validator: &jsonschema::Validator, instance: &Value) {
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect();
    assert!(errors.is_empty(), "{instance:#} is not valid: {errors:#?}");
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

fn run(descriptor: &ToolDescriptor, arguments: Value) -> ToolOutcome {
    let future = descriptor
        .prepare(object(arguments), &StateMap::new())
        .unwrap_or_else(|e| panic!("arguments rejected: {e}"));
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(future)
}

fn rejection(descriptor: &ToolDescriptor, arguments: Value) -> String {
    match descriptor.prepare(object(arguments), &StateMap::new()) {
        Ok(_) => panic!("arguments accepted"),
        Err(e) => e,
    }
}

fn text(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": false})
}

// ===== definitions =====

#[test]
fn every_tool_is_registered_by_name() {
    let names: Vec<&str> = registry().iter().map(|t| t.descriptor().name()).collect();
    assert_eq!(
        names,
        [
            "add",
            "broken",
            "count",
            "declined",
            "deploy",
            "ops.status",
            "over_quota",
            "raw",
            "touch",
        ]
    );
}

#[test]
fn per_parameter_tool_definition() {
    assert_eq!(
        definition("deploy"),
        json!({
            "name": "deploy",
            "title": "Deploy a service",
            "description": "Builds a service and rolls it out.\n\nTakes a while.",
            "inputSchema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "service": {"type": "string", "description": "The service to deploy."},
                    "git_ref": {
                        "type": ["string", "null"],
                        "description": "The git ref (default `main`).",
                    },
                    "replicas": {
                        "type": "integer",
                        "format": "uint8",
                        "minimum": 0,
                        "maximum": 255,
                    },
                },
                "required": ["service", "replicas"],
                "additionalProperties": false,
            },
            "annotations": {
                "destructiveHint": true,
                "idempotentHint": false,
                "openWorldHint": true,
            },
        })
    );
    let d = ops::deploy_tool();
    assert_eq!(d.policy(), TaskPolicy::Required);
    assert_eq!(d.ttl(), Some(std::time::Duration::from_secs(3600)));
    assert_eq!(d.poll_interval(), Some(std::time::Duration::from_secs(2)));
    assert_eq!(
        d.annotations(),
        Annotations {
            read_only: None,
            destructive: Some(true),
            idempotent: Some(false),
            open_world: Some(true),
        }
    );
}

#[test]
fn no_argument_tool_definition() {
    assert_eq!(
        definition("ops.status"),
        json!({
            "name": "ops.status",
            "description": "Reports the fleet's status.",
            "inputSchema": {"type": "object", "additionalProperties": false},
            "annotations": {"readOnlyHint": true},
        })
    );
    assert_eq!(ops::status_tool().policy(), TaskPolicy::Forbidden);
    assert_eq!(ops::status_tool().ttl(), None);
    // No doc comment, no options: the bare minimum.
    assert_eq!(
        definition("touch"),
        json!({
            "name": "touch",
            "inputSchema": {"type": "object", "additionalProperties": false},
        })
    );
    assert_eq!(reports::touch_tool().policy(), TaskPolicy::Optional);
}

#[test]
fn args_struct_and_structured_output_definition() {
    assert_eq!(
        definition("add"),
        json!({
            "name": "add",
            "description": "Adds numbers.",
            "inputSchema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "title": "AddArgs",
                "description": "What to add.",
                "type": "object",
                "properties": {
                    "numbers": {
                        "description": "The numbers.",
                        "type": "array",
                        "items": {"type": "integer", "format": "uint32", "minimum": 0},
                    },
                    "bonus": {
                        "description": "Added at the end.",
                        "type": "integer",
                        "format": "uint32",
                        "minimum": 0,
                        "default": 0,
                    },
                },
                "required": ["numbers"],
                "additionalProperties": false,
            },
            "outputSchema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "title": "Sum",
                "description": "A sum.",
                "type": "object",
                "properties": {
                    "total": {
                        "description": "The total.",
                        "type": "integer",
                        "format": "uint32",
                        "minimum": 0,
                    },
                    "terms": {
                        "type": "array",
                        "items": {"type": "integer", "format": "uint32", "minimum": 0},
                    },
                },
                "required": ["total", "terms"],
            },
        })
    );
}

#[test]
fn raw_and_text_outputs_have_no_output_schema() {
    for name in [
        "raw",
        "count",
        "declined",
        "over_quota",
        "touch",
        "ops.status",
    ] {
        assert_eq!(definition(name).get("outputSchema"), None, "{name}");
    }
    assert_eq!(
        definition("raw")["inputSchema"],
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"flag": {"type": "boolean"}},
            "required": ["flag"],
            "additionalProperties": false,
        })
    );
}

#[test]
fn every_definition_is_a_valid_mcp_tool() {
    let tool = validator("#/$defs/Tool");
    // The validator is not vacuous.
    assert!(!tool.is_valid(&json!({"name": "no_input_schema"})));
    for t in registry().iter() {
        assert_valid(&tool, &Value::Object(t.definition().clone()));
    }
}

#[test]
fn forms_are_valid_mcp_elicitation_schemas() {
    let form = validator("#/$defs/ElicitRequestFormParams");
    let nested = json!({"type": "object", "properties": {"a": {"type": "object"}}});
    assert!(!form.is_valid(&json!({"message": "?", "requestedSchema": nested})));
    let schemas = [
        <forms::Approval as Elicit>::requested_schema(),
        <forms::Env as Elicit>::requested_schema(),
        <forms::Region as Elicit>::requested_schema(),
        <bool as Elicit>::requested_schema(),
    ];
    for schema in schemas {
        let params = json!({"mode": "form", "message": "?", "requestedSchema": schema});
        assert_valid(&form, &params);
    }
}

#[test]
fn form_schema_is_flat_and_exact() {
    assert_eq!(
        Value::Object(<forms::Approval as Elicit>::requested_schema()),
        json!({
            "type": "object",
            "properties": {
                "approve": {"type": "boolean", "description": "Roll it out now?"},
                "reason": {"type": "string", "description": "Why."},
                "replicas": {"type": "integer", "minimum": 0, "maximum": 65535, "default": 0},
                "ratio": {"type": "number"},
                "env": {"type": "string", "enum": ["staging", "production"]},
                // schemars lists undocumented variants first.
                "region": {
                    "type": "string",
                    "oneOf": [
                        {"const": "Asia", "title": "Asia"},
                        {"const": "Eu", "title": "Europe (Paris)."},
                        {"const": "Us", "title": "United States (Ohio)."},
                    ],
                },
                "also": {
                    "description": "Where else.",
                    "type": "array",
                    "items": {"type": "string", "enum": ["staging", "production"]},
                },
                "also_regions": {
                    "type": "array",
                    "items": {"anyOf": [
                        {"const": "Asia", "title": "Asia"},
                        {"const": "Eu", "title": "Europe (Paris)."},
                        {"const": "Us", "title": "United States (Ohio)."},
                    ]},
                },
            },
            "required": ["approve", "env"],
        })
    );
    assert_eq!(
        Value::Object(<forms::Env as Elicit>::requested_schema()),
        json!({
            "type": "object",
            "properties": {"value": {"type": "string", "enum": ["staging", "production"]}},
            "required": ["value"],
        })
    );
}

#[test]
fn form_answers_decode() {
    let answer = <forms::Approval as Elicit>::from_content(json!({
        "approve": true,
        "env": "production",
        "region": "Eu",
        "also": ["staging"],
    }))
    .expect("a valid answer");
    assert_eq!(
        answer,
        forms::Approval {
            approve: true,
            reason: None,
            replicas: 0,
            ratio: None,
            env: forms::Env::Production,
            region: Some(forms::Region::Eu),
            also: vec![forms::Env::Staging],
            also_regions: None,
        }
    );
    let err =
        <forms::Approval as Elicit>::from_content(json!({"approve": "yes", "env": "staging"}))
            .expect_err("a string is not a boolean");
    assert!(
        err.starts_with("approve: invalid type: string \"yes\", expected a boolean"),
        "{err}"
    );
    assert_eq!(
        <forms::Env as Elicit>::from_content(json!({"value": "staging"})),
        Ok(forms::Env::Staging)
    );
    let err =
        <forms::Env as Elicit>::from_content(json!({"value": "moon"})).expect_err("no such env");
    assert!(err.starts_with("value: unknown variant `moon`"), "{err}");
}

// ===== running tools =====

#[test]
fn fns_stay_callable_as_written() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    assert_eq!(
        rt.block_on(ops::deploy("api".into(), None, 3)),
        Ok("api@main x3".to_owned())
    );
    assert_eq!(rt.block_on(ops::status()), "all green");
    let sum = rt
        .block_on(reports::add(reports::AddArgs {
            numbers: vec![1, 2],
            bonus: 3,
        }))
        .expect("a sum");
    assert_eq!((sum.total, sum.terms), (6, vec![1, 2]));
    assert_eq!(
        rt.block_on(failures::over_quota(5)).map_err(|e| e.limit),
        Err(5)
    );
}

#[test]
fn text_output() {
    let outcome = run(
        ops::deploy_tool(),
        json!({"service": "api", "git_ref": "v2", "replicas": 2}),
    );
    assert_eq!(outcome.map(Value::Object), Ok(text("api@v2 x2")));
    assert_eq!(
        run(ops::status_tool(), json!({})).map(Value::Object),
        Ok(text("all green"))
    );
    assert_eq!(
        run(reports::count_tool(), json!({})).map(Value::Object),
        Ok(text("42"))
    );
}

#[test]
fn structured_output() {
    let outcome = run(reports::add_tool(), json!({"numbers": [1, 2, 3]}));
    assert_eq!(
        outcome.map(Value::Object),
        Ok(json!({
            "content": [{"type": "text", "text": r#"{"terms":[1,2,3],"total":6}"#}],
            "structuredContent": {"total": 6, "terms": [1, 2, 3]},
            "isError": false,
        }))
    );
}

#[test]
fn raw_output() {
    assert_eq!(
        run(reports::raw_tool(), json!({"flag": true})).map(Value::Object),
        Ok(json!({
            "content": [{"type": "text", "text": r#"{"flag":true}"#}],
            "structuredContent": {"flag": true},
            "isError": false,
        }))
    );
    assert_eq!(
        run(reports::raw_tool(), json!({"flag": false})).map(Value::Object),
        Ok(json!({
            "content": [{"type": "text", "text": r#"{"flag":false}"#}],
            "structuredContent": {"flag": false},
            "isError": true,
        }))
    );
}

#[test]
fn unit_output() {
    assert_eq!(
        run(reports::touch_tool(), json!({})).map(Value::Object),
        Ok(json!({"content": [], "isError": false}))
    );
}

#[test]
fn display_error_is_a_tool_error() {
    let error = |text: &str| json!({"content": [{"type": "text", "text": text}], "isError": true});
    assert_eq!(
        run(failures::over_quota_tool(), json!({"limit": 3})).map(Value::Object),
        Ok(error("quota of 3 exceeded"))
    );
    assert_eq!(
        run(failures::declined_tool(), json!({})).map(Value::Object),
        Ok(error("rollout declined"))
    );
}

#[test]
fn rpc_error_fails_the_call() {
    assert_eq!(
        run(failures::broken_tool(), json!({})),
        Err(RpcError::new(-32001, "backend unreachable"))
    );
}

// ===== argument errors =====

#[test]
fn missing_argument_is_named() {
    assert_eq!(
        rejection(ops::deploy_tool(), json!({"replicas": 1})),
        "missing required argument `service`"
    );
    // `Option`s may be left out.
    assert!(
        ops::deploy_tool()
            .prepare(
                object(json!({"service": "api", "replicas": 1})),
                &StateMap::new()
            )
            .is_ok()
    );
}

#[test]
fn wrong_type_is_named() {
    assert_eq!(
        rejection(ops::deploy_tool(), json!({"service": 5, "replicas": 1})),
        "`service`: invalid type: integer `5`, expected a string"
    );
    assert_eq!(
        rejection(
            ops::deploy_tool(),
            json!({"service": "api", "replicas": 300})
        ),
        "`replicas`: invalid value: integer `300`, expected u8"
    );
}

#[test]
fn args_struct_errors_are_named() {
    assert_eq!(
        rejection(reports::add_tool(), json!({})),
        "missing field `numbers`"
    );
    assert_eq!(
        rejection(reports::add_tool(), json!({"numbers": [1, "two"]})),
        "`numbers[1]`: invalid type: string \"two\", expected u32"
    );
    let unknown = rejection(reports::add_tool(), json!({"numbers": [], "extra": 1}));
    assert!(
        unknown.starts_with("`extra`: unknown field `extra`"),
        "{unknown}"
    );
}

#[test]
fn no_argument_tool_rejects_arguments() {
    assert_eq!(
        rejection(ops::status_tool(), json!({"verbose": true})),
        "unexpected argument `verbose`: this tool takes no arguments"
    );
}
