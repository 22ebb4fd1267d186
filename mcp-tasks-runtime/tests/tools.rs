//! What tool code sees, through the engine on a SQLite file: shared state
//! from the engine, the task's own context, ending itself `cancelled`, and
//! errors that keep their causes.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, SystemTime},
};

use mcp_tasks_runtime::{
    Engine, Error, State, ToolError, checkpoint, durable,
    engine::{Call, CallMode, CallOutcome},
    store::{SqliteStore, TaskRecord, TaskStatus},
    task_tool,
    tool::Registry,
};
use serde_json::{Map, Value, json};

const LIMIT: Duration = Duration::from_secs(20);

/// A stand-in for a connection pool: counts the queries it served.
struct Warehouse {
    name: &'static str,
    queries: AtomicUsize,
}

/// Another state type, which no engine below is given.
struct Mailer;

/// Counts rows through the engine's `Warehouse`.
#[task_tool]
async fn count_rows(db: State<Warehouse>, table: String) -> Result<String, ToolError> {
    let n = checkpoint("query", || async {
        Ok(db.queries.fetch_add(1, Ordering::SeqCst) + 1)
    })
    .await?;
    Ok(format!("{table} in {}: query {n}", db.name))
}

/// Needs a `Mailer`.
#[task_tool]
async fn send_mail(mailer: State<Mailer>, to: String) -> String {
    let _ = mailer;
    to
}

/// Reports what it knows about its task.
#[task_tool(ttl = "10m")]
async fn whoami() -> Value {
    let info = durable::task_info().expect("inside a run");
    json!({
        "task_id": info.task_id,
        "tool": info.tool,
        "principal": info.principal,
        "created_ms": info.created_at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis() as i64,
        "expires_ms": info.expires_at.map(|t| t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis() as i64),
    })
}

/// Works (without an await, so only its own check sees the cancel) until
/// cancelled; then ends `cancelled`, or, with `ok`, returns a result.
#[task_tool]
async fn until_cancelled(ok: bool) -> Result<String, ToolError> {
    loop {
        if durable::cancelled() {
            if ok {
                return Ok("stopped early".into());
            }
            return Err(ToolError::cancelled());
        }
        // Busy without an await point, on purpose.
        #[allow_nondeterminism]
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Races two checkpoints with `select!`: not deterministic, so refused (the
/// macro's check is off, to test the runtime's own).
#[task_tool(allow_nondeterminism)]
async fn select_steps() -> Result<String, ToolError> {
    let fast = checkpoint("fast", || async { Ok(1_u32) });
    let slow = checkpoint("slow", || async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok(2_u32)
    });
    let n = tokio::select! {
        n = fast => n?,
        n = slow => n?,
    };
    mcp_tasks_runtime::durable::sleep(Duration::from_millis(200)).await;
    Ok(n.to_string())
}

/// A checkpoint under `tokio::time::timeout`: refused too (by the runtime;
/// the macro's check is off).
#[task_tool(allow_nondeterminism)]
async fn timeout_step() -> Result<String, ToolError> {
    let step = checkpoint("slow", || async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok(2_u32)
    });
    match tokio::time::timeout(Duration::from_millis(50), step).await {
        Ok(n) => Ok(n?.to_string()),
        Err(_) => {
            mcp_tasks_runtime::durable::sleep(Duration::from_millis(200)).await;
            Ok("timed out".into())
        }
    }
}

/// The race inside one checkpoint: the winner is journaled, and the durable
/// sleep after it makes the fn replay past it.
#[task_tool]
async fn race_in_a_step() -> Result<String, ToolError> {
    let winner = checkpoint("race", || async {
        Ok(tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(10)) => "fast".to_owned(),
            () = tokio::time::sleep(Duration::from_secs(5)) => "slow".to_owned(),
        })
    })
    .await?;
    mcp_tasks_runtime::durable::sleep(Duration::from_millis(200)).await;
    Ok(winner)
}

/// Two questions at once with `futures::join!`, straight from `ask_user`.
#[task_tool]
async fn two_questions_joined() -> Result<String, ToolError> {
    let (name, sure) = futures::join!(
        mcp_tasks_runtime::ask_user::<Name>("Your name?").key("name"),
        mcp_tasks_runtime::confirm("Sure?").key("sure"),
    );
    Ok(format!("{} {}", name?.name, sure?))
}

/// A form.
#[derive(serde::Deserialize, schemars::JsonSchema, mcp_tasks_runtime::Elicit)]
struct Name {
    name: String,
}

