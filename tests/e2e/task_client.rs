//! `TaskClient` against real server processes on 127.0.0.1: the conformance
//! example (every tool shape), the example over stdio, and a server written
//! with rmcp alone (`rmcp-task-server`). Restarts are real: SIGKILL, then the
//! same binary on the same port and SQLite file.

mod common;

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures::StreamExt as _;
use mcp_tasks_client::{
    ClientError, Endpoint, FormQuestion, TaskClient, TaskReference, TaskStatus,
};
use mcp_tasks_runtime::Elicit;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Every test ends within this, whatever the server does.
const BOUND: Duration = Duration::from_secs(60);

/// A server process in its own process group, killed (SIGKILL) on drop.
struct Proc {
    child: Child,
    url: String,
}

impl Proc {
    fn start(bin: &str, args: &[&str]) -> Self {
        use std::os::unix::process::CommandExt as _;
        let child = Command::new(bin)
            .args(args)
            .env("RUST_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .expect("the server starts");
        let mut proc = Self {
            child,
            url: String::new(),
        };
        (proc.url, _) = common::process::listening(&mut proc.child, Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{bin} did not say where it listens: {e}"));
        proc
    }

    /// The conformance example on `addr` (`127.0.0.1:0` for any port) with
    /// its tasks in `store`.
    fn conformance(addr: &str, store: &Path) -> Self {
        Self::start(
            common::bin("conformance"),
            &["--addr", addr, "--store", &store.display().to_string()],
        )
    }

    /// `127.0.0.1:PORT`, from the URL.
    fn addr(&self) -> String {
        self.url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .to_owned()
    }

    /// SIGKILL, and reap.
    fn kill(mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.child.id())])
                .stderr(Stdio::null())
                .status();
            let _ = self.child.wait();
        }
    }
}

#[derive(Serialize, Deserialize, JsonSchema, Elicit)]
struct Confirm {
    /// Delete it?
    confirm: bool,
}

#[derive(Serialize, Deserialize, JsonSchema, Elicit)]
struct Input {
    /// The value.
    value: String,
}

#[derive(Serialize, Deserialize, JsonSchema, Elicit)]
struct UserName {
    /// Your name.
    name: String,
}

fn fresh() -> (tempfile::TempDir, Proc) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let server = Proc::conformance("127.0.0.1:0", &dir.path().join("tasks.db"));
    (dir, server)
}

async fn bounded<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(BOUND, f)
        .await
        .expect("finished in time")
}

#[tokio::test]
async fn call_returns_a_plain_result() {
    let (_dir, server) = fresh();
    bounded(async {
        let client = TaskClient::http(&server.url).connect().await.unwrap();
        let greeting: String = client.call("greet", json!({"name": "Ada"})).await.unwrap();
        assert_eq!(greeting, "Hello, Ada!");
        // A task-capable tool the server answers as a task: followed to its end.
        let done: String = client
            .call("slow_compute", json!({"seconds": 0.2, "label": "x"}))
            .await
            .unwrap();
        assert_eq!(done, "slow_compute(x) done after 0.2s");
        // Bad arguments: a tool error naming the field (C-TOOLS).
        let err = client
            .call::<String>("greet", json!({"name": 5}))
            .await
            .unwrap_err();
        assert!(
            matches!(err, ClientError::Tool { .. }) && err.to_string().contains("name"),
            "{err}"
        );
    })
    .await;
}

#[tokio::test]
async fn call_answers_mrtr_rounds_inline() {
    let (_dir, server) = fresh();
    bounded(async {
        // A forbidden (inline-only) tool asks through MRTR, with requestState.
        let client = TaskClient::http(&server.url)
            .on_form(|message: &str| {
                assert_eq!(message, "What is your name?");
                Some(UserName { name: "Ada".into() })
            })
            .connect()
            .await
            .unwrap();
        let said: String = client
            .call("test_input_required_result_elicitation", ())
            .await
            .unwrap();
        assert_eq!(said, "Hello, Ada!");

        // Without the tasks extension, a task tool runs inline too, and its
        // questions come as MRTR rounds.
        let inline = TaskClient::http(&server.url)
            .tasks(false)
            .on_form(|_: &str| Some(Confirm { confirm: true }))
            .connect()
            .await
            .unwrap();
        let handle = inline
            .start("slow_compute", json!({"seconds": 0.1, "label": "i"}))
            .await
            .unwrap();
        assert_eq!(handle.id(), None, "no task without the extension");
        assert_eq!(
            handle.result::<String>().await.unwrap(),
            "slow_compute(i) done after 0.1s"
        );
    })
    .await;
}

