//! The conformance server: every fixture the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`) expects, for the 2026-07-28 server
//! requirements and the Tasks extension scenarios, and for the 2025-11-25
//! server requirements (clients that open with `initialize`), all at one
//! endpoint.
//!
//! The task and MRTR fixtures, and the sampling and elicitation fixtures of
//! the 2025-11-25 suite, are plain `#[task_tool]` fns: the same fn asks its
//! question through MRTR or a task for a 2026-07-28 client and as a request in
//! the session for an older one. The base-suite fixtures (content tools,
//! prompts, resources, completions, logging, subscriptions, and the one form
//! `#[derive(Elicit)]` cannot write) are an ordinary rmcp `ServerHandler`
//! ([`extras::Fixtures`]) that the `TaskServer` wraps — the same way a real
//! server adds task tools to what it already has.
//!
//! Run with `cargo run --bin conformance -- --addr 127.0.0.1:8080`.

mod extras;

use std::time::Duration;

use clap::Parser;
use mcp_tasks_runtime::{
    Elicit, ToolError, ask_user, durable,
    mcp::TaskServer,
    question::{AskError, list_roots, sample},
    task_tool,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

// ---- Tasks extension fixtures -------------------------------------------------

/// Greets someone by name. Always answers synchronously.
#[task_tool(task = forbidden, read_only)]
async fn greet(
    /// Who to greet.
    name: String,
) -> String {
    format!("Hello, {name}!")
}

/// Waits `seconds` (a durable timer: no worker is held), then reports. Runs as
/// a task when the client can take one; honours cancellation.
#[task_tool]
async fn slow_compute(
    /// How long to take, in seconds.
    seconds: f64,
    /// A label echoed in the result.
    label: String,
) -> String {
    let secs = if seconds.is_finite() {
        seconds.clamp(0.0, 86_400.0)
    } else {
        0.0
    };
    durable::sleep(Duration::from_secs_f64(secs)).await;
    format!("slow_compute({label}) done after {seconds}s")
}

/// Works for about a second, then reports a tool error (`isError: true`). Only
/// runs as a task.
#[task_tool(task = required)]
async fn failing_job() -> Result<String, ToolError> {
    durable::sleep(Duration::from_secs(1)).await;
    Err(ToolError::new(
        "failing_job: intentional tool execution error",
    ))
}

/// Works briefly, then fails with a JSON-RPC error (the task ends `failed`).
#[task_tool]
async fn protocol_error_job() -> Result<String, ToolError> {
    durable::sleep(Duration::from_millis(200)).await;
    Err(ToolError::rpc(
        -32603,
        "protocol_error_job: intentional protocol-level failure",
    ))
}

/// Works for ten seconds but is kept for one only (`ttl = "1s"`): a task
/// that expires while it runs, for clients' tests of expiry.
#[task_tool(task = required, ttl = "1s", poll_interval = "100ms")]
async fn short_lived() -> String {
    durable::sleep(Duration::from_secs(10)).await;
    "short_lived: outlived its ttl".to_owned()
}

/// Confirmation asked before deleting.
#[derive(Deserialize, JsonSchema, Elicit)]
struct Confirm {
    /// Delete it?
    confirm: bool,
}

/// Asks for confirmation, then (pretends to) delete a file.
#[task_tool(task = required, destructive)]
async fn confirm_delete(
    /// The file to delete.
    filename: String,
) -> Result<String, ToolError> {
    let Confirm { confirm } = ask_user(format!("Delete {filename}?"))
        .key("confirm")
        .await?;
    Ok(format!("confirm_delete({filename}): confirmed = {confirm}"))
}

/// Where a job runs: a choice with titles.
#[derive(Deserialize, JsonSchema, Elicit)]
#[serde(rename_all = "kebab-case")]
enum Region {
    /// Europe (west)
    EuWest,
    /// US (east)
    UsEast,
    /// Asia Pacific (south)
    ApSouth,
}

/// How a job should run: a yes/no, a choice and a bounded number.
#[derive(Deserialize, JsonSchema, Elicit)]
struct JobSettings {
    /// Start the job now?
    start: bool,
    /// Region to run in
    region: Region,
    /// Number of workers
    #[schemars(range(min = 1, max = 8))]
    workers: u8,
}

/// Asks how to run a job (start it?, a region, 1 to 8 workers), then runs it
/// for `seconds`, saying what it does in its status message. The terminal
/// client's fixture (tests/e2e/client_pty.rs).
#[task_tool(task = required, poll_interval = "200ms")]
async fn run_job(
    /// The job's name.
    name: String,
    /// How long the job runs once started, in seconds.
    seconds: f64,
) -> Result<String, ToolError> {
    durable::status(format!("preparing {name}"));
    let settings: JobSettings = ask_user(format!("How should {name} run?"))
        .key("settings")
        .await?;
    if !settings.start {
        return Err(ToolError::new(format!("run_job({name}): not started")));
    }
    let region = match settings.region {
        Region::EuWest => "eu-west",
        Region::UsEast => "us-east",
        Region::ApSouth => "ap-south",
    };
    let workers = settings.workers;
    durable::status(format!("running {name} on {workers} workers in {region}"));
    let secs = if seconds.is_finite() {
        seconds.clamp(0.0, 86_400.0)
    } else {
        0.0
    };
    durable::sleep(Duration::from_secs_f64(secs)).await;
    Ok(format!(
        "run_job({name}): {workers} workers in {region}, done"
    ))
}

/// One value typed by the user. Both fields are optional: the official
/// suite answers `multi_input` with `{"name": …, "confirm": true}`, and an
/// answer must fit the form to be taken (`confirm` is a field the form does
/// not name, so it is ignored).
#[derive(Deserialize, JsonSchema, Elicit)]
struct Input {
    /// The value.
    value: Option<String>,
    /// A name, in place of the value.
    name: Option<String>,
}

impl Input {
    fn text(self) -> String {
        self.value.or(self.name).unwrap_or_default()
    }
}

/// Asks two questions at once and combines the answers.
#[task_tool(task = required)]
async fn multi_input() -> Result<String, ToolError> {
    let (a, b) = futures::join!(
        ask_user::<Input>("Provide value A")
            .key("input-a")
            .into_future(),
        ask_user::<Input>("Provide value B")
            .key("input-b")
            .into_future(),
    );
    Ok(format!("multi_input: a = {}, b = {}", a?.text(), b?.text()))
}

/// A user's name.
#[derive(Deserialize, JsonSchema, Elicit)]
struct UserName {
    /// Your name.
    name: String,
}

/// Asks the user's name before it becomes a task (MRTR), then greets them
/// from the task.
#[task_tool(task = required)]
async fn test_tool_with_task() -> Result<String, ToolError> {
    let UserName { name } = ask_user("What is your name?").key("user_name").await?;
    durable::sleep(Duration::from_millis(200)).await;
    Ok(format!("Hello, {name}! (async)"))
}

// ---- MRTR (SEP-2322) fixtures: inline calls that ask the client ---------------

/// The text of a `sampling/createMessage` answer (`content` is one block, or
/// since 2025-11-25 possibly several).
fn text_of_sampling(result: &Value) -> String {
    result
        .pointer("/content/text")
        .or_else(|| result.pointer("/content/0/text"))
        .and_then(Value::as_str)
        .unwrap_or("(no text)")
        .to_owned()
}

fn capital_question() -> Value {
    json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": "What is the capital of France?"}}],
        "maxTokens": 100
    })
}

