use mcp_tasks_runtime::Elicit;
use schemars::JsonSchema;

#[derive(JsonSchema, Elicit)]
struct Approval {
    approve: bool,
}

fn main() {}