/// Asks inside a checkpoint's closure.
#[task_tool]
async fn ask_in_a_step() -> Result<String, ToolError> {
    let said = checkpoint("inner", || async {
        Ok(match mcp_tasks_runtime::confirm("inside?").await {
            Err(mcp_tasks_runtime::question::AskError::InsideCheckpoint) => "refused".to_owned(),
            other => format!("{other:?}"),
        })
    })
    .await?;
    Ok(said)
}

/// A question raced against a step with `select!`: the step wins and the
/// question is dropped, which is refused (by the runtime; the macro's check
/// is off).
#[task_tool(allow_nondeterminism)]
async fn question_raced_by_a_step() -> Result<String, ToolError> {
    let q = mcp_tasks_runtime::confirm("Go?").key("go");
    let step = checkpoint("busy", || async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(1_u32)
    });
    // `biased`: the step starts first, then the question parks beside it.
    let said = tokio::select! {
        biased;
        n = step => format!("step {}", n?),
        go = q => format!("answered {go:?}"),
    };
    // The fn goes on (were it to return here, nothing would be left undone).
    checkpoint("after", || async { Ok(said) }).await
}

static SPAWNED_RUNS: AtomicUsize = AtomicUsize::new(0);

/// A checkpoint in a spawned future: it has left the task, so it runs
/// unjournaled, once per run (the README says so).
#[task_tool(allow_nondeterminism)]
async fn spawned_step() -> Result<String, ToolError> {
    let inner = tokio::spawn(async {
        checkpoint("spawned", || async {
            Ok(SPAWNED_RUNS.fetch_add(1, Ordering::SeqCst) + 1)
        })
        .await
    });
    let n = inner.await.map_err(|e| ToolError::new(e.to_string()))??;
    // A durable sleep, long enough to park for sure: the fn runs again from
    // its journal after it.
    mcp_tasks_runtime::durable::sleep(Duration::from_millis(200)).await;
    Ok(n.to_string())
}

/// Withdraws at once, cancel or not.
#[task_tool]
async fn withdraw() -> Result<String, ToolError> {
    Err(ToolError::cancelled())
}

/// `?` on an `io::Error` inside a checkpoint and in the fn.
#[task_tool]
async fn read_config(path: String) -> Result<String, ToolError> {
    let text = checkpoint("read", || async {
        let text = std::fs::read_to_string(&path).map_err(|e| Wrapped {
            what: format!("reading {path}"),
            source: e,
        })?;
        Ok(text)
    })
    .await?;
    Ok(text)
}

/// `?` on an `anyhow::Error` in a fn returning `ToolError`.
#[task_tool]
async fn anyhow_in_tool_error(path: String) -> Result<String, ToolError> {
    use anyhow::Context as _;
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    Ok(text)
}

/// A fn returning `anyhow::Result`.
#[task_tool]
async fn anyhow_result(path: String) -> anyhow::Result<String> {
    use anyhow::Context as _;
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    Ok(text)
}

/// An error with a source, as thiserror would write it.
#[derive(Debug)]
struct Wrapped {
    what: String,
    source: std::io::Error,
}

impl std::fmt::Display for Wrapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for Wrapped {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

fn registry() -> Registry {
    [
        count_rows_tool(),
        whoami_tool(),
        until_cancelled_tool(),
        withdraw_tool(),
        read_config_tool(),
        anyhow_in_tool_error_tool(),
        anyhow_result_tool(),
        select_steps_tool(),
        timeout_step_tool(),
        race_in_a_step_tool(),
        two_questions_joined_tool(),
        ask_in_a_step_tool(),
        question_raced_by_a_step_tool(),
        spawned_step_tool(),
    ]
    .into_iter()
    .try_fold(Registry::new(), |r, t| r.with(t))
    .expect("valid tools")
}

async fn engine(dir: &tempfile::TempDir, warehouse: Warehouse) -> Engine {
    Engine::builder(
        SqliteStore::open(dir.path().join("tasks.db"))
            .await
            .expect("store"),
    )
    .registry(registry())
    .state(warehouse)
    // Every durable sleep parks: the tools here sleep to make their fn
    // replay past what came before.
    .sleep_in_process_up_to(Duration::ZERO)
    .start()
    .await
    .expect("engine")
}

fn warehouse(name: &'static str) -> Warehouse {
    Warehouse {
        name,
        queries: AtomicUsize::new(0),
    }
}

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().cloned().expect("an object")
}

async fn run(engine: &Engine, call: Call) -> TaskRecord {
    let CallOutcome::Task(task) = engine.call(call).await.expect("call") else {
        panic!("expected a task")
    };
    engine
        .wait(&task.id, task.principal.as_deref(), LIMIT)
        .await
        .expect("the task ends")
}