#[tokio::test]
async fn call_follows_a_task_and_answers_each_key_once() {
    let (_dir, server) = fresh();
    bounded(async {
        let asked = Arc::new(AtomicUsize::new(0));
        let counter = asked.clone();
        let client = TaskClient::http(&server.url)
            .on_form(|message: &str| {
                Some(Confirm {
                    confirm: message == "Delete a.txt?",
                })
            })
            .on_form(move |message: &str| {
                counter.fetch_add(1, Ordering::SeqCst);
                Some(Input {
                    value: message.trim_start_matches("Provide value ").to_owned(),
                })
            })
            .connect()
            .await
            .unwrap();
        let said: String = client
            .call("confirm_delete", json!({"filename": "a.txt"}))
            .await
            .unwrap();
        assert_eq!(said, "confirm_delete(a.txt): confirmed = true");

        let said: String = client.call("multi_input", ()).await.unwrap();
        assert_eq!(said, "multi_input: a = A, b = B");
        assert_eq!(asked.load(Ordering::SeqCst), 2, "each key answered once");

        // MRTR before the task, then the task (test_tool_with_task).
        let client = TaskClient::http(&server.url)
            .on_form(|_: &str| Some(UserName { name: "Lin".into() }))
            .connect()
            .await
            .unwrap();
        let said: String = client.call("test_tool_with_task", ()).await.unwrap();
        assert_eq!(said, "Hello, Lin! (async)");
    })
    .await;
}

/// The usual tokio way to show progress and wait for the end: one task
/// reads `updates()` while another awaits `result()`. A handler that waits
/// for a person is called once for the question, not once per follower.
#[tokio::test]
async fn two_followers_of_one_handle_call_a_slow_handler_once() {
    use mcp_tasks_client::{ElicitResult, ElicitationAction};

    let (_dir, server) = fresh();
    bounded(async {
        let calls = Arc::new(AtomicUsize::new(0));
        // Released when the other follower has seen the question (or, were
        // it to answer too, by the handler's second call).
        let seen = Arc::new(tokio::sync::Notify::new());
        let (counter, release) = (calls.clone(), seen.clone());
        let client = TaskClient::http(&server.url)
            .on_elicit(move |_request| {
                let (counter, release) = (counter.clone(), release.clone());
                async move {
                    if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                        let _ =
                            tokio::time::timeout(Duration::from_secs(10), release.notified()).await;
                    } else {
                        release.notify_one();
                    }
                    ElicitResult::new(ElicitationAction::Accept)
                        .with_content(json!({"confirm": true}))
                }
            })
            .connect()
            .await
            .unwrap();
        let handle = client
            .start("confirm_delete", json!({"filename": "a.txt"}))
            .await
            .unwrap();
        assert!(handle.id().is_some(), "confirm_delete runs as a task");
        let mut updates = handle.updates();
        let saw = seen.clone();
        let watcher = tokio::spawn(async move {
            let mut statuses = Vec::new();
            while let Some(update) = updates.next().await {
                let update = update.expect("the task is followed to its end");
                if update.status == TaskStatus::InputRequired {
                    saw.notify_one();
                }
                statuses.push(update.status);
            }
            statuses
        });
        let said: String = handle.result().await.unwrap();
        assert_eq!(said, "confirm_delete(a.txt): confirmed = true");
        let statuses = watcher.await.unwrap();
        assert_eq!(statuses.last(), Some(&TaskStatus::Completed));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "one question, one call of its handler"
        );
    })
    .await;
}

