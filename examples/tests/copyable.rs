//! The copyable examples of the runtime (`mcp-tasks-runtime/examples`), each
//! started as its own process on 127.0.0.1 and called over Streamable HTTP
//! by an MCP client that declares the tasks extension, as a user would run
//! them.
//!
//! The fleet example needs PostgreSQL: `MCP_TASKS_POSTGRES_URL`, or
//! `postgres://postgres@127.0.0.1:5432/postgres`, in a schema of its own
//! dropped at the end. When the server cannot be reached, that test fails
//! if `CI` is set, and otherwise prints `SKIPPED: …` and passes.

mod common;

use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::process::CommandExt as _,
    path::Path,
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use common::{call, http_client, is_terminal, poll_until, task_id, update};
use rmcp::model::{DetailedTask, TaskPayload, TaskStatus};
use serde_json::{Value, json};

/// An example running in `dir`, in a process group of its own, killed when
/// this drops.
struct Example {
    child: Child,
    url: String,
}

impl Example {
    /// Starts `bin` on a free port of 127.0.0.1 with `args` after the address,
    /// in `dir` (where its SQLite file goes), and waits for the line that
    /// says where it serves.
    fn start(bin: &str, dir: &Path, args: &[&str], env: &[(&str, String)]) -> Self {
        let mut child = Command::new(bin)
            .arg("127.0.0.1:0")
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .expect("the example starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            for _ in lines {}
        });
        let mut example = Self {
            child,
            url: String::new(),
        };
        let line = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Some(Ok(line))) => line,
            other => panic!("{bin} did not say where it serves: {other:?}"),
        };
        example.url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_owned();
        example
    }

    /// Sends SIGINT (Ctrl-C) and waits at most `within` for the exit.
    fn interrupt(mut self, within: Duration) -> ExitStatus {
        let sent = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "no exit within {within:?}");
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Example {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.child.id())])
                .stderr(Stdio::null())
                .status();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The `structuredContent` of a completed task's result.
fn structured(t: &DetailedTask) -> Value {
    match &t.payload {
        TaskPayload::Completed { result } => {
            assert_ne!(result.get("isError"), Some(&json!(true)), "{result:?}");
            result["structuredContent"].clone()
        }
        other => panic!("expected a completed task, got {other:?}"),
    }
}

#[tokio::test]
async fn first_tool_counts_words_in_a_task() {
    let dir = tempfile::tempdir().unwrap();
    let example = Example::start(env!("CARGO_BIN_EXE_first_tool"), dir.path(), &[], &[]);
    let client = http_client(&example.url, true).await;
    let created = client
        .call_tool_once(call("count_words", json!({"text": "one two\nthree"})))
        .await
        .expect("tools/call");
    let id = task_id(created);
    let done = poll_until(&client, &id, is_terminal).await;
    assert_eq!(structured(&done), json!({"lines": 2, "words": 3}));
    assert!(
        dir.path().join("first_tool.db").exists(),
        "the task was kept in the example's SQLite file"
    );
}

#[tokio::test]
async fn approval_asks_and_refunds_once_approved() {
    let dir = tempfile::tempdir().unwrap();
    let example = Example::start(env!("CARGO_BIN_EXE_approval"), dir.path(), &[], &[]);
    let client = http_client(&example.url, true).await;
    let created = client
        .call_tool_once(call("refund", json!({"order": "A-17", "cents": 1250})))
        .await
        .expect("tools/call");
    let id = task_id(created);
    let asked = poll_until(&client, &id, |t| {
        t.status() == TaskStatus::InputRequired || is_terminal(t)
    })
    .await;
    let asked = serde_json::to_value(&asked).unwrap();
    let question = &asked["inputRequests"]["decision"];
    assert_eq!(question["method"], "elicitation/create", "{asked}");
    assert!(
        question["params"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("A-17")),
        "{asked}"
    );
    update(
        &client,
        &id,
        json!({"decision": {"action": "accept", "content": {"approve": true}}}),
    )
    .await;
    let done = poll_until(&client, &id, is_terminal).await;
    assert_eq!(
        structured(&done),
        json!({"order": "A-17", "cents": 1250, "total_cents": 1250})
    );
}

#[tokio::test]
async fn fleet_postgres_serves_one_task_from_two_instances() {
    let Some(url) = postgres_or_skip("fleet_postgres_serves_one_task_from_two_instances").await
    else {
        return;
    };
    // Declared first, so that it is dropped after the processes.
    let schema = mcp_tasks_runtime::store::testing::PostgresSchema::new(&url, "copyable_fleet");
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("DATABASE_URL", schema.url()),
        ("MCP_TASKS_SCHEMA", schema.name().to_owned()),
    ];
    let bin = env!("CARGO_BIN_EXE_fleet_postgres");
    let a = Example::start(bin, dir.path(), &["a"], &env);
    let b = Example::start(bin, dir.path(), &["b"], &env);
    let on_a = http_client(&a.url, true).await;
    let on_b = http_client(&b.url, true).await;
    let created = on_a
        .call_tool_once(call("nightly_export", json!({"batches": 3})))
        .await
        .expect("tools/call");
    let id = task_id(created);
    // Created on A, followed to its end on B.
    let done = poll_until(&on_b, &id, is_terminal).await;
    let exported = structured(&done);
    assert_eq!(exported["batches"], 3, "{exported}");
    let ran_on = exported["ran_on"].as_array().expect("a list of instances");
    assert!(
        !ran_on.is_empty() && ran_on.iter().all(|i| i == "a" || i == "b"),
        "{exported}"
    );
    drop((on_a, on_b));
    // Ctrl-C: the instance hands its tasks over and exits cleanly.
    assert!(a.interrupt(Duration::from_secs(30)).success());
    drop(b);
}

/// The test Postgres server's URL, or `None` (after saying so) when there is
/// none and `CI` is not set.
async fn postgres_or_skip(test: &str) -> Option<String> {
    let url = std::env::var("MCP_TASKS_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let probe = async {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        client.simple_query("SELECT 1").await.map(drop)
    };
    let reason = match tokio::time::timeout(Duration::from_secs(5), probe).await {
        Ok(Ok(())) => return Some(url),
        Ok(Err(e)) => format!("Postgres not reachable at {url}: {e}"),
        Err(_) => format!("Postgres not reachable at {url} within 5 s"),
    };
    assert!(std::env::var_os("CI").is_none(), "{reason}");
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {reason}");
    None
}
