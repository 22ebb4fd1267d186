//! The operator's CLI (`tasks`) against text a client chose: run as a real
//! process on the SQLite file of a running conformance server, whose client
//! named a job with terminal escape sequences. The tables show them as
//! visible escapes; none reaches the operator's terminal.

mod common;

use std::{path::Path, process::Command};

use common::*;
use rmcp::model::TaskStatus;
use serde_json::{Value, json};

/// A job name that, printed raw, retitles the terminal's window (OSC 0,
/// ended by BEL), clears the screen (CSI 2J), sends a C1 CSI (U+009B) and
/// reverses what follows (U+202E, a bidi override).
const HOSTILE: &str = "\u{1b}]0;pwned\u{7}\u{1b}[2Jjob\u{9b}31m\u{202e}gnp.exe";

/// How the tables write it.
const SHOWN: &str = "\\x1b]0;pwned\\x07\\x1b[2Jjob\\u{9b}31m\\u{202e}gnp.exe";

/// Runs `tasks --store STORE ARGS…`; returns its stdout, as bytes.
fn tasks(store: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new(common::bin("tasks"))
        .arg("--store")
        .arg(store)
        .args(args)
        .output()
        .expect("the CLI runs");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// What a terminal would act on, if any is in `out`: a C0 control other
/// than the line feed, DEL, a C1 control, or a bidi override or isolate.
fn controls(out: &[u8]) -> Vec<char> {
    String::from_utf8(out.to_vec())
        .expect("UTF-8")
        .chars()
        .filter(|&c| {
            (c.is_control() && c != '\n')
                || ('\u{202a}'..='\u{202e}').contains(&c)
                || ('\u{2066}'..='\u{2069}').contains(&c)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_show_write_a_clients_escape_sequences_as_visible_text() {
    let (dir, server) = Server::fresh();
    let store = dir.path().join("tasks.db");
    let client = http_client(&server.url, true).await;
    // `run_job` says `preparing NAME` in its status message, then asks
    // `How should NAME run?`.
    let id = task_id(
        client
            .call_tool_once(call("run_job", json!({"name": HOSTILE, "seconds": 0})))
            .await
            .unwrap(),
    );
    poll_until(&client, &id, |t| t.status() == TaskStatus::InputRequired).await;

    let list = tasks(&store, &["list"]);
    assert_eq!(
        controls(&list),
        Vec::<char>::new(),
        "{}",
        String::from_utf8_lossy(&list)
    );
    let list = String::from_utf8(list).unwrap();
    assert!(list.contains(&format!("preparing {SHOWN}")), "{list}");

    let show = tasks(&store, &["show", &id]);
    assert_eq!(
        controls(&show),
        Vec::<char>::new(),
        "{}",
        String::from_utf8_lossy(&show)
    );
    let show = String::from_utf8(show).unwrap();
    assert!(
        show.contains(&format!("message   preparing {SHOWN}")),
        "{show}"
    );
    assert!(show.contains(&format!("How should {SHOWN} run?")), "{show}");
    // The arguments, as JSON: its own escapes for C0, ours for the rest.
    assert!(
        show.contains("\\u001b]0;pwned\\u0007\\u001b[2Jjob\\u{9b}31m\\u{202e}gnp.exe"),
        "{show}"
    );

    // `--json` is as it was: the text as the client sent it, in JSON.
    let json: Value = serde_json::from_slice(&tasks(&store, &["list", "--json"])).unwrap();
    assert_eq!(json[0]["statusMessage"], format!("preparing {HOSTILE}"));
    let json: Value = serde_json::from_slice(&tasks(&store, &["show", &id, "--json"])).unwrap();
    assert_eq!(json["arguments"]["name"], HOSTILE);
    drop(server);
}

/// `tasks journal ID` prints the export with everything in clear;
/// `--redact` leaves out the arguments, the answers and the id, and keeps
/// the path: the positions, kinds and names, and an answer's action.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_redact_leaves_out_arguments_answers_and_the_id() {
    let (dir, server) = Server::fresh();
    let store = dir.path().join("tasks.db");
    let client = http_client(&server.url, true).await;
    let id = task_id(
        client
            .call_tool_once(call(
                "run_job",
                json!({"name": "sk-live-0123456789", "seconds": 0}),
            ))
            .await
            .unwrap(),
    );
    poll_until(&client, &id, |t| t.status() == TaskStatus::InputRequired).await;
    update(
        &client,
        &id,
        json!({"settings": {"action": "accept",
                            "content": {"start": true, "region": "ap-south", "workers": 7}}}),
    )
    .await;
    poll_until(&client, &id, is_terminal).await;

    let clear = String::from_utf8(tasks(&store, &["journal", &id])).unwrap();
    for secret in [id.as_str(), "sk-live-0123456789", "ap-south"] {
        assert!(clear.contains(secret), "{secret}: {clear}");
    }
    let redacted = String::from_utf8(tasks(&store, &["journal", &id, "--redact"])).unwrap();
    for secret in [id.as_str(), "sk-live-0123456789", "ap-south"] {
        assert!(!redacted.contains(secret), "{secret}: {redacted}");
    }
    let clear: Value = serde_json::from_str(&clear).unwrap();
    let redacted: Value = serde_json::from_str(&redacted).unwrap();
    assert_eq!(
        redacted["arguments"],
        json!({"name": "<redacted>", "seconds": 0})
    );
    assert_eq!(
        redacted["entries"][0]["value"],
        json!({"action": "accept",
               "content": {"start": true, "region": "<redacted>", "workers": 0}})
    );
    let path = |export: &Value| -> Vec<(Value, Value, Value)> {
        export["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["position"].clone(), e["kind"].clone(), e["name"].clone()))
            .collect()
    };
    assert_eq!(path(&redacted), path(&clear));
    assert_eq!(redacted["tool"], "run_job");
    drop(server);
}
