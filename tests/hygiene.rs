//! The expansions of `#[task_tool]` and `#[derive(Elicit)]` do not depend on
//! the caller's scope: they compile and work in a module that shadows the
//! prelude (`Result`, `Option`, `Some`, `None`, `Ok`, `Err`, `Box`, `String`,
//! `Vec`, `Send`, `Sized`, ...) and has modules named `core`, `std`, `serde`,
//! `inventory` and `mcp_tasks_runtime`, and in a module without any prelude.
//! Regression guard in the spirit of serde's `test_gen.rs`.

#![allow(
    dead_code,
    non_camel_case_types,
    non_upper_case_globals,
    unused_imports,
    unreachable_pub
)]

/// The argument and output types, defined with the prelude intact: this test
/// is about our expansions, not serde's or schemars'.
mod types {
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, JsonSchema)]
    pub struct Report {
        pub total: u32,
    }

    #[derive(Deserialize, JsonSchema)]
    pub struct Args {
        pub name: String,
    }
}

mod shadowed {
    // Every name the generated code could be tempted to use unqualified.
    pub struct Result;
    pub struct Option;
    pub struct Some;
    pub struct None;
    pub struct Ok;
    pub struct Err;
    pub struct Box;
    pub struct String;
    pub struct Vec;
    pub struct Duration;
    pub struct ToolDescriptor;
    pub trait Send {}
    pub trait Sync {}
    pub trait Sized {}
    pub trait Future {}
    pub trait Display {}
    pub trait Into {}
    pub trait From {}
    pub trait Default {}
    pub mod core {}
    pub mod std {}
    pub mod serde {}
    pub mod serde_json {}
    pub mod inventory {}
    pub mod mcp_tasks_runtime {}
    pub mod __private {}
    pub fn boxed() {}
    pub fn arg() {}
    pub fn output() {}
    pub fn concat() {}
    pub const __mcp_tasks: () = ();

    use super::types::{Args, Report};
    use ::mcp_tasks_runtime::{Elicit, ToolError, task_tool};

    #[derive(::serde::Deserialize, ::schemars::JsonSchema, Elicit)]
    pub struct Approval {
        pub approve: bool,
        pub note: ::std::option::Option<::std::string::String>,
        pub env: Env,
    }

    #[derive(::serde::Deserialize, ::schemars::JsonSchema, Elicit)]
    pub enum Env {
        Staging,
        Production,
    }

    /// Structured output, per-parameter arguments, every option.
    #[task_tool(
        name = "shadowed.report",
        title = "Report",
        task = optional,
        ttl = "1m",
        poll_interval = "1s",
        read_only,
        destructive = false,
        idempotent,
        open_world = false,
    )]
    pub async fn report(
        /// How many.
        count: u32,
        extra: ::std::option::Option<u32>,
    ) -> ::std::result::Result<Report, ToolError> {
        ::std::result::Result::Ok(Report {
            total: count + extra.unwrap_or(0),
        })
    }

    /// No arguments, no output.
    #[task_tool]
    pub async fn nothing() {}

    /// An args struct and text output.
    #[task_tool]
    pub async fn greet(#[args] args: Args) -> ::std::string::String {
        ::std::format!("Hello, {}!", args.name)
    }

    /// A failing tool.
    #[task_tool]
    pub async fn fail() -> ::std::result::Result<(), ::std::string::String> {
        ::std::result::Result::Err("no".into())
    }

    /// Renamed runtime path.
    #[task_tool(crate = super::rt)]
    pub async fn renamed(#[args] args: Args) -> ::std::string::String {
        args.name
    }
}

pub use ::mcp_tasks_runtime as rt;

mod no_prelude {
    #![no_implicit_prelude]

    // schemars' derive (not ours) needs its crate name and two prelude
    // traits in scope.
    use ::mcp_tasks_runtime::{Elicit, ToolError, task_tool};
    use ::schemars;
    use ::std::convert::{From, Into};

    #[derive(::serde::Deserialize, ::schemars::JsonSchema, Elicit)]
    pub enum Answer {
        Yes,
        No,
    }

    #[derive(::serde::Deserialize, ::schemars::JsonSchema, Elicit)]
    pub struct Form {
        pub answer: Answer,
        pub count: ::std::option::Option<i64>,
    }

    /// No prelude at all.
    #[task_tool(ttl = "1h")]
    pub async fn bare(
        name: ::std::string::String,
        times: ::std::option::Option<u8>,
    ) -> ::std::result::Result<super::types::Report, ToolError> {
        let _ = name;
        ::std::result::Result::Ok(super::types::Report {
            total: From::from(times.unwrap_or(1)),
        })
    }

    #[task_tool]
    pub async fn empty() {}
}

use mcp_tasks_runtime::{Elicit, tool::Registry};
use serde_json::{Value, json};

fn run(descriptor: &mcp_tasks_runtime::tool::ToolDescriptor, arguments: Value) -> Value {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object")
    };
    let future = descriptor
        .prepare(arguments, &mcp_tasks_runtime::tool::StateMap::new())
        .expect("arguments accepted");
    let outcome = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(future)
        .expect("a tool result");
    Value::Object(outcome)
}

#[test]
fn shadowed_tools_register_and_run() {
    let registry = Registry::from_inventory().expect("a registry");
    let names: Vec<&str> = registry.iter().map(|t| t.descriptor().name()).collect();
    assert_eq!(
        names,
        [
            "bare",
            "empty",
            "fail",
            "greet",
            "nothing",
            "renamed",
            "shadowed.report"
        ]
    );
    let report = shadowed::report_tool();
    assert_eq!(report.title(), Some("Report"));
    assert_eq!(
        report.annotations(),
        mcp_tasks_runtime::tool::Annotations {
            read_only: Some(true),
            destructive: Some(false),
            idempotent: Some(true),
            open_world: Some(false),
        }
    );
    assert_eq!(
        run(report, json!({"count": 2, "extra": 3}))["structuredContent"],
        json!({"total": 5})
    );
    assert_eq!(
        run(shadowed::nothing_tool(), json!({})),
        json!({"content": [], "isError": false})
    );
    assert_eq!(
        run(shadowed::greet_tool(), json!({"name": "you"}))["content"][0]["text"],
        "Hello, you!"
    );
    assert_eq!(run(shadowed::fail_tool(), json!({}))["isError"], true);
    assert_eq!(
        run(shadowed::renamed_tool(), json!({"name": "x"}))["content"][0]["text"],
        "x"
    );
    assert_eq!(
        run(no_prelude::bare_tool(), json!({"name": "x", "times": 4}))["structuredContent"],
        json!({"total": 4})
    );
    assert!(
        no_prelude::empty_tool()
            .input_schema()
            .contains_key("additionalProperties")
    );
}

#[test]
fn shadowed_forms_work() {
    let schema = <shadowed::Approval as Elicit>::requested_schema();
    assert_eq!(schema["required"], json!(["approve", "env"]));
    let answer =
        <shadowed::Approval as Elicit>::from_content(json!({"approve": true, "env": "Staging"}))
            .expect("an answer");
    assert!(answer.approve && matches!(answer.env, shadowed::Env::Staging));
    let form =
        <no_prelude::Form as Elicit>::from_content(json!({"answer": "Yes"})).expect("an answer");
    assert!(matches!(form.answer, no_prelude::Answer::Yes));
    assert_eq!(
        <no_prelude::Answer as Elicit>::requested_schema()["properties"]["value"]["enum"],
        json!(["Yes", "No"])
    );
}