/// The same with a typed, async form handler that takes 2 s (a person
/// answering), as the issue has it: `updates()` read in one tokio task
/// while another awaits `result()`. The handler runs once per key, and sees
/// each question's key, tool and task.
#[tokio::test]
async fn a_slow_async_form_handler_runs_once_per_key_and_sees_its_context() {
    let (_dir, server) = fresh();
    bounded(async {
        let seen: Arc<Mutex<Vec<FormQuestion>>> = Arc::default();
        let record = seen.clone();
        let client = TaskClient::http(&server.url)
            .on_form_async(move |question: FormQuestion| {
                let record = record.clone();
                async move {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    let value = question.message.trim_start_matches("Provide value ");
                    let answer = Input {
                        value: value.to_owned(),
                    };
                    record.lock().unwrap().push(question);
                    Some(answer)
                }
            })
            .connect()
            .await
            .unwrap();
        let handle = client.start("multi_input", ()).await.unwrap();
        let id = handle.id().expect("multi_input runs as a task").to_owned();
        let mut updates = handle.updates();
        let watcher = tokio::spawn(async move {
            let mut statuses = Vec::new();
            while let Some(update) = updates.next().await {
                statuses.push(update.expect("the task is followed to its end").status);
            }
            statuses
        });
        let waiter = tokio::spawn(async move { handle.result::<String>().await });
        assert_eq!(waiter.await.unwrap().unwrap(), "multi_input: a = A, b = B");
        assert_eq!(watcher.await.unwrap().last(), Some(&TaskStatus::Completed));
        let seen = seen.lock().unwrap().clone();
        let mut keys: Vec<&str> = seen.iter().filter_map(|q| q.key.as_deref()).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["input-a", "input-b"], "once per key: {seen:?}");
        for question in &seen {
            assert_eq!(
                question.tool.as_deref(),
                Some("multi_input"),
                "{question:?}"
            );
            assert_eq!(
                question.task_id.as_deref(),
                Some(id.as_str()),
                "{question:?}"
            );
        }

        // Asked inline (MRTR) before the task exists: a key and a tool, no task.
        let seen: Arc<Mutex<Vec<FormQuestion>>> = Arc::default();
        let record = seen.clone();
        let client = TaskClient::http(&server.url)
            .on_form_async(move |question: FormQuestion| {
                record.lock().unwrap().push(question);
                async { Some(UserName { name: "Lin".into() }) }
            })
            .connect()
            .await
            .unwrap();
        let said: String = client.call("test_tool_with_task", ()).await.unwrap();
        assert_eq!(said, "Hello, Lin! (async)");
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].key.as_deref(), Some("user_name"));
        assert_eq!(seen[0].tool.as_deref(), Some("test_tool_with_task"));
        assert_eq!(seen[0].task_id, None, "asked before there was a task");
        assert_eq!(seen[0].message, "What is your name?");
    })
    .await;
}

/// A form no handler fits is declined with a WARN that says why: the
/// fields the form asks for, and what keeps each typed handler from
/// fitting.
#[tokio::test]
async fn a_form_no_handler_fits_is_declined_with_a_warning_saying_why() {
    use tracing_subscriber::util::SubscriberInitExt as _;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    let lines = Lines::default();
    let writer = lines.clone();
    let _logs = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing_subscriber::filter::LevelFilter::WARN)
        .with_writer(move || writer.clone())
        .finish()
        .set_default();
    let (_dir, server) = fresh();
    bounded(async {
        // Only a `confirm` handler: the tool asks for `value` (or `name`).
        let client = TaskClient::http(&server.url)
            .on_form(|_: &str| Some(Confirm { confirm: true }))
            .connect()
            .await
            .unwrap();
        let declined = client.call::<String>("multi_input", ()).await;
        assert!(declined.is_err(), "declined: {declined:?}");
    })
    .await;
    let logs = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    let warning = logs
        .lines()
        .find(|l| l.contains("declined an elicitation no handler fits"))
        .unwrap_or_else(|| panic!("no warning in {logs}"));
    assert!(warning.contains("WARN"), "{warning}");
    assert!(
        warning.contains("the form asks for [")
            && warning.contains("`value`")
            && warning.contains("[`confirm`] has `confirm` the form does not ask"),
        "{warning}"
    );
}

#[tokio::test]
async fn errors_are_typed() {
    let (_dir, server) = fresh();
    bounded(async {
        let client = TaskClient::http(&server.url).connect().await.unwrap();

        let err = client.call::<String>("failing_job", ()).await.unwrap_err();
        match err {
            ClientError::Tool { message, .. } => {
                assert_eq!(message, "failing_job: intentional tool execution error");
            }
            other => panic!("expected a tool error, got {other}"),
        }

        let err = client
            .call::<String>("protocol_error_job", ())
            .await
            .unwrap_err();
        match err {
            ClientError::Failed { task_id, error } => {
                assert!(!task_id.is_empty());
                assert_eq!(error.code.0, -32603);
                assert!(error.message.contains("intentional protocol-level failure"));
            }
            other => panic!("expected a failed task, got {other}"),
        }

        // A task whose ttl ran out while it was followed.
        let err = client.call::<String>("short_lived", ()).await.unwrap_err();
        assert!(matches!(err, ClientError::Expired { .. }), "{err}");

        // A handle on a task the server does not know (any more).
        let gone = client
            .resume(TaskReference {
                endpoint: client.endpoint().clone(),
                task_id: "0123456789abcdef0123456789abcdef".into(),
            })
            .unwrap();
        let err = gone.result::<String>().await.unwrap_err();
        assert!(matches!(err, ClientError::Expired { .. }), "{err}");

        // A result that does not decode into the type asked for.
        let err = client
            .call::<u32>("greet", json!({"name": "Ada"}))
            .await
            .unwrap_err();
        assert!(matches!(err, ClientError::Decode(_)), "{err}");

        // A reference for another server.
        let other = client.resume(TaskReference {
            endpoint: Endpoint::Http {
                url: "http://127.0.0.1:1/mcp".into(),
            },
            task_id: "x".into(),
        });
        assert!(matches!(other, Err(ClientError::OtherEndpoint { .. })));
    })
    .await;
}