/// Asks the user's name (elicitation), then greets them.
#[task_tool(task = forbidden)]
async fn test_input_required_result_elicitation() -> Result<String, ToolError> {
    let UserName { name } = ask_user("What is your name?").key("user_name").await?;
    Ok(format!("Hello, {name}!"))
}

/// Asks the client's model a question (sampling).
#[task_tool(task = forbidden)]
async fn test_input_required_result_sampling() -> Result<String, ToolError> {
    let answer = sample(capital_question()).key("capital_question").await?;
    Ok(format!("The model says: {}", text_of_sampling(&answer)))
}

/// Asks the client for its roots.
#[task_tool(task = forbidden)]
async fn test_input_required_result_list_roots() -> Result<String, ToolError> {
    let roots = list_roots().key("client_roots").await?;
    let n = roots
        .get("roots")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    Ok(format!("The client has {n} root(s)"))
}

/// A confirmation.
#[derive(Deserialize, JsonSchema, Elicit)]
struct Ok_ {
    /// Confirmed?
    ok: bool,
}

/// Asks for a confirmation; the round trip carries signed `requestState`.
#[task_tool(task = forbidden)]
async fn test_input_required_result_request_state() -> Result<String, ToolError> {
    let Ok_ { ok } = ask_user("Please confirm").key("confirm").await?;
    Ok(format!("state-ok: confirmed = {ok}"))
}

/// Asks three things at once: a name, a model completion and the roots.
#[task_tool(task = forbidden)]
async fn test_input_required_result_multiple_inputs() -> Result<String, ToolError> {
    let (name, greeting, roots) = futures::join!(
        ask_user::<UserName>("What is your name?").key("user_name").into_future(),
        sample(json!({
            "messages": [{"role": "user", "content": {"type": "text", "text": "Write a one-line greeting."}}],
            "maxTokens": 50
        }))
        .key("greeting")
        .into_future(),
        list_roots().key("client_roots").into_future(),
    );
    let (name, greeting, roots) = (name?, greeting?, roots?);
    let n = roots
        .get("roots")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    Ok(format!(
        "{}: {}, with {n} root(s)",
        name.name,
        text_of_sampling(&greeting)
    ))
}

/// A favourite colour.
#[derive(Deserialize, JsonSchema, Elicit)]
struct Colour {
    /// Your favourite colour.
    color: String,
}

/// Asks two questions in two rounds.
#[task_tool(task = forbidden)]
async fn test_input_required_result_multi_round() -> Result<String, ToolError> {
    let UserName { name } = ask_user("What is your name?").key("step1").await?;
    let Colour { color } = ask_user(format!("Hi {name}, what is your favourite colour?"))
        .key("step2")
        .await?;
    Ok(format!("{name} likes {color}"))
}

