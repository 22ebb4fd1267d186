//! The terminal client, as a person uses it: a real process answering the
//! server's questions from its stdin, against the conformance server.

mod common;

use std::{
    io::Write,
    process::{Command, Output, Stdio},
};

use common::Server;

fn client(url: &str, tool: &str, args: &str, stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_client"))
        .args(["--url", url, tool, args])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the client starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn answers_a_task_question_from_stdin() {
    let (_dir, server) = Server::fresh();
    let out = client(
        &server.url,
        "confirm_delete",
        r#"{"filename":"a.txt"}"#,
        "y\n",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "confirm_delete(a.txt): confirmed = true"
    );
    assert!(
        text(&out.stderr).contains("? Delete a.txt?"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn an_unanswered_required_field_declines() {
    let (_dir, server) = Server::fresh();
    let out = client(
        &server.url,
        "confirm_delete",
        r#"{"filename":"a.txt"}"#,
        "\n",
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stdout).contains("declined"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn answers_an_inline_question_and_reports_bad_arguments() {
    let (_dir, server) = Server::fresh();
    let out = client(
        &server.url,
        "test_input_required_result_elicitation",
        "{}",
        "Ada\n",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "Hello, Ada!");

    let out = client(&server.url, "greet", r#"{"name": 5}"#, "");
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("name"), "{}", text(&out.stderr));
}
