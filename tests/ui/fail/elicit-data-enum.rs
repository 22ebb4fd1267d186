use mcp_tasks_runtime::Elicit;
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema, Elicit)]
enum Plan {
    Free,
    Team { seats: u32 },
    Custom(String),
}

fn main() {}
