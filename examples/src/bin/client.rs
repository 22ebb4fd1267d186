//! A terminal MCP client for task tools: calls a tool, follows its task,
//! asks you its questions, and prints the result.
//!
//! ```text
//! cargo run --bin client -- deploy '{"service":"billing","git_ref":"v2.3.0"}'
//! cargo run --bin client -- --url http://127.0.0.1:8080/mcp confirm_delete '{"filename":"a.txt"}'
//! ```
//!
//! It declares the tasks extension and form elicitation, so a task-capable
//! tool answers with a task: the client polls `tasks/get` at the server's
//! `pollIntervalMs`, prints each new status message, prompts on stdin for
//! every outstanding form field and answers with `tasks/update`. Ctrl-C sends
//! `tasks/cancel`. A tool that runs inline and asks questions (MRTR) is
//! answered the same way. Exits 0 when the tool succeeds, 1 otherwise.

use std::{
    io::{BufRead, Write},
    time::Duration,
};

use clap::Parser;
use rmcp::{
    ClientLifecycleMode, ClientServiceExt,
    model::{
        CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities,
        ClientConfig, GetTaskParams, Implementation, InputRequests, JsonObject, ProtocolVersion,
        TaskPayload, UpdateTaskParams,
    },
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Map, Value, json};

