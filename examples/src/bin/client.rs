//! A terminal MCP client for task tools, on `mcp_tasks_runtime::client`:
//! calls a tool, follows its task with a progress line, asks you its
//! questions, and prints the result.
//!
//! ```text
//! cargo run --bin client -- deploy '{"service":"billing","git_ref":"v2.3.0"}'
//! cargo run --bin client -- --url http://127.0.0.1:8080/mcp confirm_delete '{"filename":"a.txt"}'
//! cargo run --bin client -- --resume f161cb664b1045b0d589c1170e2e68a1
//! cargo run --bin client -- deploy '{"service":"billing","git_ref":"v2.3.0"}' -- target/debug/demo --stdio
//! ```
//!
//! After `--`, a command: the client starts it and speaks MCP with it over
//! its stdin and stdout (the server's logs stay on stderr), instead of
//! connecting to `--url`. `--resume` with a command starts it again to
//! follow the task, so the command must find the same store.
//!
//! It declares the tasks extension and form elicitation. Each change of the
//! task's status is shown on stderr with the time since the start; each
//! question is asked field by field on stdin (booleans as y/n, enums as a
//! choice, numbers checked against their bounds, required fields marked);
//! an empty answer to a required field declines the form. Ctrl-C cancels the
//! task and waits for it to end. The task id is printed first, so that a
//! later `--resume ID` follows the same task. `--json` prints the result (or
//! the error) as one JSON value on stdout.
//!
//! Exit codes: 0 the tool succeeded, 1 the tool reported an error
//! (`isError`, bad arguments included), 2 the task failed, 3 it was
//! cancelled, 4 it expired (the server no longer knows it), 5 anything else
//! (connection, a refused call, an unknown tool).

use std::{
    io::{BufRead, Write},
    process::ExitCode,
    time::Instant,
};

use clap::Parser;
use futures::StreamExt as _;
use mcp_tasks_runtime::client::{
    ClientError, ElicitResult, ElicitationAction, Endpoint, TaskClient, TaskHandle, TaskReference,
};
use serde_json::{Map, Value, json};

/// Calls an MCP task tool and follows it to the end.
#[derive(Debug, Parser)]
struct Args {
    /// The server's MCP endpoint.
    #[arg(long, default_value = "http://127.0.0.1:8080/mcp")]
    url: String,
    /// Follow this task (its id, as printed when it started) instead of
    /// calling a tool.
    #[arg(long, value_name = "TASK_ID", conflicts_with = "tool")]
    resume: Option<String>,
    /// Print the result, or the error, as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// The tool to call.
    #[arg(required_unless_present = "resume")]
    tool: Option<String>,
    /// The tool's arguments, as a JSON object.
    #[arg(default_value = "{}")]
    arguments: String,
    /// A server to start and speak to over stdio, instead of `--url`: the
    /// command and its arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    server: Vec<String>,
}

impl Args {
    /// Where the server is: the command after `--`, or `--url`.
    fn endpoint(&self) -> Endpoint {
        match self.server.split_first() {
            Some((command, args)) => Endpoint::Stdio {
                command: command.clone(),
                args: args.to_vec(),
            },
            None => Endpoint::Http {
                url: self.url.clone(),
            },
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let json_out = args.json;
    let outcome = run(args).await;
    let (code, kind) = match &outcome {
        Ok(_) => (0, "ok"),
        Err(ClientError::Tool { .. }) => (1, "tool"),
        Err(ClientError::Failed { .. }) => (2, "failed"),
        Err(ClientError::Cancelled { .. }) => (3, "cancelled"),
        Err(ClientError::Expired { .. }) => (4, "expired"),
        Err(_) => (5, "error"),
    };
    match outcome {
        Ok(value) if json_out => println!("{value}"),
        Ok(Value::String(text)) => println!("{text}"),
        Ok(value) => println!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        ),
        Err(e) if json_out => {
            let mut out = json!({"error": kind, "message": e.to_string()});
            if let ClientError::Failed { error, .. } = &e {
                out["code"] = json!(error.code.0);
            }
            println!("{out}");
        }
        Err(ClientError::Tool { message, .. }) => {
            println!("{message}");
            eprintln!("the tool reported an error");
        }
        Err(e) => eprintln!("error: {e}"),
    }
    ExitCode::from(code)
}

async fn run(args: Args) -> Result<Value, ClientError> {
    let endpoint = args.endpoint();
    let client = TaskClient::builder(endpoint.clone())
        .client_info("mcp-tasks-client", env!("CARGO_PKG_VERSION"))
        .on_elicit(|request| async move {
            let params = serde_json::to_value(&request).unwrap_or_default();
            let answer = tokio::task::spawn_blocking(move || ask_form(&params))
                .await
                .unwrap_or_else(|_| json!({"action": "cancel"}));
            serde_json::from_value(answer)
                .unwrap_or_else(|_| ElicitResult::new(ElicitationAction::Cancel))
        })
        .connect()
        .await?;
    let handle = match (&args.resume, &args.tool) {
        (Some(id), _) => client.resume(TaskReference {
            endpoint,
            task_id: id.clone(),
        })?,
        (None, Some(tool)) => {
            let arguments: Map<String, Value> =
                serde_json::from_str(&args.arguments).map_err(|e| {
                    ClientError::Decode(format!("the arguments must be a JSON object: {e}"))
                })?;
            client.start(tool, arguments).await?
        }
        (None, None) => unreachable!("clap requires a tool or --resume"),
    };
    follow(&handle).await;
    handle.result::<Value>().await
}

/// Shows each change of the task's status until it ends; Ctrl-C cancels it.
async fn follow(handle: &TaskHandle) {
    let Some(id) = handle.id() else { return };
    eprintln!("task {id}");
    let started = Instant::now();
    let mut updates = handle.updates();
    let mut cancelling = false;
    loop {
        let update = tokio::select! {
            update = updates.next() => update,
            _ = tokio::signal::ctrl_c(), if !cancelling => {
                eprintln!("  cancelling {id} (waiting for it to stop)");
                cancelling = true;
                if let Err(e) = handle.cancel().await {
                    eprintln!("  could not cancel: {e}");
                }
                continue;
            }
        };
        match update {
            Some(Ok(update)) => {
                let status = serde_json::to_value(update.status).unwrap_or_default();
                eprintln!(
                    "  [{:>6.1}s] {}{}",
                    started.elapsed().as_secs_f64(),
                    status.as_str().unwrap_or("?"),
                    update
                        .status_message
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default()
                );
            }
            // `result()` reports how it ended.
            Some(Err(_)) | None => return,
        }
    }
}

fn read_line(prompt: &str) -> Option<String> {
    eprint!("{prompt}");
    std::io::stderr().flush().ok()?;
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).ok()? == 0 {
        return None;
    }
    Some(line.trim().to_owned())
}

