//! The demo with the clients people use today, which speak MCP 2025-11-25
//! (`initialize` and sessions), run as real processes: the MCP Inspector's
//! CLI, and a script on the official TypeScript SDK client
//! (`tests/e2e/js/legacy_deploy.mjs`) that approves `deploy`'s question.
//! Each test asserts what the client's user sees.
//!
//! The clients and Node 22 are installed from the npm registry into
//! `.ci/.tools/legacy/` on first use (`.ci/legacy-clients.sh --install`).

mod common;

use std::path::PathBuf;

use common::legacy::{self, Demo, FAST, Run, Target};
use serde_json::{Value, json};
use tempfile::TempDir;

fn store() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = dir.path().join("demo.db");
    (dir, store)
}

const DEPLOY_ARGS: &str = r#"{"service":"billing","git_ref":"v2.3.0"}"#;

// --- The Inspector's CLI -------------------------------------------------

/// `tools/list` shows `deploy` as a task tool; `tools/call deploy` reaches the
/// approval question, which a client that declared no elicitation (the
/// Inspector's CLI declares none) cannot be asked: the call ends with a tool
/// error naming the missing capability, which the Inspector reports with its
/// TOOL_ERROR exit code (5).
fn inspector_lists_and_calls_deploy(target: &Target) {
    let list = legacy::inspector(target, &["--method", "tools/list"]).ok();
    let tools = &list.json_lines()[0]["result"]["tools"];
    let names: Vec<&str> = tools
        .as_array()
        .unwrap_or_else(|| panic!("no tools in:\n{list}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["deploy"], "{list}");
    let deploy = &tools[0];
    assert_eq!(deploy["execution"]["taskSupport"], "optional", "{list}");
    assert_eq!(
        deploy["inputSchema"]["required"],
        json!(["service", "git_ref"]),
        "{list}"
    );

    let call = legacy::inspector(
        target,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "deploy",
            "--tool-args-json",
            DEPLOY_ARGS,
        ],
    );
    assert_eq!(call.status.code(), Some(5), "{call}");
    assert_eq!(
        call.json_lines()[0]["result"],
        json!({
            "content": [{"type": "text", "text": "the client does not support elicitation"}],
            "isError": true,
        }),
        "{call}"
    );
    assert!(call.stderr.contains("tool_is_error"), "{call}");
}

#[test]
fn inspector_lists_and_calls_deploy_over_http() {
    let (_dir, store) = store();
    let demo = Demo::http(&store, 0, FAST);
    inspector_lists_and_calls_deploy(&Target::Http(demo.url.clone()));
}

#[test]
fn inspector_lists_and_calls_deploy_over_stdio() {
    let (_dir, store) = store();
    inspector_lists_and_calls_deploy(&Target::Stdio(legacy::demo_stdio(&store)));
}

// --- The TypeScript SDK client -------------------------------------------

/// What every run of the script shows up to the tool call: a 2025-11-25
/// session with a server that declares task-augmented `tools/call`, and
/// `deploy` listed with `taskSupport: "optional"`.
fn assert_connected(run: &Run, http: bool) {
    let connected = run.event("connected");
    assert_eq!(connected["protocolVersion"], "2025-11-25", "{run}");
    assert_eq!(connected["server"]["name"], "mcp-tasks-demo", "{run}");
    assert!(
        connected["tasks"]["requests"]["tools"]["call"].is_object(),
        "capabilities.tasks.requests.tools.call missing:\n{run}"
    );
    assert_eq!(connected["sessionId"].is_string(), http, "{run}");
    assert_eq!(
        run.event("tool"),
        json!({"event": "tool", "name": "deploy", "taskSupport": "optional"}),
        "{run}"
    );
}

/// The end of a `deploy` the script approved: one question, tagged with
/// `task` (the SEP-1686 task's id) or untagged (a plain call), naming the
/// build that the structured report then names. Returns the build id.
fn assert_deployed(run: &Run, task: Option<&str>) -> String {
    let result = run.event("result");
    assert_eq!(result["isError"], false, "{run}");
    let report = &result["structuredContent"];
    let build = report["build"]
        .as_str()
        .unwrap_or_else(|| panic!("no build in the report:\n{run}"))
        .to_owned();
    assert!(build.starts_with("billing-v2.3.0-"), "{run}");
    assert_eq!(
        *report,
        json!({"service": "billing", "build": build, "instances": 12}),
        "{run}"
    );
    let question = run.event("elicitation");
    assert_eq!(
        question["message"],
        format!("Roll billing@v2.3.0 (build {build}) out to production?"),
        "{run}"
    );
    assert_eq!(question["relatedTask"], json!(task), "{run}");
    build
}

/// A plain `tools/call`: the question comes as `elicitation/create` inside
/// the call, and the task's status as `notifications/progress`.
fn plain_call(target: &Target) {
    let run = legacy::deploy("plain", target, &[]).ok();
    assert_connected(&run, matches!(target, Target::Http(_)));
    let build = assert_deployed(&run, None);
    let progress = run.events("progress");
    assert!(!progress.is_empty(), "no progress:\n{run}");
    let counts: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().expect("a number"))
        .collect();
    assert!(counts.windows(2).all(|w| w[0] < w[1]), "{run}");
    let messages: Vec<&str> = progress
        .iter()
        .filter_map(|p| p["message"].as_str())
        .collect();
    assert!(
        messages.iter().any(|m| m.contains(&build)),
        "no progress names the build:\n{run}"
    );
}

