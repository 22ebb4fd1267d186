//! A terminal MCP client for task tools, on `mcp_tasks_client`:
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
//! It declares the tasks extension and form elicitation. The task id is
//! printed first, so that a later `--resume ID` follows the same task.
//!
//! On a terminal, a spinner shows the task's status message and the time
//! since the start, and each change of status is kept as a line above it;
//! questions are asked as typed prompts ([`form`]); the first Ctrl-C asks
//! whether to cancel the task ([`ui`]). Without a terminal (pipes, scripts)
//! and with `--json`, progress is plain lines on stderr; without a terminal,
//! questions are read line by line from stdin and Ctrl-C cancels at once.
//! `--json` prints the result (or the error) as one JSON value on stdout.
//!
//! Exit codes: 0 the tool succeeded, 1 the tool reported an error
//! (`isError`, bad arguments included), 2 the task failed, 3 it was
//! cancelled, 4 it expired (the server no longer knows it), 5 anything else
//! (connection, a refused call, an unknown tool).

mod form;
mod ui;

use std::{io::IsTerminal as _, process::ExitCode, sync::Arc};

use clap::Parser;
use futures::StreamExt as _;
use mcp_tasks_client::{
    ClientError, ElicitResult, ElicitationAction, Endpoint, TaskClient, TaskHandle, TaskReference,
};
use nix::sys::termios;
use serde_json::{Map, Value, json};

use crate::ui::{Interrupt, Ui};

/// Calls an MCP task tool and follows it to the end.
#[derive(Debug, Parser)]
#[command(after_long_help = AFTER_HELP, after_help = AFTER_HELP)]
struct Args {
    /// The server's MCP endpoint.
    #[arg(long, default_value = "http://127.0.0.1:8080/mcp")]
    url: String,
    /// Follow this task (its id, as printed when it started) instead of
    /// calling a tool.
    #[arg(long, value_name = "TASK_ID", conflicts_with = "tool")]
    resume: Option<String>,
    /// Print the result, or the error, as JSON on stdout; progress stays
    /// plain lines on stderr.
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

const AFTER_HELP: &str = "\
Ctrl-C:
  On a terminal, the first Ctrl-C asks \"Cancel task ID?\": yes sends
  tasks/cancel and waits for the task to stop (exit code 3); no carries on
  following it. A second Ctrl-C while that question is shown cancels at once.
  Without a terminal, Ctrl-C cancels at once. Once cancelling, one more Ctrl-C
  stops waiting (the task may still be stopping on the server).
  Leaving the client any other way (closing the terminal, kill) does not
  cancel: `--resume ID` follows the task again.

Questions:
  On a terminal, each field is a prompt typed by its schema: yes/no, a list to
  choose from, a number checked against its bounds, text. Required fields are
  marked *, defaults are shown. Esc (on a choice or a yes/no) or an empty
  answer (to a number or text) skips an optional field, and on a required one
  asks whether to decline the whole question. Ctrl-C in a prompt asks
  \"Cancel task ID?\"; no asks the field again. Without a terminal, answers are
  read line by line from stdin; an empty answer to a required field declines
  the question.

Exit codes:
  0 the tool succeeded, 1 the tool reported an error, 2 the task failed,
  3 it was cancelled, 4 it expired, 5 anything else (connection, a refused
  call, an unknown tool).";

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

/// How a run ended, when not with a result.
#[derive(Debug)]
enum Ended {
    /// What the client said.
    Client(ClientError),
    /// Ctrl-C before there was a task to cancel, or while waiting for a
    /// cancelled task to stop.
    Interrupted(String),
}

impl From<ClientError> for Ended {
    fn from(e: ClientError) -> Self {
        Self::Client(e)
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    // A prompt switches the terminal to raw mode while it waits for a key.
    let terminal = interactive
        .then(|| termios::tcgetattr(std::io::stdin()).ok())
        .flatten();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(5);
        }
    };
    let code = runtime.block_on(client(args, interactive));
    // A prompt may still wait for a key (the task ended, or Ctrl-C came from
    // elsewhere): it is left behind, and the terminal put back.
    runtime.shutdown_background();
    if let Some(mode) = terminal {
        let _ = termios::tcsetattr(std::io::stdin(), termios::SetArg::TCSANOW, &mode);
        let _ = dialoguer::console::Term::stderr().show_cursor();
    }
    code
}