/// One field's answer, checked against its schema; `Err` says why not.
fn parse_field(field: &Value, choices: &[String], line: &str) -> Result<Value, String> {
    let bounds = |n: f64| {
        if let Some(min) = field["minimum"].as_f64()
            && n < min
        {
            return Err(format!("at least {min}"));
        }
        if let Some(max) = field["maximum"].as_f64()
            && n > max
        {
            return Err(format!("at most {max}"));
        }
        Ok(())
    };
    match field["type"].as_str().unwrap_or("string") {
        "boolean" => match line.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" => Ok(json!(true)),
            "n" | "no" | "false" => Ok(json!(false)),
            _ => Err("y or n".to_owned()),
        },
        "integer" => {
            let n: i64 = line.parse().map_err(|_| "a whole number".to_owned())?;
            bounds(n as f64)?;
            Ok(json!(n))
        }
        "number" => {
            let n: f64 = line.parse().map_err(|_| "a number".to_owned())?;
            bounds(n)?;
            Ok(json!(n))
        }
        _ if !choices.is_empty() => {
            // By name, or by its number in the list.
            let picked = line
                .parse::<usize>()
                .ok()
                .and_then(|i| choices.get(i.wrapping_sub(1)))
                .or_else(|| choices.iter().find(|c| *c == line));
            picked
                .map(|c| json!(c))
                .ok_or_else(|| format!("one of {}", choices.join(", ")))
        }
        _ => Ok(json!(line)),
    }
}

/// Prompts for each field of a form (an `elicitation/create`'s params);
/// an empty answer to a required field (or end of input) declines it.
fn ask_form(params: &Value) -> Value {
    eprintln!(
        "? {}",
        params["message"].as_str().unwrap_or("The server asks:")
    );
    if params["mode"] == "url" {
        eprintln!("  (open {} to answer; declining here)", params["url"]);
        return json!({"action": "decline"});
    }
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
        let is_required = required.contains(&name.as_str());
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
        let kind = field["type"].as_str().unwrap_or("string");
        let hint = match (kind, choices.is_empty()) {
            ("boolean", _) => " [y/n]".to_owned(),
            (_, false) => format!(" [{}]", choices.join("/")),
            ("integer" | "number", _) => {
                let min = field["minimum"].as_f64().map(|m| format!(" ≥ {m}"));
                let max = field["maximum"].as_f64().map(|m| format!(" ≤ {m}"));
                format!(
                    " ({kind}{}{})",
                    min.unwrap_or_default(),
                    max.unwrap_or_default()
                )
            }
            _ => String::new(),
        };
        let mark = if is_required { "*" } else { "" };
        loop {
            let Some(line) = read_line(&format!("  {label}{mark}{hint}: ")) else {
                return json!({"action": "cancel"});
            };
            if line.is_empty() {
                if is_required {
                    return json!({"action": "decline"});
                }
                break;
            }
            match parse_field(field, &choices, &line) {
                Ok(v) => {
                    content.insert(name.clone(), v);
                    break;
                }
                Err(expected) => eprintln!("  not a valid answer: {expected}"),
            }
        }
    }
    json!({"action": "accept", "content": content})
}
