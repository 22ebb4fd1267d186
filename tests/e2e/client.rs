//! The terminal client, as a person uses it: a real process answering the
//! server's questions from its stdin, against the conformance server.

mod common;

use std::{
    io::Write,
    process::{Command, Output, Stdio},
};

use common::Server;

fn client(url: &str, tool: &str, args: &str, stdin: &str) -> Output {
    let mut child = Command::new(common::bin("client"))
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

    // Bad arguments: the tool error (C-TOOLS), its text naming the field.
    let out = client(&server.url, "greet", r#"{"name": 5}"#, "");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("name"), "{}", text(&out.stdout));
}

/// Runs the client; returns its exit code, stdout and stderr.
fn run(url: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(common::bin("client"))
        .args(["--url", url])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the client runs");
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

#[test]
fn exit_codes_and_json_say_how_it_ended() {
    let (_dir, server) = Server::fresh();
    let (code, out, err) = run(
        &server.url,
        &["--json", "slow_compute", r#"{"seconds":0.1,"label":"j"}"#],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), r#""slow_compute(j) done after 0.1s""#);
    assert!(err.contains("completed"), "the progress line: {err}");

    let (code, out, _) = run(&server.url, &["--json", "failing_job"]);
    assert_eq!(code, 1);
    let out: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(out["error"], "tool");

    let (code, out, _) = run(&server.url, &["--json", "protocol_error_job"]);
    assert_eq!(code, 2);
    let out: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (out["error"].as_str(), out["code"].as_i64()),
        (Some("failed"), Some(-32603))
    );

    let (code, _, err) = run(
        &server.url,
        &["--resume", "0123456789abcdef0123456789abcdef"],
    );
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("expired"), "{err}");

    let (code, _, _) = run(&server.url, &["greet", r#"{"name": 5}"#]);
    assert_eq!(code, 1, "bad arguments are a tool error");
    let (code, _, err) = run(&server.url, &["no_such_tool", "{}"]);
    assert_eq!(code, 5, "{err}");
}

/// Reads `child`'s stderr until the line that names the task; its id.
fn task_id_of(child: &mut std::process::Child) -> (String, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead as _;
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    loop {
        let line = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the client names its task");
        if let Some(id) = line.strip_prefix("task ") {
            return (id.trim().to_owned(), rx);
        }
    }
}

fn wait(child: &mut std::process::Child) -> i32 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the client ended in time"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn ctrl_c_cancels_and_resume_follows_a_task_again() {
    let (_dir, server) = Server::fresh();
    let spawn = |args: &[&str]| {
        Command::new(common::bin("client"))
            .args(["--url", &server.url])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };

    // Ctrl-C: the task is cancelled, the client says so and exits 3.
    let mut child = spawn(&["slow_compute", r#"{"seconds":30,"label":"c"}"#]);
    let (_id, rx) = task_id_of(&mut child);
    std::thread::sleep(std::time::Duration::from_millis(300));
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert_eq!(wait(&mut child), 3);
    let said: Vec<String> = rx.try_iter().collect();
    assert!(said.iter().any(|l| l.contains("cancelling")), "{said:?}");

    // A client that stops following (killed) leaves the task running;
    // `--resume ID` follows it to its end.
    let mut child = spawn(&["slow_compute", r#"{"seconds":1.5,"label":"r"}"#]);
    let (id, _rx) = task_id_of(&mut child);
    child.kill().unwrap();
    child.wait().unwrap();
    let (code, out, err) = run(&server.url, &["--resume", &id]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "slow_compute(r) done after 1.5s");
}

#[test]
fn prompts_each_field_by_its_type() {
    let (_dir, server) = Server::fresh();
    // Fields in schema order: age, name, score, status, verified. A bad
    // answer is asked again; an enum takes a name or its number.
    let out = client(
        &server.url,
        "test_elicitation_sep1034_defaults",
        "{}",
        "x\n41\nAda\n9.5\n2\nmaybe\nn\n",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    for part in [
        r#""age":41"#,
        r#""name":"Ada""#,
        r#""score":9.5"#,
        r#""status":"inactive""#,
        r#""verified":false"#,
    ] {
        assert!(said.contains(part), "{part} in {said}");
    }
    let asked = text(&out.stderr);
    assert!(
        asked.contains("not a valid answer: a whole number"),
        "{asked}"
    );
    assert!(asked.contains("not a valid answer: y or n"), "{asked}");
    assert!(asked.contains("[active/inactive/pending]"), "{asked}");
}

/// After `--`, the client starts the server itself and speaks to it over
/// stdio: a task's question answered from the client's stdin, and the
/// server's exit when the client is done.
#[test]
fn speaks_to_a_server_it_starts_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tasks.db");
    let mut child = Command::new(common::bin("client"))
        .args(["confirm_delete", r#"{"filename":"s.txt"}"#, "--"])
        .arg(common::bin("conformance"))
        .arg("--stdio")
        .arg("--store")
        .arg(&store)
        .env("RUST_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the client starts");
    child.stdin.take().unwrap().write_all(b"y\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "confirm_delete(s.txt): confirmed = true"
    );
    assert!(
        store.exists(),
        "the server it started kept the task in its store"
    );
}

/// Without a terminal, a number out of its bounds is refused and asked
/// again; a titled choice is taken by its number in the list.
#[test]
fn a_number_out_of_its_bounds_is_asked_again() {
    let (_dir, server) = Server::fresh();
    // Fields in name order: region, start, workers.
    let out = client(
        &server.url,
        "run_job",
        r#"{"name":"p","seconds":0}"#,
        "2\ny\n12\n0\n3\n",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "run_job(p): 3 workers in us-east, done"
    );
    let asked = text(&out.stderr);
    assert!(asked.contains("(integer, 1 to 8)"), "{asked}");
    assert!(
        asked.contains("not a valid answer: must be at most 8"),
        "{asked}"
    );
    assert!(
        asked.contains("not a valid answer: must be at least 1"),
        "{asked}"
    );
}

/// A task started by one client process is followed to its end by another,
/// `--resume ID`, after the server was killed with SIGKILL and started again
/// on the same store: the reference is the endpoint and the id, nothing the
/// first process kept.
#[test]
fn a_new_process_resumes_a_task_across_a_server_kill() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tasks.db");
    let server = Server::start(&store);
    let mut child = Command::new(common::bin("client"))
        .args(["--url", &server.url])
        .args(["slow_compute", r#"{"seconds":2,"label":"k"}"#])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (id, _rx) = task_id_of(&mut child);
    child.kill().unwrap();
    child.wait().unwrap();
    server.kill();

    let server = Server::start(&store);
    let (code, out, err) = run(&server.url, &["--resume", &id]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "slow_compute(k) done after 2s");
    assert!(err.contains(&id), "it names the task it follows: {err}");
}