#[tokio::test]
async fn cancel_ends_the_task_cancelled() {
    let (_dir, server) = fresh();
    bounded(async {
        let client = TaskClient::http(&server.url).connect().await.unwrap();
        let handle = client
            .start("slow_compute", json!({"seconds": 30, "label": "c"}))
            .await
            .unwrap();
        let id = handle.id().unwrap().to_owned();
        let mut updates = handle.updates();
        let first = updates.next().await.unwrap().unwrap();
        assert_eq!(first.status, TaskStatus::Working);
        handle.cancel().await.unwrap();
        let err = handle.result::<String>().await.unwrap_err();
        assert!(
            matches!(err, ClientError::Cancelled { ref task_id } if *task_id == id),
            "{err}"
        );
    })
    .await;
}

#[tokio::test]
async fn a_persisted_handle_resumes_after_the_server_was_killed() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tasks.db");
    let server = Proc::conformance("127.0.0.1:0", &store);
    let addr = server.addr();
    let url = server.url.clone();
    let stored = bounded(async {
        let client = TaskClient::http(&url).connect().await.unwrap();
        let handle = client
            .start("slow_compute", json!({"seconds": 2, "label": "r"}))
            .await
            .unwrap();
        // Dropping the handle (and the client) does not cancel the task.
        serde_json::to_string(&handle).unwrap()
    })
    .await;
    server.kill();

    let _server = Proc::conformance(&addr, &store);
    bounded(async {
        let reference: TaskReference = serde_json::from_str(&stored).unwrap();
        let client = TaskClient::builder(reference.endpoint.clone())
            .connect()
            .await
            .unwrap();
        let said: String = client.resume(reference).unwrap().result().await.unwrap();
        assert_eq!(said, "slow_compute(r) done after 2s");
    })
    .await;
}

#[tokio::test]
async fn polling_retries_across_a_server_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tasks.db");
    let server = Proc::conformance("127.0.0.1:0", &store);
    let addr = server.addr();
    let client = TaskClient::http(&server.url).connect().await.unwrap();
    let handle = client
        .start("slow_compute", json!({"seconds": 2, "label": "p"}))
        .await
        .unwrap();
    let following = tokio::spawn(handle.result::<String>());
    tokio::time::sleep(Duration::from_millis(400)).await;
    server.kill();
    // Down for a while: polls fail and back off.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let _server = Proc::conformance(&addr, &store);
    let said = bounded(following).await.unwrap().unwrap();
    assert_eq!(said, "slow_compute(p) done after 2s");
}

#[tokio::test]
async fn works_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tasks.db").display().to_string();
    bounded(async {
        let client = TaskClient::stdio(common::bin("conformance"), ["--stdio", "--store", &store])
            .on_form(|_: &str| Some(Confirm { confirm: false }))
            .connect()
            .await
            .unwrap();
        let said: String = client
            .call("confirm_delete", json!({"filename": "b.txt"}))
            .await
            .unwrap();
        assert_eq!(said, "confirm_delete(b.txt): confirmed = false");
    })
    .await;
}

#[tokio::test]
async fn completes_a_task_on_a_server_written_with_rmcp_alone() {
    let server = Proc::start(common::bin("rmcp-task-server"), &["--addr", "127.0.0.1:0"]);
    bounded(async {
        let client = TaskClient::http(&server.url)
            .on_form(|message: &str| {
                assert_eq!(message, "What is your name?");
                Some(UserName { name: "Ada".into() })
            })
            .connect()
            .await
            .unwrap();
        let handle = client.start("ask_name", ()).await.unwrap();
        assert!(handle.id().is_some(), "the rmcp server made a task");
        let mut seen = Vec::new();
        let mut updates = handle.updates();
        while let Some(update) = updates.next().await {
            seen.push(update.unwrap().status);
        }
        assert_eq!(seen.last(), Some(&TaskStatus::Completed), "{seen:?}");
        assert!(seen.contains(&TaskStatus::InputRequired), "{seen:?}");
        assert_eq!(handle.result::<String>().await.unwrap(), "Hello, Ada!");

        // Without the extension, the same tool answers at once.
        let plain = TaskClient::http(&server.url)
            .tasks(false)
            .connect()
            .await
            .unwrap();
        let said: String = plain.call("ask_name", ()).await.unwrap();
        assert_eq!(said, "Hello, stranger!");
    })
    .await;
}
