use mcp_tasks_runtime::Elicit;
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema, Elicit)]
struct Answer(String, bool);

fn main() {}
