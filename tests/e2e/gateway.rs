//! The gateway (`mcp-tasks-gateway`, the `mcp_tasks_gateway` crate) in
//! front of MCP servers nobody here wrote, installed from their registries
//! by `.ci/upstreams.sh`: the official TypeScript "everything" server (npm)
//! and a server written with the official Python SDK (PyPI,
//! `tests/e2e/upstreams/slow_server.py`), over stdio and over Streamable
//! HTTP. A real MCP client (rmcp's, speaking 2026-07-28 with the tasks
//! extension) talks to the gateway over HTTP on 127.0.0.1.
//!
//! What a user sees: the upstream's tools listed as the upstream lists
//! them; a long call answered with a task whose `statusMessage` follows the
//! upstream's progress and which ends with the upstream's result; a cancel
//! that reaches the upstream; and, after `kill -9` of the gateway mid-call,
//! the restart rule: a tool declaring `idempotentHint: true` is called
//! again and completes, any other ends `failed` saying it may or may not
//! have run upstream, and is not called again.

mod common;

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
    time::{Duration, Instant},
};

use common::{
    Client, call, http_client, poll_until,
    process::{ServerProcess, StoreArgs},
    result_text, task_id,
};
use rmcp::{
    ServiceExt,
    model::{CancelTaskParams, TaskStatus},
    transport::TokioChildProcess,
};
use serde_json::{Value, json};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The everything server's command line (node, its script, `stdio`).
fn everything() -> Vec<String> {
    static LINE: OnceLock<Vec<String>> = OnceLock::new();
    let mut line = LINE.get_or_init(|| common::upstreams("everything")).clone();
    line.push("stdio".to_owned());
    line
}

/// The Python SDK server's command line (`python slow_server.py MODE…`).
fn python(mode: &[&str]) -> Vec<String> {
    static PYTHON: OnceLock<String> = OnceLock::new();
    let python = PYTHON.get_or_init(|| common::upstreams("python").remove(0));
    let script = root().join("tests/e2e/upstreams/slow_server.py");
    let mut line = vec![python.clone(), script.display().to_string()];
    line.extend(mode.iter().map(|m| (*m).to_owned()));
    line
}

/// The gateway on the SQLite file `gateway.db` in `dir`, as instance `g`
/// (so that a restart runs its tasks at once), with `args`, in front of
/// the upstream `upstream` (`["--upstream-url", URL]` or a command line,
/// given after `--`); the Python server's effects go to `effects`.
fn gateway(dir: &Path, args: &[&str], upstream: &[String], effects: &Path) -> ServerProcess {
    let store = StoreArgs::Sqlite(dir.join("gateway.db"));
    gateway_on(&store, "g", args, upstream, effects)
}

/// The gateway on `store` as instance `instance`, otherwise as [`gateway`].
fn gateway_on(
    store: &StoreArgs,
    instance: &str,
    args: &[&str],
    upstream: &[String],
    effects: &Path,
) -> ServerProcess {
    let mut command = Command::new(common::bin("mcp-tasks-gateway"));
    command
        .args(["--addr", "127.0.0.1:0", "--instance", instance])
        .args(store.args())
        .args(args)
        .env(
            "RUST_LOG",
            std::env::var("GATEWAY_LOG").unwrap_or("error".into()),
        )
        .env("SLOW_SERVER_EFFECTS", effects)
        .env(
            "SLOW_SERVER_STATE_KEY",
            "e2e-gateway-request-state-key-0123456789abcdef",
        );
    if upstream.first().is_some_and(|a| a == "--upstream-url") {
        command.args(upstream);
    } else {
        command.arg("--").args(upstream);
    }
    ServerProcess::spawn(command, Duration::from_secs(60))
}

/// `tasks/get` of task `id` as the gateway sends it, checked against the
/// official schema of its result.
async fn wire_get(url: &str, id: &str) -> Value {
    // A client that can answer every kind of question: it is shown them all.
    let mut meta = common::request::meta(true);
    let caps = &mut meta["io.modelcontextprotocol/clientCapabilities"];
    caps["sampling"] = json!({});
    caps["roots"] = json!({});
    let params = json!({"taskId": id, "_meta": meta});
    let req = common::request::post(
        &reqwest::Client::new(),
        url,
        json!(1),
        "tasks/get",
        &params,
        Some(id),
    );
    let (status, reply) = common::request::json_reply(req).await;
    assert_eq!(status, 200, "{reply}");
    common::schemas().tasks("GetTaskResult", &reply["result"]);
    reply["result"].clone()
}

