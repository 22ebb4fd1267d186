//! Crash tests: a real process on a real SQLite file, killed with SIGKILL.
//!
//! Each scenario re-executes this test binary as a child that runs only the
//! ignored test `child_server` (selected with `--exact child_server
//! --ignored`). Environment variables tell the child which scenario and role
//! to play, where the database and the side-effect log are, and which task to
//! look at after a restart. The child prints protocol lines starting with
//! `@@ ` on stdout; the parent waits for them (each wait bounded by
//! [`LIMIT`]), kills the child with SIGKILL (`Child::kill` on Unix), starts a
//! new child on the same file, and checks what survived.
//!
//! The side effect of every checkpoint appends one line to a log file, so the
//! parent can count how many times it ran across the crash.

use std::{
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use mcp_tasks_runtime::{
    Elicit, Engine, ToolError, ask_user, checkpoint,
    engine::{Call, CallOutcome},
    question::InputCapabilities,
    store::{SqliteStore, StepKind, Store, TaskStatus},
    task_tool,
    tool::Registry,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// The longest the parent waits for any one line or exit.
const LIMIT: Duration = Duration::from_secs(20);

const ENV_SCENARIO: &str = "MCP_TASKS_CRASH_SCENARIO";
const ENV_ROLE: &str = "MCP_TASKS_CRASH_ROLE";
const ENV_DB: &str = "MCP_TASKS_CRASH_DB";
const ENV_LOG: &str = "MCP_TASKS_CRASH_LOG";
const ENV_TASK: &str = "MCP_TASKS_CRASH_TASK";
const ENV_KEY: &str = "MCP_TASKS_CRASH_KEY";

// ---------------------------------------------------------------------------
// The child: tools and the server it runs.

#[derive(Debug, Deserialize, JsonSchema, Elicit)]
struct Approval {
    approve: bool,
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

/// Whether this process is the first one (the one that gets killed).
fn first_run() -> bool {
    env(ENV_ROLE) == "first"
}

/// Prints a protocol line for the parent.
fn say(line: impl AsRef<str>) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "@@ {}", line.as_ref()).unwrap();
    out.flush().unwrap();
}

/// The side effect: one line in the log per run of a checkpoint's closure.
fn effect() {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(env(ENV_LOG))
        .unwrap();
    writeln!(f, "effect by pid {}", std::process::id()).unwrap();
    f.sync_all().unwrap();
}

/// Scenario 1: checkpoints, then (in the first process) blocks in a
/// step-free sleep until it is killed.
#[task_tool]
async fn after_checkpoint() -> Result<String, ToolError> {
    let v: u32 = checkpoint("effect", || async {
        effect();
        Ok::<_, ToolError>(7)
    })
    .await?;
    say(format!("CHECKPOINTED {v}"));
    if first_run() {
        #[allow_nondeterminism]
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    Ok(format!("value {v}"))
}

/// Scenario 2: checkpoints, then parks on a question.
#[task_tool]
async fn parks() -> Result<String, ToolError> {
    let v: u32 = checkpoint("effect", || async {
        effect();
        Ok::<_, ToolError>(8)
    })
    .await?;
    let a: Approval = ask_user("Carry on?").await?;
    Ok(format!("value {v} approve={}", a.approve))
}

/// Scenario 3: the checkpoint's closure does its effect and then (in the
/// first process) never returns, so its record is never written.
#[task_tool]
async fn dies_in_step() -> Result<String, ToolError> {
    let v: u32 = checkpoint("effect", || async {
        effect();
        if first_run() {
            say("EFFECT_DONE");
            std::future::pending::<()>().await;
        }
        Ok::<_, ToolError>(11)
    })
    .await?;
    Ok(format!("value {v}"))
}

/// Sleeps until the parent kills the process.
async fn wait_for_the_kill() -> ! {
    loop {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}

async fn serve() {
    let scenario = env(ENV_SCENARIO);
    let store = SqliteStore::open(env(ENV_DB)).await.unwrap();
    let registry = Registry::new()
        .with(after_checkpoint_tool())
        .unwrap()
        .with(parks_tool())
        .unwrap()
        .with(dies_in_step_tool())
        .unwrap();
    // The killed process's leases run out a second after its death.
    let engine = Engine::builder(store)
        .registry(registry)
        .lease(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    say("STARTED");

    if first_run() {
        let mut caps = InputCapabilities::NONE;
        caps.elicitation = true;
        let call = Call::new(scenario.clone(), Map::new()).capabilities(caps);
        let Ok(CallOutcome::Task(t)) = engine.call(call).await else {
            panic!("the call did not start a task");
        };
        say(format!("CREATED {}", t.id));
        if scenario == "parks" {
            let r = loop {
                let r = engine.get(&t.id, None).await.unwrap();
                if r.status == TaskStatus::InputRequired {
                    break r;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            say(format!("PARKED {}", r.pending[0].key));
        }
        wait_for_the_kill().await;
    }

    // After the restart.
    let id = env(ENV_TASK);
    if scenario == "parks" {
        let r = engine.get(&id, None).await.unwrap();
        let keys: Vec<_> = r.pending.iter().map(|p| p.key.as_str()).collect();
        say(format!("PENDING {} {}", r.status.as_str(), keys.join(",")));
        let mut responses = Map::new();
        responses.insert(
            env(ENV_KEY),
            json!({"action": "accept", "content": {"approve": true}}),
        );
        engine.update(&id, responses, None).await.unwrap();
    }
    let r = engine.wait(&id, None, LIMIT).await.unwrap();
    let text = r
        .result
        .as_ref()
        .and_then(|res| res["content"][0]["text"].as_str())
        .unwrap_or("");
    say(format!("FINISHED {} {text}", r.status.as_str()));
}

/// The child process's entry point; does nothing unless a parent set it up.
#[test]
#[ignore = "run by the crash tests as a child process"]
fn child_server() {
    if std::env::var_os(ENV_SCENARIO).is_none() {
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(serve());
}

// ---------------------------------------------------------------------------
// The parent.

/// A running child, killed when dropped (so a failed test leaves no orphan).
struct Server {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Server {
    fn start(
        scenario: &str,
        role: &str,
        files: &Files,
        task: Option<&str>,
        key: Option<&str>,
    ) -> Self {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "child_server",
            "--nocapture",
            "--ignored",
            "--test-threads=1",
        ])
        .env(ENV_SCENARIO, scenario)
        .env(ENV_ROLE, role)
        .env(ENV_DB, &files.db)
        .env(ENV_LOG, &files.log)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        if let Some(task) = task {
            cmd.env(ENV_TASK, task);
        }
        if let Some(key) = key {
            cmd.env(ENV_KEY, key);
        }
        let mut child = cmd.spawn().expect("start the child");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Some(msg) = line.strip_prefix("@@ ")
                    && tx.send(msg.to_owned()).is_err()
                {
                    return;
                }
            }
        });
        Self { child, lines }
    }

    /// Waits for the next protocol line starting with `word`; returns the rest.
    fn expect(&mut self, word: &str) -> String {
        loop {
            let line = match self.lines.recv_timeout(LIMIT) {
                Ok(line) => line,
                Err(e) => panic!(
                    "no `{word}` line from the child within {LIMIT:?} ({e}); exit status: {:?}",
                    self.child.try_wait()
                ),
            };
            if let Some(rest) = line.strip_prefix(word) {
                return rest.trim().to_owned();
            }
        }
    }

    /// SIGKILL, then reap.
    fn kill(mut self) {
        self.child.kill().expect("SIGKILL the child");
        let status = self.child.wait().unwrap();
        assert!(!status.success(), "killed, not exited: {status:?}");
    }

    /// Waits for a clean exit.
    fn finish(mut self) {
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "the child failed: {status:?}");
                return;
            }
            assert!(start.elapsed() < LIMIT, "the child did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Files {
    _dir: tempfile::TempDir,
    db: PathBuf,
    log: PathBuf,
}

impl Files {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        Self {
            db: dir.path().join("tasks.db"),
            log: dir.path().join("effects.log"),
            _dir: dir,
        }
    }

    fn effects(&self) -> usize {
        effects(&self.log)
    }
}

fn effects(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// Reads a task's journal straight from the file.
fn journal(db: &Path, id: &str) -> Vec<mcp_tasks_runtime::store::JournalEntry> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let store = SqliteStore::open(db).await.unwrap();
            store.journal(id).await.unwrap()
        })
}