fn text(r: &TaskRecord) -> &str {
    r.result.as_ref().expect("a result")["content"][0]["text"]
        .as_str()
        .expect("text")
}

#[tokio::test]
async fn two_engines_in_one_process_hand_tools_their_own_state() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let eu = engine(&d1, warehouse("eu")).await;
    let us = engine(&d2, warehouse("us")).await;
    let args = obj(json!({"table": "orders"}));
    let a = run(&eu, Call::new("count_rows", args.clone())).await;
    let b = run(&us, Call::new("count_rows", args.clone())).await;
    let c = run(&eu, Call::new("count_rows", args)).await;
    assert_eq!(text(&a), "orders in eu: query 1");
    assert_eq!(text(&b), "orders in us: query 1");
    assert_eq!(
        text(&c),
        "orders in eu: query 2",
        "one value per engine, shared by its calls"
    );
    let schema = eu.registry().get("count_rows").unwrap().definition()["inputSchema"].clone();
    assert_eq!(schema["required"], json!(["table"]));
    assert!(
        schema["properties"].get("db").is_none(),
        "state is no argument: {schema}"
    );
}

#[tokio::test]
async fn an_engine_missing_a_tools_state_refuses_to_start_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let err = Engine::builder(SqliteStore::open(dir.path().join("t.db")).await.unwrap())
        .registry(registry().with(send_mail_tool()).unwrap())
        .state(warehouse("eu"))
        .start()
        .await
        .expect_err("Mailer was not given");
    let Error::MissingState {
        tool, type_name, ..
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!(
        (tool.as_str(), type_name.as_str()),
        ("send_mail", "tools::Mailer")
    );
    let message = err.to_string();
    assert!(
        message.contains("`send_mail`") && message.contains("State<tools::Mailer>"),
        "{message}"
    );
    // With it, the engine starts; a shared `Arc` works too.
    Engine::builder(SqliteStore::open(dir.path().join("t.db")).await.unwrap())
        .registry(registry().with(send_mail_tool()).unwrap())
        .state(warehouse("eu"))
        .state_arc(Arc::new(Mailer))
        .start()
        .await
        .expect("every state given");
}

#[tokio::test]
async fn a_tool_reads_its_own_task() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(&dir, warehouse("eu")).await;
    let done = run(
        &engine,
        Call::new("whoami", Map::new()).principal(Some("alice".into())),
    )
    .await;
    let seen: Value = serde_json::from_str(text(&done)).unwrap();
    assert_eq!(seen["task_id"], json!(done.id));
    assert_eq!(seen["tool"], "whoami");
    assert_eq!(seen["principal"], "alice");
    assert_eq!(seen["created_ms"], json!(done.created_at_ms));
    assert_eq!(seen["expires_ms"], json!(done.created_at_ms + 600_000));

    // Inline, there is no task.
    let CallOutcome::Finished(Ok(result)) = engine
        .call(Call::new("whoami", Map::new()).mode(CallMode::Inline))
        .await
        .unwrap()
    else {
        panic!("an inline result")
    };
    let seen: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(seen["task_id"], Value::Null);
    assert_eq!(seen["tool"], "whoami");
    assert_eq!(durable::task_info(), None, "outside any run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_honoured_from_inside_ends_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(&dir, warehouse("eu")).await;
    for ok in [false, true] {
        let CallOutcome::Task(task) = engine
            .call(Call::new("until_cancelled", obj(json!({"ok": ok}))))
            .await
            .unwrap()
        else {
            panic!("a task")
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        engine.cancel(&task.id, None).await.expect("cancel");
        let done = engine.wait(&task.id, None, LIMIT).await.unwrap();
        if ok {
            // Returning a result after seeing the cancel completes the task.
            assert_eq!(done.status, TaskStatus::Completed, "{done:?}");
            assert_eq!(text(&done), "stopped early");
        } else {
            assert_eq!(done.status, TaskStatus::Cancelled, "{done:?}");
            assert_eq!(done.result, None);
        }
    }
    // Without any cancel request, too.
    let done = run(&engine, Call::new("withdraw", Map::new())).await;
    assert_eq!(done.status, TaskStatus::Cancelled);
    // Inline, the caller gets a tool error that says so.
    let CallOutcome::Finished(Ok(result)) = engine
        .call(Call::new("withdraw", Map::new()).mode(CallMode::Inline))
        .await
        .unwrap()
    else {
        panic!("an inline result")
    };
    assert_eq!(result["isError"], true);
    assert_eq!(result["content"][0]["text"], "The task was cancelled.");
}

#[tokio::test]
async fn errors_keep_their_causes() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(&dir, warehouse("eu")).await;
    let missing = dir.path().join("missing.json");
    let path = missing.to_str().unwrap();
    for tool in ["read_config", "anyhow_in_tool_error", "anyhow_result"] {
        let done = run(&engine, Call::new(tool, obj(json!({"path": path})))).await;
        assert_eq!(done.status, TaskStatus::Completed);
        assert_eq!(done.result.as_ref().unwrap()["isError"], true);
        let message = text(&done);
        assert!(
            message.starts_with(&format!("reading {path}: No such file or directory")),
            "{tool}: {message}"
        );
    }
    // `?` on strings, too; and an `RpcError` stays a protocol error.
    let e: ToolError = "plain words".into();
    assert_eq!(e.to_string(), "plain words");
    let e = ToolError::from(mcp_tasks_runtime::tool::RpcError::new(-32010, "quota"));
    assert_eq!(e.as_rpc().map(|r| r.code), Some(-32010));
}