/// The lines of the Python server's effects file.
fn effects(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits (at most 30 s) until the effects file holds `line`.
async fn until_effect(path: &Path, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !effects(path).iter().any(|l| l == line) {
        assert!(
            Instant::now() < deadline,
            "the upstream never did `{line}`: {:?}",
            effects(path)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts `report r1` and `charge c1` (30 steps of 0.1 s each) and waits
/// until the upstream has begun both: two calls in flight.
async fn report_and_charge_in_flight(client: &Client, effects_file: &Path) -> (String, String) {
    let slow = |label: &str| json!({"label": label, "steps": 30, "delay": 0.1});
    let report = start_task(client, "report", slow("r1")).await;
    let charge = start_task(client, "charge", slow("c1")).await;
    until_effect(effects_file, "start report r1").await;
    until_effect(effects_file, "start charge c1").await;
    (report, charge)
}

/// After the gateway lost the two calls of [`report_and_charge_in_flight`]
/// mid-call: `charge` failed, its message holding each of `why`, and ran
/// upstream once; `report` was made again and completed (started twice,
/// finished once).
async fn made_again_only_the_report(
    client: &Client,
    (report, charge): (&str, &str),
    effects_file: &Path,
    why: &[&str],
) {
    let charged = poll_until(client, charge, common::is_terminal).await;
    assert_eq!(charged.status(), TaskStatus::Failed, "{charged:?}");
    let message = charged.task.status_message.unwrap_or_default();
    assert!(why.iter().all(|w| message.contains(w)), "{message}");
    let reported = poll_until(client, report, common::is_terminal).await;
    assert_eq!(
        result_text(&reported),
        ("report r1: 30 steps done".to_owned(), false)
    );
    let seen = effects(effects_file);
    let count = |line: &str| seen.iter().filter(|l| *l == line).count();
    assert_eq!(
        (
            count("start report r1"),
            count("end report r1"),
            count("start charge c1")
        ),
        (2, 1, 1),
        "{seen:?}"
    );
}

async fn start_task(client: &Client, tool: &'static str, arguments: Value) -> String {
    task_id(
        client
            .call_tool_once(call(tool, arguments))
            .await
            .expect("tools/call"),
    )
}

/// The status message of task `id` once it contains `part` (at most 20 s).
async fn status_with(client: &Client, id: &str, part: &str) -> String {
    let task = poll_until(client, id, |t| {
        t.task
            .status_message
            .as_deref()
            .is_some_and(|m| m.contains(part))
    })
    .await;
    task.task.status_message.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_everything_servers_long_operation_runs_as_a_task_with_its_progress() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = everything();
    let server = gateway(dir.path(), &[], &upstream, &dir.path().join("effects"));
    let client = http_client(&server.url, true).await;

    // The tools as the upstream itself lists them, to an rmcp client of the
    // test's own.
    let mut direct = tokio::process::Command::new(&upstream[0]);
    direct.args(&upstream[1..]);
    let direct = ().serve(TokioChildProcess::new(direct).unwrap()).await.unwrap();
    let theirs = direct.peer().list_all_tools().await.unwrap();
    let ours = client.peer().list_all_tools().await.unwrap();
    let named = |tools: &[rmcp::model::Tool], name: &str| {
        let tool = tools.iter().find(|t| t.name == name).cloned();
        let mut tool = serde_json::to_value(tool.unwrap_or_else(|| panic!("no {name}"))).unwrap();
        tool.as_object_mut().unwrap().remove("execution");
        tool
    };
    for name in ["trigger-long-running-operation", "get-sum", "echo"] {
        assert_eq!(named(&ours, name), named(&theirs, name), "{name} as given");
    }
    // And its instructions, as it gives them.
    let given = direct
        .peer()
        .peer_info()
        .and_then(|i| i.instructions.clone());
    assert!(given.is_some(), "the everything server gives instructions");
    let shown = client
        .peer()
        .peer_info()
        .and_then(|i| i.instructions.clone());
    assert_eq!(shown, given);
    direct.cancel().await.unwrap();

    let id = start_task(
        &client,
        "trigger-long-running-operation",
        json!({"duration": 3, "steps": 3}),
    )
    .await;
    let status = status_with(&client, &id, "/3").await;
    assert!(
        status.starts_with("1/3") || status.starts_with("2/3"),
        "{status}"
    );
    let done = poll_until(&client, &id, common::is_terminal).await;
    assert_eq!(done.status(), TaskStatus::Completed, "{done:?}");
    assert_eq!(
        result_text(&done),
        (
            "Long running operation completed. Duration: 3 seconds, Steps: 3.".to_owned(),
            false
        )
    );
    wire_get(&server.url, &id).await;

    // A tool error upstream is the task's result, `isError` and all.
    let id = start_task(&client, "get-sum", json!({"a": "one", "b": 2})).await;
    let done = poll_until(&client, &id, common::is_terminal).await;
    let (text, is_error) = result_text(&done);
    assert!(is_error, "{done:?}");
    assert!(text.contains('a') || text.contains("number"), "{text}");
}

/// The one question task `id` shows (`tasks/get` as the gateway sends it,
/// schema-checked), once it is `input_required`: its key and request.
async fn the_question(client: &Client, url: &str, id: &str) -> (String, Value) {
    poll_until(client, id, |t| t.status() == TaskStatus::InputRequired).await;
    let wire = wire_get(url, id).await;
    let requests = wire["inputRequests"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert_eq!(requests.len(), 1, "{wire}");
    let (key, request) = requests.into_iter().next().unwrap();
    (key, request)
}

/// Answers every question task `id` shows, by its method, with what
/// `answer` gives, until the task ends; the methods asked, in order.
async fn answer_until_done(
    client: &Client,
    url: &str,
    id: &str,
    answer: impl Fn(&Value) -> Value,
) -> (rmcp::model::DetailedTask, Vec<String>) {
    let mut asked = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let task = poll_until(client, id, |t| {
            t.status() == TaskStatus::InputRequired || common::is_terminal(t)
        })
        .await;
        if common::is_terminal(&task) {
            return (task, asked);
        }
        let wire = wire_get(url, id).await;
        let mut answers = serde_json::Map::new();
        for (key, request) in wire["inputRequests"]
            .as_object()
            .cloned()
            .unwrap_or_default()
        {
            asked.push(request["method"].as_str().unwrap_or("?").to_owned());
            answers.insert(key, answer(&request));
        }
        if !answers.is_empty() {
            common::update(client, id, Value::Object(answers)).await;
        }
        assert!(Instant::now() < deadline, "still asking: {wire}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The everything server asks while its call runs (a 2025-11-25 server:
/// `elicitation/create`, `sampling/createMessage`, `roots/list`): the task
/// shows each request as the upstream sent it
/// while the call stays in flight, and the answers given through
/// `tasks/update` go back upstream, which ends the call with what it was
/// told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_everything_servers_questions_are_answered_through_the_task() {
    let dir = tempfile::tempdir().unwrap();
    let server = gateway(dir.path(), &[], &everything(), &dir.path().join("effects"));
    let client = http_client(&server.url, true).await;
    let answer = |request: &Value| match request["method"].as_str() {
        Some("elicitation/create") => {
            assert_eq!(
                request["params"]["message"], "Please provide inputs for the following fields:",
                "{request}"
            );
            assert_eq!(
                request["params"]["requestedSchema"]["required"],
                json!(["name"]),
                "the upstream's form, as it sent it: {request}"
            );
            json!({"action": "accept", "content": {"name": "Ada Lovelace"}})
        }
        Some("sampling/createMessage") => json!({
            "role": "assistant",
            "content": {"type": "text", "text": "a sampled reply"},
            "model": "e2e-model",
        }),
        Some("roots/list") => json!({"roots": [{"uri": "file:///srv/e2e", "name": "e2e"}]}),
        _ => panic!("an unexpected question: {request}"),
    };

    let id = start_task(&client, "trigger-elicitation-request", json!({})).await;
    let (done, asked) = answer_until_done(&client, &server.url, &id, answer).await;
    let (text, is_error) = result_text(&done);
    assert!(!is_error, "{done:?}");
    assert!(
        text.contains("User provided the requested information"),
        "{text}"
    );
    assert!(asked.iter().any(|m| m == "elicitation/create"), "{asked:?}");

    let id = start_task(
        &client,
        "trigger-sampling-request",
        json!({"prompt": "say something", "maxTokens": 20}),
    )
    .await;
    let (done, asked) = answer_until_done(&client, &server.url, &id, answer).await;
    let (text, is_error) = result_text(&done);
    assert!(!is_error, "{done:?}");
    assert!(text.contains("a sampled reply"), "{text}");
    assert!(
        asked.iter().any(|m| m == "sampling/createMessage"),
        "{asked:?}"
    );

    // The roots the upstream asks for in the call come from the client.
    let id = start_task(&client, "get-roots-list", json!({})).await;
    let (done, asked) = answer_until_done(&client, &server.url, &id, answer).await;
    let (text, is_error) = result_text(&done);
    assert!(!is_error, "{done:?}");
    assert!(text.contains("file:///srv/e2e"), "{text}");
    assert!(asked.iter().any(|m| m == "roots/list"), "{asked:?}");
}

/// The `statusMessage`s task `id` shows, in order (each once), polled
/// every 50 ms until it ends.
async fn statuses_until_done(peer: rmcp::Peer<rmcp::RoleClient>, id: String) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let task = peer
            .get_task(rmcp::model::GetTaskParams::new(id.clone()))
            .await
            .expect("tasks/get")
            .task;
        if let Some(message) = task.task.status_message.clone()
            && seen.last() != Some(&message)
        {
            seen.push(message);
        }
        if common::is_terminal(&task) || Instant::now() > deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The everything server's `simulate-research-query` runs only as a task
/// upstream (`execution.taskSupport: "required"`, a 2025-11-25 task): the
/// client sees one task of the gateway's, whose `statusMessage` follows the
/// upstream task's stages, and which shows the clarifying question the
/// upstream task asks (an `elicitation/create` it sends while the gateway
/// waits on `tasks/result`); the answer given through `tasks/update` goes
/// back upstream, and the report is of the interpretation chosen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_everything_servers_research_runs_as_a_task_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let server = gateway(dir.path(), &[], &everything(), &dir.path().join("effects"));
    let client = http_client(&server.url, true).await;

    let id = start_task(
        &client,
        "simulate-research-query",
        json!({"topic": "python", "ambiguous": true}),
    )
    .await;
    let seen = tokio::spawn(statuses_until_done(client.peer().clone(), id.clone()));
    let answer = |request: &Value| match request["method"].as_str() {
        Some("elicitation/create") => {
            let message = request["params"]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains(r#""python" could have multiple interpretations"#),
                "{request}"
            );
            let choices =
                &request["params"]["requestedSchema"]["properties"]["interpretation"]["oneOf"];
            assert!(
                choices
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["const"] == "programming")),
                "the upstream's form, as it sent it: {request}"
            );
            assert!(
                request["params"]["_meta"]
                    .get("io.modelcontextprotocol/related-task")
                    .is_none(),
                "the upstream's task is not the client's: {request}"
            );
            json!({"action": "accept", "content": {"interpretation": "programming"}})
        }
        Some("roots/list") => json!({"roots": []}),
        _ => panic!("an unexpected question: {request}"),
    };
    let (done, asked) = answer_until_done(&client, &server.url, &id, answer).await;
    assert_eq!(done.status(), TaskStatus::Completed, "{done:?}");
    let (text, is_error) = result_text(&done);
    assert!(!is_error, "{done:?}");
    assert!(
        text.starts_with("# Research Report: python (programming)"),
        "{text}"
    );
    assert!(text.contains("**Clarification**: programming"), "{text}");
    assert!(asked.iter().any(|m| m == "elicitation/create"), "{asked:?}");

    // The upstream's stages, in their order, as the task showed them.
    let stages = [
        "Gathering sources...",
        "Analyzing content...",
        "Synthesizing findings...",
        r#"Found multiple interpretations for "python". Requesting clarification..."#,
        r#"Continuing with interpretation: "programming"..."#,
        "Generating report...",
    ];
    let seen = seen.await.unwrap();
    let shown: Vec<usize> = seen
        .iter()
        .filter_map(|m| stages.iter().position(|s| s == m))
        .collect();
    assert!(shown.is_sorted() && shown.len() >= 2, "{seen:?}");
    assert_eq!(shown.first(), Some(&0), "{seen:?}");
    assert!(
        shown.last() >= Some(&4),
        "a stage after the answer: {seen:?}"
    );
}

/// A cancel of a task that runs as a task upstream cancels the upstream
/// task (`tasks/cancel`), as the upstream's own answer shows. What the
/// gateway and its upstream say to each other is read from the stdio
/// between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_cancels_the_upstream_task() {
    let dir = tempfile::tempdir().unwrap();
    let (sent, answered) = (dir.path().join("sent"), dir.path().join("answered"));
    let mut upstream = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        r#"tee -a "$0" | "$@" | tee -a "$SAID""#.to_owned(),
        sent.display().to_string(),
    ];
    upstream.extend(everything());
    let mut upstream_with_env = vec!["env".to_owned(), format!("SAID={}", answered.display())];
    upstream_with_env.extend(upstream);
    let server = gateway(
        dir.path(),
        &[],
        &upstream_with_env,
        &dir.path().join("effects"),
    );
    let client = http_client(&server.url, true).await;

    let id = start_task(
        &client,
        "simulate-research-query",
        json!({"topic": "rust", "ambiguous": false}),
    )
    .await;
    status_with(&client, &id, "...").await;
    let lines = |path: &Path| -> Vec<Value> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    let upstream_task = lines(&answered)
        .iter()
        .find_map(|m| m["result"]["task"]["taskId"].as_str().map(str::to_owned))
        .expect("the upstream made a task");
    client
        .peer()
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .expect("tasks/cancel");
    let end = poll_until(&client, &id, common::is_terminal).await;
    assert_eq!(end.status(), TaskStatus::Cancelled, "{end:?}");

    let deadline = Instant::now() + Duration::from_secs(20);
    let cancelled = loop {
        let found = lines(&answered).into_iter().find(|m| {
            m["result"]["taskId"] == json!(upstream_task) && m["result"]["status"] == "cancelled"
        });
        if let Some(found) = found {
            break found;
        }
        assert!(
            Instant::now() < deadline,
            "the upstream task was not cancelled: sent {:?}",
            lines(&sent)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let asked = lines(&sent)
        .into_iter()
        .find(|m| m["id"] == cancelled["id"])
        .expect("the request the upstream answered");
    assert_eq!(asked["method"], "tasks/cancel", "{asked}");
    assert_eq!(asked["params"]["taskId"], json!(upstream_task), "{asked}");
}

/// The gateway is killed while its research runs as a task upstream: the
/// replay asks the upstream for the task whose id was journaled, but a
/// stdio upstream's tasks die with it, so it is gone and the restart rule
/// applies (the tool does not declare `idempotentHint: true`): the task
/// fails saying the call may or may not have run, and that the upstream no
/// longer has its task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_kill_a_research_whose_upstream_task_is_gone_fails() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = everything();
    let effects_file = dir.path().join("effects");
    let server = gateway(dir.path(), &[], &upstream, &effects_file);
    let client = http_client(&server.url, true).await;
    let id = start_task(
        &client,
        "simulate-research-query",
        json!({"topic": "rust", "ambiguous": false}),
    )
    .await;
    status_with(&client, &id, "...").await;

    server.signal("KILL");
    drop(server);
    drop(client);
    let server = gateway(dir.path(), &[], &upstream, &effects_file);
    let client = http_client(&server.url, true).await;
    let end = poll_until(&client, &id, common::is_terminal).await;
    assert_eq!(end.status(), TaskStatus::Failed, "{end:?}");
    let message = end.task.status_message.unwrap_or_default();
    assert!(
        message.contains("the call may or may not have run there")
            && message.contains("`simulate-research-query` does not declare")
            && message.contains("the upstream no longer has the task the call made there"),
        "{message}"
    );
}

/// A Python server of 2026-07-28 asks by answering the call with an
/// `InputRequiredResult`: the task parks with the same request, and the
/// question outlives a `kill -9` of the gateway and its upstream. Answered
/// through the restarted gateway, the upstream (a new process) is called
/// again with the answer and its `requestState`, and deploys once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_question_outlives_a_restart_of_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let effects_file = dir.path().join("effects");
    let upstream = python(&["stdio"]);
    let server = gateway(dir.path(), &[], &upstream, &effects_file);
    let client = http_client(&server.url, true).await;

    let id = start_task(&client, "deploy", json!({"label": "d1"})).await;
    let (key, request) = the_question(&client, &server.url, &id).await;
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert_eq!(request["params"]["message"], "Deploy d1?", "{request}");

    server.signal("KILL");
    drop(server);
    drop(client);
    let server = gateway(dir.path(), &[], &upstream, &effects_file);
    let client = http_client(&server.url, true).await;
    assert_eq!(the_question(&client, &server.url, &id).await.0, key);
    common::update(
        &client,
        &id,
        json!({ key: {"action": "accept", "content": {"approve": true, "region": "eu-west"}} }),
    )
    .await;
    let done = poll_until(&client, &id, common::is_terminal).await;
    assert_eq!(
        result_text(&done),
        ("deploy d1: deployed to eu-west".to_owned(), false)
    );
    assert_eq!(
        effects(&effects_file),
        ["deploy d1 approve=True region=eu-west"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_the_python_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let effects_file = dir.path().join("effects");
    let server = gateway(dir.path(), &[], &python(&["stdio"]), &effects_file);
    let client = http_client(&server.url, true).await;

    let id = start_task(
        &client,
        "charge",
        json!({"label": "c1", "steps": 100, "delay": 0.1}),
    )
    .await;
    assert_eq!(
        status_with(&client, &id, "step 2 of 100").await,
        "2/100: step 2 of 100"
    );
    client
        .peer()
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .expect("tasks/cancel");
    until_effect(&effects_file, "cancelled charge c1").await;
    let end = poll_until(&client, &id, common::is_terminal).await;
    assert_eq!(end.status(), TaskStatus::Cancelled, "{end:?}");
    assert_eq!(
        effects(&effects_file),
        ["start charge c1", "cancelled charge c1"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_kill_only_the_idempotent_call_is_made_again() {
    let dir = tempfile::tempdir().unwrap();
    let effects_file = dir.path().join("effects");
    let upstream = python(&["stdio"]);
    let server = gateway(dir.path(), &[], &upstream, &effects_file);
    let client = http_client(&server.url, true).await;
    let (report, charge) = report_and_charge_in_flight(&client, &effects_file).await;

    // The gateway and its upstream die mid-call, as a machine would.
    server.signal("KILL");
    drop(server);
    drop(client);
    let server = gateway(dir.path(), &[], &upstream, &effects_file);
    let client = http_client(&server.url, true).await;

    let why = [
        "the call may or may not have run there",
        "`charge` does not declare `idempotentHint: true`",
    ];
    made_again_only_the_report(&client, (&report, &charge), &effects_file, &why).await;
    let wire = wire_get(&server.url, &report).await;
    assert_eq!(
        wire["result"]
            .as_object()
            .map(|r| r.keys().cloned().collect::<Vec<_>>()),
        Some(
            ["content", "isError", "resultType", "structuredContent"]
                .map(str::to_owned)
                .to_vec()
        ),
        "the upstream's result, its `_meta` (the upstream's serverInfo) left out: {wire}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_upstream_dies_only_the_idempotent_call_is_made_again() {
    let dir = tempfile::tempdir().unwrap();
    let effects_file = dir.path().join("effects");
    let server = gateway(dir.path(), &[], &python(&["stdio"]), &effects_file);
    let client = http_client(&server.url, true).await;
    let (report, charge) = report_and_charge_in_flight(&client, &effects_file).await;

    // The upstream's processes die (one a session: the two calls' among
    // them); the gateway lives on. Found by their parent, the gateway: a
    // thread's `children` list misses a child whose spawning thread exited.
    let parent = format!("PPid:\t{}", server.pid());
    let upstream: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let status = std::fs::read_to_string(format!("/proc/{name}/status")).ok()?;
            status.lines().any(|l| l == parent).then_some(name)
        })
        .collect();
    assert!(
        upstream.len() >= 2,
        "the gateway has no upstream process for each call: {upstream:?}"
    );
    let killed = Command::new("kill")
        .arg("-KILL")
        .args(&upstream)
        .status()
        .unwrap();
    assert!(killed.success());

    let why = [
        "failed while `charge` ran",
        "the call may or may not have run there",
    ];
    made_again_only_the_report(&client, (&report, &charge), &effects_file, &why).await;
}

/// Starts `upstream` (a server of Streamable HTTP on `port`) and waits
/// until it listens.
async fn listening(mut upstream: Command, port: u16) -> KillOnDrop {
    upstream
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut upstream = KillOnDrop(upstream.spawn().expect("the upstream starts"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the upstream never listened");
        assert!(
            upstream.0.try_wait().unwrap().is_none(),
            "the upstream exited"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    upstream
}

/// A `subscriptions/listen` stream of `client`'s for its tool list changes.
async fn tool_changes(client: &Client) -> rmcp::service::Subscription {
    let filter = rmcp::model::SubscriptionFilter::builder()
        .tools_list_changed()
        .build();
    client
        .peer()
        .listen(filter)
        .await
        .expect("subscriptions/listen")
}

/// Whether `heard` tells of a tool list change within `within`.
async fn a_tool_change(heard: &mut rmcp::service::Subscription, within: Duration) -> bool {
    tokio::time::timeout(within, async {
        loop {
            match heard.next().await {
                Ok(Some(rmcp::model::ServerNotification::ToolListChangedNotification(_))) => break,
                Ok(Some(_)) => {}
                other => panic!("the listen stream ended: {other:?}"),
            }
        }
    })
    .await
    .is_ok()
}

/// A 2026-07-28 upstream over HTTP refuses a call whose tool marks an
/// argument with `x-mcp-header` unless the argument also travels in its
/// `Mcp-Param-*` header (SEP-2243): the gateway's sessions send it, on
/// every session. This upstream also ends each `subscriptions/listen`
/// stream soon after it opens: the gateway opens another and lists the
/// tools again, and its clients hear of no change, there being none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_upstream_gets_the_headers_its_tools_ask_for() {
    let dir = tempfile::tempdir().unwrap();
    let port = common::legacy::free_port();
    let line = common::upstreams("fixtures");
    let mut upstream = Command::new(&line[0]);
    upstream
        .args(&line[1..])
        .args(["--http", &port.to_string()]);
    let _upstream = listening(upstream, port).await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let server = gateway(
        dir.path(),
        &["--task-policy", "test_custom_header=optional"],
        &["--upstream-url".to_owned(), url],
        &dir.path().join("effects"),
    );
    let client = http_client(&server.url, true).await;
    // The client too sends the header, once it has read the tool's schema
    // (the gateway's front door checks it as the upstream does).
    client.list_all_tools().await.expect("tools/list");
    let mut heard = tool_changes(&client).await;
    // Two at once: the second runs on a session opened for it.
    let (a, b) = tokio::join!(
        start_task(&client, "test_custom_header", json!({"value": "alpha"})),
        start_task(&client, "test_custom_header", json!({"value": "béta"})),
    );
    for (id, value) in [(a, "alpha"), (b, "béta")] {
        let done = poll_until(&client, &id, common::is_terminal).await;
        assert_eq!(result_text(&done), (value.to_owned(), false), "{done:?}");
    }
    // A client without the tasks extension: the same tool runs inline.
    let plain = http_client(&server.url, false).await;
    plain.list_all_tools().await.expect("tools/list");
    let answer = plain
        .call_tool_once(call("test_custom_header", json!({"value": "gamma"})))
        .await
        .expect("tools/call");
    let rmcp::model::CallToolResponse::Complete(result) = answer else {
        panic!("expected a plain result, got {answer:?}");
    };
    assert_eq!(result.content[0].as_text().unwrap().text, "gamma");
    // Several of the upstream's streams end meanwhile.
    assert!(
        !a_tool_change(&mut heard, Duration::from_secs(4)).await,
        "the clients heard of a tool change while the upstream's tools stayed the same"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_upstream_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let effects_file = dir.path().join("effects");
    let port = common::legacy::free_port();
    let line = python(&["http", &port.to_string()]);
    let mut upstream = Command::new(&line[0]);
    upstream
        .args(&line[1..])
        .env("SLOW_SERVER_EFFECTS", &effects_file);
    let upstream = listening(upstream, port).await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let server = gateway(
        dir.path(),
        &[],
        &["--upstream-url".to_owned(), url],
        &effects_file,
    );
    let client = http_client(&server.url, true).await;
    let id = start_task(
        &client,
        "report",
        json!({"label": "h1", "steps": 3, "delay": 0.2}),
    )
    .await;
    let done = poll_until(&client, &id, common::is_terminal).await;
    assert_eq!(
        result_text(&done),
        ("report h1: 3 steps done".to_owned(), false)
    );
    assert_eq!(effects(&effects_file), ["start report h1", "end report h1"]);

    // The upstream adds a tool: the gateway hears of it (on the
    // `subscriptions/listen` stream it keeps open upstream), lists the
    // tools again, and its own listeners hear of it in turn.
    let mut heard = tool_changes(&client).await;
    let id = start_task(&client, "grow", json!({"name": "grown1"})).await;
    let done = poll_until(&client, &id, common::is_terminal).await;
    assert_eq!(result_text(&done), ("added grown1".to_owned(), false));
    assert!(
        a_tool_change(&mut heard, Duration::from_secs(20)).await,
        "no notifications/tools/list_changed within 20 s"
    );
    let tools = client.peer().list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "grown1"), "{tools:?}");
    let id = start_task(&client, "grown1", json!({})).await;
    let done = poll_until(&client, &id, common::is_terminal).await;
    assert_eq!(result_text(&done), ("grown1 grown".to_owned(), false));
    drop(server);
    drop(upstream);
}

/// `method` with `params` (and a 2026-07-28 `_meta` declaring the tasks
/// extension) posted to the gateway at `url` with `token`: the HTTP status
/// and the JSON body.
async fn as_holder(
    http: &reqwest::Client,
    url: &str,
    method: &str,
    mut params: Value,
    token: &str,
) -> (u16, Value) {
    params["_meta"] = common::request::meta(true);
    let name = common::request::name_of(&params).map(str::to_owned);
    let req = common::request::post(http, url, json!(1), method, &params, name.as_deref());
    common::request::json_reply(req.bearer_auth(token)).await
}

/// The runtime's features serve the gateway's tasks as they serve any
/// tool's: bearer tokens (and each principal sees only its own tasks), the
/// limit on a principal's unfinished tasks, the TTL of `--ttl`, push
/// (`subscriptions/listen` with the task's id), and the admin address's
/// metrics and page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_limits_ttl_push_and_the_admin_page_serve_the_gateways_tasks() {
    use common::jwt::{AUDIENCE, Claims, ISSUER, KEY_A_X, jwk};
    let dir = tempfile::tempdir().unwrap();
    let effects_file = dir.path().join("effects");
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, json!({"keys": [jwk("k1", KEY_A_X)]}).to_string()).unwrap();
    let server = gateway(
        dir.path(),
        &[
            "--jwt-issuer",
            ISSUER,
            "--jwt-audience",
            AUDIENCE,
            "--jwks",
            jwks.to_str().unwrap(),
            "--limit",
            "max_unfinished_per_principal=1",
            "--ttl",
            "90s",
            "--admin",
            "127.0.0.1:0",
        ],
        &python(&["stdio"]),
        &effects_file,
    );
    let url = server.url.as_str();
    let admin = server.admin().expect("the admin address");
    let http = reqwest::Client::new();

    // No token, no call.
    let params = json!({"_meta": common::request::meta(true)});
    let refused = common::request::post(&http, url, json!(1), "tools/list", &params, None)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);

    let (alice, bob) = (Claims::valid("alice").sign(), Claims::valid("bob").sign());
    let slow = json!({"name": "report", "arguments": {"label": "a1", "steps": 10, "delay": 0.1}});
    let (status, created) = as_holder(&http, url, "tools/call", slow.clone(), &alice).await;
    assert_eq!(status, 200, "{created}");
    let task = &created["result"];
    assert_eq!(task["resultType"], "task", "{created}");
    assert_eq!(task["ttlMs"], 90_000, "the TTL of --ttl: {created}");
    let id = task["taskId"].as_str().expect("a task id").to_owned();

    // One unfinished task a principal: alice's second waits; bob's does not.
    let (_, second) = as_holder(&http, url, "tools/call", slow.clone(), &alice).await;
    let message = second["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("max_unfinished_per_principal"), "{second}");
    // Bob cannot read alice's task.
    let (_, read) = as_holder(&http, url, "tasks/get", json!({"taskId": id}), &bob).await;
    assert!(read["error"].is_object(), "{read}");

    // Alice hears of her task's end on a listen stream.
    let mut listen = json!({"notifications": {"taskIds": [id]}});
    listen["_meta"] = common::request::meta(true);
    let resp = common::request::post(&http, url, json!(2), "subscriptions/listen", &listen, None)
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = common::session::Sse::new(resp);
    let ended = loop {
        let message = stream.next("listening for the task's end").await;
        if message["method"] == "notifications/tasks" && message["params"]["status"] == "completed"
        {
            break message;
        }
    };
    assert_eq!(ended["params"]["taskId"], json!(id), "{ended}");
    let (_, done) = as_holder(&http, url, "tasks/get", json!({"taskId": id}), &alice).await;
    assert_eq!(
        done["result"]["result"]["content"][0]["text"], "report a1: 10 steps done",
        "{done}"
    );

    // The admin address counts it and shows it.
    let text = |url: String| async move { reqwest::get(url).await.unwrap().text().await.unwrap() };
    let metrics = text(format!("{admin}metrics")).await;
    assert!(
        metrics.contains(r#"mcp_tasks_created_total{tool="report"} 1"#),
        "{metrics}"
    );
    let page = text(format!("{admin}?all=1")).await;
    assert!(page.contains("report"), "{page}");
}

/// `charge` called with one idempotency key through the gateway at
/// `first`, then at `second` (the same gateway, or another instance on the
/// same store): one task, one upstream call; the key with other arguments
/// is refused with `-32602`.
async fn the_same_key_twice(first: &str, second: &str, effects_file: &Path) {
    let http = reqwest::Client::new();
    let send = |url: &str, arguments: Value| {
        let mut meta = common::request::meta(true);
        meta["mcp-tasks/idempotencyKey"] = json!("order-0042-charge-once");
        let params = json!({"name": "charge", "arguments": arguments, "_meta": meta});
        common::request::json_reply(common::request::post(
            &http,
            url,
            json!(1),
            "tools/call",
            &params,
            Some("charge"),
        ))
    };
    let arguments = json!({"label": "k1", "steps": 3, "delay": 0.1});
    let (_, first_reply) = send(first, arguments.clone()).await;
    let (_, again) = send(second, arguments).await;
    common::schemas().tasks("CreateTaskResult", &first_reply["result"]);
    let id = first_reply["result"]["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    assert_eq!(again["result"]["taskId"], json!(id), "{again}");
    let (_, other) = send(second, json!({"label": "k2", "steps": 3, "delay": 0.1})).await;
    common::schemas().core("JSONRPCErrorResponse", &other);
    assert_eq!(other["error"]["code"], json!(-32602), "{other}");

    let client = http_client(second, true).await;
    let done = poll_until(&client, &id, common::is_terminal).await;
    assert_eq!(
        result_text(&done),
        ("charge k1: 3 steps done".to_owned(), false)
    );
    assert_eq!(effects(effects_file), ["start charge k1", "end charge k1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_twice_is_one_task_and_one_upstream_call() {
    let dir = tempfile::tempdir().unwrap();
    let effects_file = dir.path().join("effects");
    let server = gateway(dir.path(), &[], &python(&["stdio"]), &effects_file);
    the_same_key_twice(&server.url, &server.url, &effects_file).await;
}

/// Two gateway instances (`g1`, `g2`) with `args` on one Postgres schema
/// named after `schema`, in front of the Python server over stdio, its
/// effects in `effects`; `None` (with a note) when no Postgres answers.
struct TwoGateways {
    first: ServerProcess,
    second: ServerProcess,
    effects: PathBuf,
    _dir: tempfile::TempDir,
    _schema: mcp_tasks_runtime::store::testing::PostgresSchema,
}

async fn two_gateways_on_postgres(test: &str, schema: &str, args: &[&str]) -> Option<TwoGateways> {
    let url = common::postgres_or_skip(test).await?;
    let schema = mcp_tasks_runtime::store::testing::PostgresSchema::new(&url, schema);
    let store = StoreArgs::Postgres {
        url: schema.url(),
        schema: schema.name().to_owned(),
    };
    let dir = tempfile::tempdir().unwrap();
    let effects = dir.path().join("effects");
    let upstream = python(&["stdio"]);
    Some(TwoGateways {
        first: gateway_on(&store, "g1", args, &upstream, &effects),
        second: gateway_on(&store, "g2", args, &upstream, &effects),
        effects,
        _dir: dir,
        _schema: schema,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_through_two_gateways_on_postgres_is_one_task_and_one_upstream_call() {
    let Some(fleet) =
        two_gateways_on_postgres("gateway idempotency", "mcp_tasks_gateway_keys", &[]).await
    else {
        return;
    };
    the_same_key_twice(&fleet.first.url, &fleet.second.url, &fleet.effects).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_gateway_on_postgres_takes_over_a_call_in_flight() {
    let args = ["--lease", "1s", "--scan-interval", "100ms"];
    let Some(fleet) =
        two_gateways_on_postgres("gateway takeover", "mcp_tasks_gateway", &args).await
    else {
        return;
    };
    let TwoGateways {
        first,
        second,
        effects: effects_file,
        _dir: _kept_dir,
        _schema: _kept_schema,
    } = fleet;
    let client = http_client(&first.url, true).await;
    let (report, charge) = report_and_charge_in_flight(&client, &effects_file).await;

    // The first instance and its upstream die; the second takes over once
    // the first's lease has run out.
    first.signal("KILL");
    drop(first);
    let client = http_client(&second.url, true).await;
    let why = ["the call may or may not have run there"];
    made_again_only_the_report(&client, (&report, &charge), &effects_file, &why).await;
}

#[test]
fn a_2025_client_calls_through_the_gateway_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let effects_file = dir.path().join("effects");
    // The gateway serves over stdio to the MCP Inspector's CLI (a
    // 2025-11-25 client), and reaches its Python upstream over stdio.
    let mut gateway = vec![
        common::bin("mcp-tasks-gateway").to_owned(),
        "--stdio".to_owned(),
        "--store".to_owned(),
        dir.path().join("gateway.db").display().to_string(),
        "--".to_owned(),
        "env".to_owned(),
        format!("SLOW_SERVER_EFFECTS={}", effects_file.display()),
    ];
    gateway.extend(python(&["stdio"]));
    let target = common::legacy::Target::Stdio(gateway);
    let list = common::legacy::inspector(&target, &["--method", "tools/list"]).ok();
    let tools = &list.json_lines()[0]["result"]["tools"];
    let report = tools
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "report"))
        .unwrap_or_else(|| panic!("no report in:\n{list}"));
    assert_eq!(report["execution"]["taskSupport"], "optional", "{list}");
    assert_eq!(report["annotations"]["idempotentHint"], true, "{list}");
    let call = common::legacy::inspector(
        &target,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "report",
            "--tool-args-json",
            r#"{"label": "i1", "steps": 2, "delay": 0.1}"#,
        ],
    )
    .ok();
    let result = &call.json_lines()[0]["result"];
    assert_eq!(
        (result["content"][0]["text"].as_str(), &result["isError"]),
        (Some("report i1: 2 steps done"), &json!(false)),
        "{call}"
    );
    assert_eq!(effects(&effects_file), ["start report i1", "end report i1"]);
}

/// A child process killed when the test ends, however it ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An upstream of 2026-07-28 that runs a tool as a task of its own (the
/// project's conformance example, over stdio, its tasks in a SQLite file):
/// the gateway follows that task, shows its two questions as its own task's,
/// and answers them upstream with `tasks/update`; `kill -9` of the gateway
/// and its upstream while the questions wait changes nothing the client
/// sees, and the same upstream task ends with both answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_upstreams_own_task_is_followed_through_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let effects_file = dir.path().join("effects");
    let upstream: Vec<String> = [
        common::bin("conformance"),
        "--stdio",
        "--store",
        &dir.path().join("upstream.db").display().to_string(),
        "--request-state-key",
        "5f0e4c1d2b3a4f5e6d7c8b9a0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c",
    ]
    .map(str::to_owned)
    .to_vec();
    let args = ["--task-policy", "multi_input=required"];
    let server = gateway(dir.path(), &args, &upstream, &effects_file);
    let client = http_client(&server.url, true).await;

    let id = start_task(&client, "multi_input", json!({})).await;
    let keys = |wire: &Value| -> Vec<String> {
        let requests = wire["inputRequests"].as_object().cloned();
        requests.unwrap_or_default().keys().cloned().collect()
    };
    poll_until(&client, &id, |t| t.status() == TaskStatus::InputRequired).await;
    let asked = wire_get(&server.url, &id).await;
    assert_eq!(keys(&asked), ["input-a", "input-b"], "{asked}");
    assert_eq!(
        asked["inputRequests"]["input-a"]["params"]["message"], "Provide value A",
        "{asked}"
    );

    server.signal("KILL");
    drop(server);
    drop(client);
    let server = gateway(dir.path(), &args, &upstream, &effects_file);
    let client = http_client(&server.url, true).await;
    poll_until(&client, &id, |t| t.status() == TaskStatus::InputRequired).await;
    assert_eq!(
        keys(&wire_get(&server.url, &id).await),
        ["input-a", "input-b"]
    );
    let answer = |value: &str| json!({"action": "accept", "content": {"value": value}});
    common::update(
        &client,
        &id,
        json!({"input-a": answer("left"), "input-b": answer("right")}),
    )
    .await;
    let done = poll_until(&client, &id, common::is_terminal).await;
    assert_eq!(
        result_text(&done),
        ("multi_input: a = left, b = right".to_owned(), false),
        "{done:?}"
    );
}