fn assert_one_effect_entry(entries: &[mcp_tasks_runtime::store::JournalEntry], value: Value) {
    assert_eq!(entries.len(), 1, "{entries:#?}");
    assert_eq!(entries[0].position, 0);
    assert_eq!(entries[0].kind, StepKind::Checkpoint);
    assert_eq!(entries[0].name, "effect");
    assert_eq!(entries[0].value, value);
}

#[test]
fn killed_after_a_checkpoint_resumes_without_repeating_it() {
    let files = Files::new();
    let mut first = Server::start("after_checkpoint", "first", &files, None, None);
    let id = first.expect("CREATED");
    assert_eq!(first.expect("CHECKPOINTED"), "7");
    first.kill();
    assert_eq!(files.effects(), 1);

    let mut second = Server::start("after_checkpoint", "resume", &files, Some(&id), None);
    assert_eq!(second.expect("FINISHED"), "completed value 7");
    second.finish();
    assert_eq!(
        files.effects(),
        1,
        "the checkpoint's effect ran exactly once"
    );
    assert_one_effect_entry(&journal(&files.db, &id), json!(7));
}

#[test]
fn killed_while_parked_keeps_the_question() {
    let files = Files::new();
    let mut first = Server::start("parks", "first", &files, None, None);
    let id = first.expect("CREATED");
    let key = first.expect("PARKED");
    first.kill();

    let mut second = Server::start("parks", "resume", &files, Some(&id), Some(&key));
    assert_eq!(second.expect("PENDING"), format!("input_required {key}"));
    assert_eq!(second.expect("FINISHED"), "completed value 8 approve=true");
    second.finish();
    assert_eq!(files.effects(), 1);
    let entries = journal(&files.db, &id);
    assert_eq!(entries.len(), 2, "{entries:#?}");
    assert_one_effect_entry(&entries[..1], json!(8));
    assert_eq!(entries[1].kind, StepKind::Ask);
}

#[test]
fn killed_between_a_step_and_its_record_reruns_the_step_once() {
    let files = Files::new();
    let mut first = Server::start("dies_in_step", "first", &files, None, None);
    let id = first.expect("CREATED");
    first.expect("EFFECT_DONE");
    first.kill();
    assert_eq!(files.effects(), 1);
    assert!(journal(&files.db, &id).is_empty(), "nothing was recorded");

    let mut second = Server::start("dies_in_step", "resume", &files, Some(&id), None);
    assert_eq!(second.expect("FINISHED"), "completed value 11");
    second.finish();
    assert_eq!(files.effects(), 2, "the step ran again, once");
    assert_one_effect_entry(&journal(&files.db, &id), json!(11));
}