/// A SEP-1686 task-augmented `tools/call`: a `CreateTaskResult`, then
/// `tasks/get` reads `input_required`, the question arrives during
/// `tasks/result` tagged with the task, and `tasks/result` gives the report.
fn task_call(target: &Target) {
    let run = legacy::deploy("task", target, &[]).ok();
    assert_connected(&run, matches!(target, Target::Http(_)));
    let created = run.event("task_created");
    let id = created["taskId"].as_str().expect("a task id").to_owned();
    assert_eq!(created["status"], "working", "{run}");
    assert!(created["ttl"].is_number(), "{run}");
    let build = assert_deployed(&run, Some(&id));
    let statuses: Vec<(String, String)> = run
        .events("task")
        .iter()
        .map(|t| {
            assert_eq!(t["taskId"], id.as_str(), "{run}");
            (
                t["status"].as_str().unwrap_or_default().to_owned(),
                t["statusMessage"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert!(
        statuses
            .iter()
            .any(|(s, m)| s == "input_required" && m.contains(&build)),
        "tasks/get never read input_required naming the build:\n{run}"
    );
    assert_eq!(
        statuses.last().map(|(s, _)| s.as_str()),
        Some("completed"),
        "{run}"
    );
}

#[test]
fn ts_client_deploys_with_a_plain_call_over_http() {
    let (_dir, store) = store();
    let demo = Demo::http(&store, 0, FAST);
    plain_call(&Target::Http(demo.url.clone()));
}

#[test]
fn ts_client_deploys_as_a_sep1686_task_over_http() {
    let (_dir, store) = store();
    let demo = Demo::http(&store, 0, FAST);
    task_call(&Target::Http(demo.url.clone()));
}

#[test]
fn ts_client_deploys_with_a_plain_call_over_stdio() {
    let (_dir, store) = store();
    plain_call(&Target::Stdio(legacy::demo_stdio(&store)));
}

#[test]
fn ts_client_deploys_as_a_sep1686_task_over_stdio() {
    let (_dir, store) = store();
    task_call(&Target::Stdio(legacy::demo_stdio(&store)));
}

// --- kill -9 during a SEP-1686 task ---------------------------------------

/// Creates a `deploy` task over HTTP and leaves (session open, nothing
/// answered) once it reads `stop_after`; SIGKILLs the server; restarts it on
/// the same port and store; then a client resuming the same session
/// (no new `initialize`) follows the task to its result. Returns the
/// `stopped` event and the resumed run.
fn kill_and_resume(pace_before: &str, stop_after: &str) -> (Value, Run) {
    let (_dir, store) = store();
    let port = legacy::free_port();
    let demo = Demo::http(&store, port, pace_before);
    let target = Target::Http(demo.url.clone());
    let first = legacy::deploy("task", &target, &["--stop-after", stop_after]).ok();
    let stopped = first.event("stopped");
    let url = demo.url.clone();
    demo.kill();

    let demo = Demo::http(&store, port, FAST);
    assert_eq!(demo.url, url);
    let session = stopped["sessionId"].as_str().expect("a session id");
    let task = stopped["taskId"].as_str().expect("a task id");
    let resumed = legacy::deploy("resume", &target, &["--session", session, "--task", task]);
    drop(demo);
    let resumed = resumed.ok();
    assert_eq!(
        resumed.event("connected")["sessionId"],
        session,
        "{resumed}"
    );
    let tasks = resumed.events("task");
    assert!(
        tasks.iter().all(|t| t["taskId"] == task),
        "tasks/get answered for another task:\n{resumed}"
    );
    assert_eq!(
        tasks.last().map(|t| &t["status"]),
        Some(&json!("completed")),
        "{resumed}"
    );
    (stopped, resumed)
}

/// Killed while parked on the approval question: after the restart the
/// resumed client's first `tasks/get` finds the task still waiting on the
/// same build, the question comes (tagged with the task) during
/// `tasks/result`, and the report names the build made before the kill.
#[test]
fn ts_client_task_survives_sigkill_while_waiting_for_approval() {
    let (stopped, resumed) = kill_and_resume(FAST, "input_required");
    let before = stopped["statusMessage"].as_str().expect("a status message");
    let build = before
        .strip_prefix("built ")
        .and_then(|m| m.split_whitespace().next())
        .unwrap_or_else(|| panic!("no build in {before:?}"));
    let first = &resumed.events("task")[0];
    assert_eq!(first["status"], "input_required", "{resumed}");
    assert_eq!(first["statusMessage"], before, "{resumed}");
    let task = stopped["taskId"].as_str().expect("a task id");
    assert_eq!(assert_deployed(&resumed, Some(task)), build, "{resumed}");
}

/// Killed during the build (the demo at 1/5 of real time builds for 2 s):
/// after the restart the task carries on from its journal, the resumed
/// client's `tasks/get` finds it, and it completes with the approval.
#[test]
fn ts_client_task_survives_sigkill_during_the_build() {
    let (stopped, resumed) = kill_and_resume("0.2", "created");
    assert_eq!(stopped["status"], "working", "{resumed}");
    let first = &resumed.events("task")[0];
    assert!(
        first["status"] == "working" || first["status"] == "input_required",
        "{resumed}"
    );
    let task = stopped["taskId"].as_str().expect("a task id");
    assert_deployed(&resumed, Some(task));
}