#[tokio::test]
async fn a_select_or_timeout_over_journaled_steps_fails_naming_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(&dir, warehouse("eu")).await;
    for (tool, step) in [("select_steps", "`slow`"), ("timeout_step", "`slow`")] {
        let done = run(&engine, Call::new(tool, Map::new())).await;
        assert_eq!(done.status, TaskStatus::Failed, "{tool}: {done:?}");
        let error = done.error.expect("an error");
        assert!(
            error.message.contains(&format!("checkpoint {step}"))
                && error.message.contains("dropped before it finished")
                && error.message.contains("checkpoint(name, || async")
                && error.message.contains("Question::timeout"),
            "{tool}: {}",
            error.message
        );
    }
    // Inside one checkpoint, the race is journaled and replays the same.
    let done = run(&engine, Call::new("race_in_a_step", Map::new())).await;
    assert_eq!(done.status, TaskStatus::Completed, "{done:?}");
    assert_eq!(text(&done), "fast");
}

#[tokio::test]
async fn questions_join_ask_only_outside_steps_and_are_never_dropped_silently() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(&dir, warehouse("eu")).await;
    let mut caps = mcp_tasks_runtime::question::InputCapabilities::NONE;
    caps.elicitation = true;

    // `futures::join!` parks on both questions at once.
    let CallOutcome::Task(task) = engine
        .call(Call::new("two_questions_joined", Map::new()).capabilities(caps))
        .await
        .unwrap()
    else {
        panic!("a task")
    };
    let mut keys = Vec::new();
    for _ in 0..200 {
        let t = engine.get(&task.id, None).await.unwrap();
        keys = t.pending.iter().map(|p| p.key.clone()).collect();
        if keys.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    keys.sort();
    assert_eq!(keys, ["name", "sure"]);
    engine
        .update(
            &task.id,
            obj(json!({
                "name": {"action": "accept", "content": {"name": "Ada"}},
                "sure": {"action": "accept", "content": {"confirm": true}},
            })),
            None,
        )
        .await
        .unwrap();
    let done = engine.wait(&task.id, None, LIMIT).await.unwrap();
    assert_eq!(text(&done), "Ada true");

    // Asked inside a checkpoint: a clear error, not "not in a task".
    let done = run(
        &engine,
        Call::new("ask_in_a_step", Map::new()).capabilities(caps),
    )
    .await;
    assert_eq!(text(&done), "refused");
    assert_eq!(
        mcp_tasks_runtime::question::AskError::InsideCheckpoint.to_string(),
        "a question cannot be asked inside a checkpoint's closure: ask before or after the checkpoint"
    );

    // A parked question dropped by `select!` fails the task, naming it.
    let done = run(
        &engine,
        Call::new("question_raced_by_a_step", Map::new()).capabilities(caps),
    )
    .await;
    assert_eq!(done.status, TaskStatus::Failed, "{done:?}");
    let message = done.error.unwrap().message;
    assert!(
        message.contains("the question `go`") && message.contains("dropped before it finished"),
        "{message}"
    );
}

#[tokio::test]
async fn a_checkpoint_in_a_spawned_future_runs_unjournaled_once_per_run() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(&dir, warehouse("eu")).await;
    let done = run(&engine, Call::new("spawned_step", Map::new())).await;
    assert_eq!(
        text(&done),
        "2",
        "ran in the first run and again after the sleep"
    );
    assert_eq!(SPAWNED_RUNS.load(Ordering::SeqCst), 2);
    let journal = engine.store().journal(&done.id).await.unwrap();
    assert!(
        journal.iter().all(|e| e.name != "spawned"),
        "nothing of it is journaled: {journal:?}"
    );
}