async fn client(args: Args, interactive: bool) -> ExitCode {
    let json_out = args.json;
    let spinner = std::io::stderr().is_terminal() && !json_out;
    let ui = Arc::new(Ui::new(interactive, spinner));
    tokio::spawn(ui::watch_interrupts(ui.clone()));
    let outcome = run(args, &ui).await;
    ui.finish_progress();
    let (code, kind) = match &outcome {
        Ok(_) => (0, "ok"),
        Err(Ended::Client(ClientError::Tool { .. })) => (1, "tool"),
        Err(Ended::Client(ClientError::Failed { .. })) => (2, "failed"),
        Err(Ended::Client(ClientError::Cancelled { .. }) | Ended::Interrupted(_)) => {
            (3, "cancelled")
        }
        Err(Ended::Client(ClientError::Expired { .. })) => (4, "expired"),
        Err(_) => (5, "error"),
    };
    match outcome {
        Ok(value) if json_out => println!("{value}"),
        Ok(Value::String(text)) => println!("{text}"),
        Ok(value) => println!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        ),
        Err(Ended::Interrupted(message)) if json_out => {
            println!("{}", json!({"error": kind, "message": message}));
        }
        Err(Ended::Interrupted(message)) => eprintln!("{message}"),
        Err(Ended::Client(e)) if json_out => {
            let mut out = json!({"error": kind, "message": e.to_string()});
            if let ClientError::Failed { error, .. } = &e {
                out["code"] = json!(error.code.0);
            }
            println!("{out}");
        }
        Err(Ended::Client(ClientError::Tool { message, .. })) => {
            println!("{message}");
            eprintln!("the tool reported an error");
        }
        Err(Ended::Client(e)) => eprintln!("error: {e}"),
    }
    ExitCode::from(code)
}

/// Waits for `work`, unless Ctrl-C asks to stop first (before a task
/// exists, there is nothing to cancel on the server).
async fn unless_interrupted<T>(
    ui: &Ui,
    work: impl Future<Output = Result<T, ClientError>>,
) -> Result<T, Ended> {
    let mut interrupts = ui.interrupts();
    tokio::select! {
        done = work => Ok(done?),
        _ = interrupts.wait_for(|i| *i != Interrupt::None) => {
            Err(Ended::Interrupted("interrupted before a task started".to_owned()))
        }
    }
}

async fn run(args: Args, ui: &Arc<Ui>) -> Result<Value, Ended> {
    let endpoint = args.endpoint();
    let asker = ui.clone();
    let connecting = TaskClient::builder(endpoint.clone())
        .client_info("mcp-tasks-client", env!("CARGO_PKG_VERSION"))
        .on_elicit(move |request| {
            let ui = asker.clone();
            async move {
                let params = serde_json::to_value(&request).unwrap_or_default();
                let answer = tokio::task::spawn_blocking(move || form::ask(&ui, &params))
                    .await
                    .unwrap_or_else(|_| json!({"action": "cancel"}));
                serde_json::from_value(answer)
                    .unwrap_or_else(|_| ElicitResult::new(ElicitationAction::Cancel))
            }
        })
        .connect();
    let client = unless_interrupted(ui, connecting).await?;
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
            unless_interrupted(ui, client.start(tool, arguments)).await?
        }
        (None, None) => unreachable!("clap requires a tool or --resume"),
    };
    follow(&handle, ui).await?;
    let mut interrupts = ui.interrupts();
    tokio::select! {
        result = handle.result::<Value>() => Ok(result?),
        _ = interrupts.wait_for(|i| *i == Interrupt::GiveUp) => Err(gave_up()),
    }
}

fn gave_up() -> Ended {
    Ended::Interrupted("stopped waiting; the task was asked to cancel".to_owned())
}

/// Shows each change of the task's status until it ends; Ctrl-C (as
/// [`ui::watch_interrupts`] decides) cancels it.
async fn follow(handle: &TaskHandle, ui: &Ui) -> Result<(), Ended> {
    let Some(id) = handle.id() else { return Ok(()) };
    ui.start_progress(id);
    let mut updates = handle.updates();
    let mut interrupts = ui.interrupts();
    let mut cancelling = false;
    loop {
        match *interrupts.borrow_and_update() {
            Interrupt::GiveUp => return Err(gave_up()),
            Interrupt::Cancel if !cancelling => {
                cancelling = true;
                ui.note(&format!("cancelling {id} (waiting for it to stop)"));
                if let Err(e) = handle.cancel().await {
                    ui.note(&format!("could not cancel: {e}"));
                }
            }
            _ => {}
        }
        tokio::select! {
            update = updates.next() => match update {
                Some(Ok(update)) => {
                    ui.show(update.status.as_str(), update.status_message.as_deref());
                }
                // `result()` reports how it ended.
                Some(Err(_)) | None => return Ok(()),
            },
            // The sender lives as long as `ui`: this only ends on a change.
            Ok(()) = interrupts.changed() => {}
        }
    }
}
