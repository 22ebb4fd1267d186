//! `crate = path` and `#[elicit(crate = path)]` reach the runtime through a
//! facade that re-exports it under another name.

mod facade {
    pub use mcp_tasks_runtime as tasks;
}

mod tools {
    use crate::facade::tasks::{Elicit, ToolError, ask_user, task_tool};
    use schemars::JsonSchema;
    use serde::Deserialize;

    #[derive(Deserialize, JsonSchema, Elicit)]
    #[elicit(crate = crate::facade::tasks)]
    pub(crate) struct Approval {
        pub(crate) approve: bool,
    }

    #[task_tool(crate = crate::facade::tasks)]
    pub(crate) async fn deploy(service: String) -> Result<String, ToolError> {
        let answer: Approval = ask_user("Deploy?").await?;
        Ok(format!("{service}: {}", answer.approve))
    }

    #[task_tool(crate = "crate::facade::tasks")]
    pub(crate) async fn quoted() {}
}

fn main() {
    assert_eq!(tools::deploy_tool().name(), "deploy");
    assert_eq!(tools::quoted_tool().name(), "quoted");
}
