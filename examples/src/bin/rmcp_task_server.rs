//! Test-only: a task server written with rmcp alone (its `TaskManager`), with
//! none of this project's runtime. `TaskClient` is tested against it, a
//! server it was not written with (tests/e2e/task_client.rs), and the
//! `peer` benchmark measures it beside the conformance example as the
//! baseline: the official SDK's own, in-memory task support. Not an example
//! to copy: its tasks live in memory and die with the process.
//!
//! Two tools:
//! - `ask_name`: as a task (for clients that declare the Tasks extension) it
//!   sets a status message, asks the user's name through `inputRequests` and
//!   answers `Hello, NAME!`; without the extension it answers
//!   `Hello, stranger!` at once.
//! - `slow_compute {seconds, label}`: as the conformance example's tool of
//!   that name, a task that sleeps `seconds`, then answers with its label.
//!
//! Its HTTP transport is configured as the project's own server configures
//! rmcp's (JSON answers, not SSE, when a request has one answer), so the two
//! differ only in what is built on the transport; `--sse` keeps rmcp's
//! defaults instead (every answer an SSE stream).
//!
//! `rmcp-task-server --addr 127.0.0.1:0 [--sse]` prints `listening on http://ADDR/mcp`.

use std::sync::Arc;

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
        CreateTaskResult, GetTaskParams, GetTaskResult, InputRequest, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, UpdateTaskParams,
    },
    service::RequestContext,
    task_manager::{TaskExit, TaskManager, TaskOptions},
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

fn from_json<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("fixture JSON matches the rmcp type")
}

fn text(text: String) -> CallToolResult {
    from_json(json!({"resultType": "complete", "content": [{"type": "text", "text": text}]}))
}

#[derive(Clone, Default)]
struct Server {
    tasks: TaskManager,
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let ask: Tool = from_json(json!({
            "name": "ask_name",
            "description": "Asks the user's name, then greets them.",
            "inputSchema": {"type": "object", "properties": {}}
        }));
        let slow: Tool = from_json(json!({
            "name": "slow_compute",
            "description": "Sleeps for `seconds`, then answers with `label`.",
            "inputSchema": {"type": "object", "properties": {
                "seconds": {"type": "number"}, "label": {"type": "string"}},
                "required": ["seconds", "label"]}
        }));
        Ok(ListToolsResult::with_all_items(vec![ask, slow]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tasks = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        if request.name == "slow_compute" {
            return Ok(slow_compute(&self.tasks, request, tasks).await);
        }
        if request.name != "ask_name" {
            return Err(McpError::invalid_params("unknown tool", None));
        }
        if !tasks {
            return Ok(CallToolResponse::Complete(text(
                "Hello, stranger!".to_owned(),
            )));
        }
        let options = TaskOptions::new()
            .with_poll_interval_ms(50)
            .with_status_message("starting");
        let task = self.tasks.spawn(options, |task| {
            Box::pin(async move {
                task.set_status_message("asking the user's name");
                let question: InputRequest = from_json(json!({
                    "method": "elicitation/create",
                    "params": {"mode": "form", "message": "What is your name?",
                        "requestedSchema": {"type": "object",
                            "properties": {"name": {"type": "string"}}, "required": ["name"]}}
                }));
                let answer = task.request_input("name", question).await?;
                if answer["action"] != "accept" {
                    return Err(TaskExit::Cancelled);
                }
                let name = answer["content"]["name"].as_str().unwrap_or("?").to_owned();
                Ok(text(format!("Hello, {name}!")))
            })
        });
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        Ok(GetTaskResult::new(self.tasks.get_task(&request.task_id)?))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks.cancel_task(&request.task_id)
    }
}

/// How long a task is kept, in ms: an hour, as the conformance example's.
const TTL_MS: u64 = 3_600_000;

/// `slow_compute`: a task sleeping `seconds` (clamped to a day), or the same
/// sleep in the call for a client without the Tasks extension.
async fn slow_compute(
    tasks: &TaskManager,
    request: CallToolRequestParams,
    as_task: bool,
) -> CallToolResponse {
    let arguments = request.arguments.unwrap_or_default();
    let seconds = arguments
        .get("seconds")
        .and_then(Value::as_f64)
        .filter(|s| s.is_finite())
        .unwrap_or(0.0)
        .clamp(0.0, 86_400.0);
    let label = arguments
        .get("label")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let done = format!("slow_compute({label}) done after {seconds}s");
    let sleep = tokio::time::sleep(std::time::Duration::from_secs_f64(seconds));
    if !as_task {
        sleep.await;
        return CallToolResponse::Complete(text(done));
    }
    // Kept for an hour, as the conformance example keeps its tasks (rmcp's
    // default is five minutes: a long benchmark would see its first tasks
    // fail and then vanish).
    let options = TaskOptions::new().with_ttl_ms(TTL_MS);
    let task = tasks.spawn(options, move |_task| {
        Box::pin(async move {
            sleep.await;
            Ok(text(done))
        })
    });
    CallToolResponse::Task(CreateTaskResult::new(task))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut addr = "127.0.0.1:0".to_owned();
    let mut json_response = true;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--addr" {
            addr = args.next().ok_or("--addr needs a value")?;
        } else if arg == "--sse" {
            json_response = false;
        } else if arg.starts_with("--check-replay") {
            // rmcp keeps its tasks in this process's memory: no journal.
            return Err(
                "--check-replay: rmcp-task-server keeps no journal, so there is no \
                        replay to check"
                    .into(),
            );
        }
    }
    let server = Server::default();
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default().with_json_response(json_response),
    );
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}/mcp", listener.local_addr()?);
    let app = axum::Router::new().route_service("/mcp", service);
    axum::serve(listener, app).await?;
    Ok(())
}
