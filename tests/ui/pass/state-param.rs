//! `State<T>` parameters: values from the engine beside the arguments (each
//! one, or an `#[args]` struct), never in the input schema.

use mcp_tasks_runtime::{State, task_tool, tool::StateMap};
use schemars::JsonSchema;
use serde::Deserialize;

/// A stand-in for a connection pool.
struct Pool {
    rows: u64,
}

/// A config shared by several tools.
struct Config {
    region: &'static str,
}

/// Counts a table's rows.
#[task_tool]
async fn count_rows(db: State<Pool>, table: String, config: mcp_tasks_runtime::State<Config>) -> String {
    format!("{table}: {} rows in {}", db.rows, config.region)
}

#[derive(Deserialize, JsonSchema)]
struct Query {
    table: String,
}

#[task_tool]
async fn count_with_args(#[args] query: Query, db: State<Pool>) -> String {
    format!("{}: {}", query.table, db.rows)
}

fn main() {
    let schema = count_rows_tool().input_schema();
    assert_eq!(schema["required"], serde_json::json!(["table"]));
    assert!(schema["properties"].get("db").is_none());
    let needs: Vec<&str> = count_rows_tool().state().iter().map(|n| n.type_name()).collect();
    assert!(needs[0].ends_with("::Pool") && needs[1].ends_with("::Config"), "{needs:?}");
    assert_eq!(count_with_args_tool().input_schema()["required"], serde_json::json!(["table"]));

    let mut state = StateMap::new();
    state.insert(Pool { rows: 7 });
    state.insert(Config { region: "eu" });
    let args = serde_json::json!({"table": "orders"}).as_object().cloned().unwrap();
    let fut = count_rows_tool().prepare(args, &state).unwrap();
    let out = tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(fut).unwrap();
    assert_eq!(out["content"][0]["text"], "orders: 7 rows in eu");
}