/// Calls an MCP task tool and follows it to the end.
#[derive(Debug, Parser)]
struct Args {
    /// The server's MCP endpoint.
    #[arg(long, default_value = "http://127.0.0.1:8080/mcp")]
    url: String,
    /// The tool to call.
    tool: String,
    /// The tool's arguments, as a JSON object.
    #[arg(default_value = "{}")]
    arguments: String,
}

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() {
    let args = Args::parse();
    match run(args).await {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}

async fn run(args: Args) -> Result<bool, Error> {
    let arguments: JsonObject = serde_json::from_str(&args.arguments)
        .map_err(|e| format!("the arguments must be a JSON object: {e}"))?;
    let capabilities: ClientCapabilities = serde_json::from_value(json!({
        "elicitation": {},
        "extensions": {"io.modelcontextprotocol/tasks": {}},
    }))?;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(args.url.clone()),
    );
    let client = ClientConfig::new(
        capabilities,
        Implementation::new("mcp-tasks-client", "0.1.0"),
    )
    .serve_with_lifecycle(
        transport,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .map_err(|e| format!("could not connect to {}: {e}", args.url))?;
    let peer = client.peer().clone();

    let mut request = CallToolRequestParams::new(args.tool.clone()).with_arguments(arguments);
    let created = loop {
        match peer.call_tool_once(request.clone()).await? {
            CallToolResponse::Complete(result) => {
                return Ok(print_result(&serde_json::to_value(result)?));
            }
            CallToolResponse::InputRequired(asked) => {
                let answers = answer_all(asked.input_requests.as_ref())?;
                request = request.with_input_responses(answers.into_iter().collect());
                if let Some(state) = asked.request_state {
                    request = request.with_request_state(state);
                }
            }
            CallToolResponse::Task(task) => break task.task,
            other => return Err(format!("unexpected response: {other:?}").into()),
        }
    };
    let id = created.task_id.clone();
    eprintln!("task {id} ({})", args.tool);
    let poll = Duration::from_millis(created.poll_interval_ms.unwrap_or(1000).clamp(50, 10_000));
    let mut last_message = None;
    let mut answered: Vec<String> = Vec::new();
    loop {
        let task = peer.get_task(GetTaskParams::new(id.clone())).await?.task;
        if task.task.status_message != last_message {
            if let Some(m) = &task.task.status_message {
                eprintln!("  {m}");
            }
            last_message.clone_from(&task.task.status_message);
        }
        match &task.payload {
            TaskPayload::Completed { result } => {
                return Ok(print_result(&Value::Object(result.clone())));
            }
            TaskPayload::Failed { error } => {
                eprintln!("failed: {}", Value::Object(error.clone()));
                return Ok(false);
            }
            TaskPayload::Cancelled => {
                eprintln!("cancelled");
                return Ok(false);
            }
            TaskPayload::InputRequired { input_requests } => {
                // A poll may show a key again before the update lands.
                let fresh: InputRequests = input_requests
                    .iter()
                    .filter(|(k, _)| !answered.contains(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if !fresh.is_empty() {
                    let answers = answer_all(Some(&fresh))?;
                    answered.extend(answers.keys().cloned());
                    peer.update_task(UpdateTaskParams::new(
                        id.clone(),
                        answers.into_iter().collect(),
                    ))
                    .await?;
                    continue;
                }
            }
            _ => {}
        }
        tokio::select! {
            () = tokio::time::sleep(poll) => {}
            _ = tokio::signal::ctrl_c() => {
                eprintln!("cancelling {id}");
                peer.cancel_task(CancelTaskParams::new(id.clone())).await?;
            }
        }
    }
}

/// Prints a `CallToolResult`; returns whether it was a success.
fn print_result(result: &Value) -> bool {
    if let Some(structured) = result.get("structuredContent") {
        println!(
            "{}",
            serde_json::to_string_pretty(structured).unwrap_or_default()
        );
    } else {
        for item in result["content"].as_array().into_iter().flatten() {
            match item["type"].as_str() {
                Some("text") => println!("{}", item["text"].as_str().unwrap_or_default()),
                Some(other) => println!("[{other} content]"),
                None => {}
            }
        }
    }
    let is_error = result["isError"] == json!(true);
    if is_error {
        eprintln!("the tool reported an error");
    }
    !is_error
}

/// Asks the user every question in `requests`; returns the answers by key.
fn answer_all(requests: Option<&InputRequests>) -> Result<Map<String, Value>, Error> {
    let mut answers = Map::new();
    for (key, request) in requests.into_iter().flatten() {
        let request = serde_json::to_value(request)?;
        let answer = match request["method"].as_str() {
            Some("elicitation/create") => ask_form(&request["params"])?,
            Some(other) => {
                eprintln!("  ({other} is not supported by this client; declining)");
                json!({"action": "decline"})
            }
            None => continue,
        };
        answers.insert(key.clone(), answer);
    }
    Ok(answers)
}

fn read_line(prompt: &str) -> Result<Option<String>, Error> {
    eprint!("{prompt}");
    std::io::stderr().flush()?;
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line)? == 0 {
        return Ok(None);
    }
    Ok(Some(line.trim().to_owned()))
}

/// Prompts for each field of a form; an empty answer to a required field (or
/// end of input) declines the whole form.
fn ask_form(params: &Value) -> Result<Value, Error> {
    eprintln!(
        "? {}",
        params["message"].as_str().unwrap_or("The server asks:")
    );
    let schema = &params["requestedSchema"];
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut content = Map::new();
    for (name, field) in schema["properties"].as_object().into_iter().flatten() {
        let label = field["description"]
            .as_str()
            .or(field["title"].as_str())
            .unwrap_or(name);
        let kind = field["type"].as_str().unwrap_or("string");
        let choices: Vec<String> = field["enum"]
            .as_array()
            .map(|c| {
                c.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .or_else(|| {
                field["oneOf"].as_array().map(|c| {
                    c.iter()
                        .filter_map(|v| v["const"].as_str().map(str::to_owned))
                        .collect()
                })
            })
            .unwrap_or_default();
        let hint = match (kind, choices.is_empty()) {
            ("boolean", _) => " [y/n]".to_owned(),
            (_, false) => format!(" [{}]", choices.join("/")),
            (k, true) if k != "string" => format!(" ({k})"),
            _ => String::new(),
        };
        loop {
            let Some(line) = read_line(&format!("  {label}{hint}: "))? else {
                return Ok(json!({"action": "cancel"}));
            };
            if line.is_empty() {
                if required.contains(&name.as_str()) {
                    return Ok(json!({"action": "decline"}));
                }
                break;
            }
            let value = match kind {
                "boolean" => match line.to_ascii_lowercase().as_str() {
                    "y" | "yes" | "true" => Some(json!(true)),
                    "n" | "no" | "false" => Some(json!(false)),
                    _ => None,
                },
                "integer" => line.parse::<i64>().ok().map(Value::from),
                "number" => line.parse::<f64>().ok().map(Value::from),
                _ if !choices.is_empty() => choices.contains(&line).then(|| json!(line)),
                _ => Some(json!(line)),
            };
            match value {
                Some(v) => {
                    content.insert(name.clone(), v);
                    break;
                }
                None => eprintln!("  not a valid answer{hint}"),
            }
        }
    }
    Ok(json!({"action": "accept", "content": content}))
}
