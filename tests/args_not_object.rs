//! An `#[args]` type that is not an object, in a test binary of its own (its
//! registration would spoil every `Registry::from_inventory` elsewhere).

use mcp_tasks_runtime::tool::Registry;

/// The tool: refused when a registry is built (before anything is served).
mod not_an_object {
    use mcp_tasks_runtime::task_tool;
    use schemars::JsonSchema;
    use serde::Deserialize;

    #[derive(Deserialize, JsonSchema)]
    pub(crate) enum Mode {
        Fast,
        Slow,
    }

    #[task_tool]
    pub(crate) async fn run_in(#[args] mode: Mode) -> String {
        match mode {
            Mode::Fast => "fast".into(),
            Mode::Slow => "slow".into(),
        }
    }
}

#[test]
fn an_args_type_that_is_not_an_object_is_refused_naming_args() {
    let err = Registry::new()
        .with(not_an_object::run_in_tool())
        .expect_err("an enum's schema is no object");
    let message = err.to_string();
    assert!(
        message.contains("tool `run_in` is invalid")
            && message.contains("an `#[args]` type must be a struct with named fields"),
        "{message}"
    );
}
