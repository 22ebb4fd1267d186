//! Test-only: a task server written with rmcp alone (its `TaskManager`), with
//! none of this project's runtime, so that `TaskClient` is tested against a
//! server it was not written with (examples/tests/task_client.rs). Not an
//! example to copy: its tasks live in memory and die with the process.
//!
//! One tool, `ask_name`: as a task (for clients that declare the Tasks
//! extension) it sets a status message, asks the user's name through
//! `inputRequests` and answers `Hello, NAME!`; without the extension it
//! answers `Hello, stranger!` at once.
//!
//! `rmcp-task-server --addr 127.0.0.1:0` prints `listening on http://ADDR/mcp`.

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
        let tool: Tool = from_json(json!({
            "name": "ask_name",
            "description": "Asks the user's name, then greets them.",
            "inputSchema": {"type": "object", "properties": {}}
        }));
        Ok(ListToolsResult::with_all_items(vec![tool]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if request.name != "ask_name" {
            return Err(McpError::invalid_params("unknown tool", None));
        }
        let tasks = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut addr = "127.0.0.1:0".to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--addr" {
            addr = args.next().ok_or("--addr needs a value")?;
        }
    }
    let server = Server::default();
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}/mcp", listener.local_addr()?);
    let app = axum::Router::new().route_service("/mcp", service);
    axum::serve(listener, app).await?;
    Ok(())
}