/// Asks a question whose `requestState` must come back untouched.
#[task_tool(task = forbidden)]
async fn test_input_required_result_tampered_state() -> Result<String, ToolError> {
    let Ok_ { ok } = ask_user("Please confirm").key("confirm").await?;
    Ok(format!("confirmed = {ok}"))
}

/// Asks only what the client declared it can answer: a form when it declared
/// elicitation, a model completion otherwise.
#[task_tool(task = forbidden)]
async fn test_input_required_result_capabilities() -> Result<String, ToolError> {
    match ask_user::<UserName>("What is your name?")
        .key("user_name")
        .await
    {
        Ok(UserName { name }) => Ok(format!("Hello, {name}!")),
        Err(AskError::Unsupported(_)) => {
            let answer = sample(capital_question()).key("capital_question").await?;
            Ok(format!("The model says: {}", text_of_sampling(&answer)))
        }
        Err(e) => Err(e.into()),
    }
}

// ---- Questions of the 2025-11-25 suite ---------------------------------------
//
// The same task tools serve both eras: a 2026-07-28 client answers their
// questions through `inputRequests`, a 2025-11-25 session client gets them as
// `sampling/createMessage` and `elicitation/create` requests in its session.

/// Sends the prompt to the client's model (sampling) and reports its answer.
#[task_tool]
async fn test_sampling(
    /// The prompt to send.
    prompt: String,
) -> Result<String, ToolError> {
    let answer = sample(json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
        "maxTokens": 100
    }))
    .key("llm")
    .await?;
    Ok(format!("LLM response: {}", text_of_sampling(&answer)))
}

/// Who the user is.
#[derive(Deserialize, Serialize, JsonSchema, Elicit)]
struct UserInfo {
    /// User's response
    username: String,
    /// User's email address
    email: String,
}

/// How the user answered a form: `accept` with its content, or the action.
fn user_response<T: Serialize>(answer: Result<T, AskError>) -> Result<String, ToolError> {
    let (action, content) = match answer {
        Ok(form) => ("accept", json!(form)),
        Err(AskError::Declined) => ("decline", Value::Null),
        Err(AskError::Cancelled) => ("cancel", Value::Null),
        Err(e) => return Err(e.into()),
    };
    Ok(format!("action={action}, content={content}"))
}

/// Asks the user for a name and an email address (elicitation).
#[task_tool]
async fn test_elicitation(
    /// The message to show the user.
    message: String,
) -> Result<String, ToolError> {
    let answer = ask_user::<UserInfo>(message).key("user_info").await;
    let response = user_response(answer)?;
    Ok(format!("User response: {response}"))
}

/// A user's status.
#[derive(Default, Deserialize, Serialize, JsonSchema, Elicit)]
#[serde(rename_all = "lowercase")]
enum Status {
    #[default]
    Active,
    Inactive,
    Pending,
}

/// A form whose every field has a default (SEP-1034).
#[derive(Deserialize, Serialize, JsonSchema, Elicit)]
struct Defaults {
    /// User's name
    #[serde(default = "default_name")]
    name: String,
    /// User's age
    #[serde(default = "default_age")]
    age: i64,
    /// User's score
    #[serde(default = "default_score")]
    score: f64,
    /// User's status
    #[serde(default)]
    status: Status,
    /// Whether the user is verified
    #[serde(default = "default_verified")]
    verified: bool,
}

fn default_name() -> String {
    "John Doe".into()
}

fn default_age() -> i64 {
    30
}

fn default_score() -> f64 {
    95.5
}

fn default_verified() -> bool {
    true
}

/// Asks a form whose fields all have defaults (SEP-1034).
#[task_tool]
async fn test_elicitation_sep1034_defaults() -> Result<String, ToolError> {
    let answer = ask_user::<Defaults>("Please provide values (all have defaults)")
        .key("defaults")
        .await;
    let response = user_response(answer)?;
    Ok(format!("Elicitation completed: {response}"))
}

use std::future::IntoFuture as _;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let cli = mcp_tasks_server::Cli::parse();
    // Kept to the end: when it drops, the spans still buffered are sent.
    let _traces = mcp_tasks_server::init_tracing(&cli, "mcp-tasks-conformance")?;
    let store = cli.store_location("conformance.db");
    let builder = cli.engine("conformance.db").await?;
    let engine = cli.check_replay_if_asked(builder).await?.start().await?;
    let server = cli
        .auth(cli.state_keys(TaskServer::builder(engine))?)?
        .extras(extras::Fixtures)
        .name("mcp-tasks-conformance", env!("CARGO_PKG_VERSION"))
        .instructions("mcp-tasks conformance fixtures")
        // Asks before the task exists (MRTR), then continues as a task.
        .tool_inline_window("test_tool_with_task", Duration::from_millis(100));
    mcp_tasks_server::serve(&cli, &store, server).await
}
