//! The traces a run leaves: one `task_run` span per run (the tool, a task
//! reference that is not its id, the claim's attempt, how it ended), and a
//! `step` span under it for each step, with its journal position and
//! whether it replayed or ran.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use mcp_tasks_runtime::{
    Engine, ToolError, checkpoint, durable,
    engine::{Call, CallOutcome},
    store::MemoryStore,
    task_tool,
    tool::Registry,
};
use tracing::{
    Subscriber,
    field::{Field, Visit},
    span,
};
use tracing_subscriber::{Layer, layer::Context, prelude::*, registry::LookupSpan};

/// One step, a durable sleep (the run ends `asleep`), then a second run
/// that replays the step.
#[task_tool]
async fn two_runs() -> Result<String, ToolError> {
    let n = checkpoint("count", || async { Ok(2_u32) }).await?;
    durable::sleep(Duration::from_millis(200)).await;
    Ok(n.to_string())
}

/// Every span seen: its name, its fields (as recorded), and its parent's name.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<Seen>>>);

#[derive(Debug, Clone)]
struct Seen {
    id: u64,
    name: &'static str,
    parent: Option<&'static str>,
    fields: BTreeMap<String, String>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let parent = ctx.span(id).and_then(|s| s.parent()).map(|p| p.name());
        self.0.lock().unwrap().push(Seen {
            id: id.into_u64(),
            name: attrs.metadata().name(),
            parent,
            fields,
        });
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, _: Context<'_, S>) {
        let mut spans = self.0.lock().unwrap();
        if let Some(seen) = spans.iter_mut().rev().find(|s| s.id == id.into_u64()) {
            values.record(&mut Fields(&mut seen.fields));
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn runs_and_steps_are_spans_that_never_carry_the_task_id() {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(
        spans
            .clone()
            .with_filter(tracing_subscriber::filter::LevelFilter::DEBUG),
    );
    let _default = tracing::subscriber::set_default(subscriber);

    let engine = Engine::builder(MemoryStore::new())
        .registry(Registry::new().with(two_runs_tool()).unwrap())
        // The sleep parks, so that a second run replays the step.
        .sleep_in_process_up_to(Duration::ZERO)
        .start()
        .await
        .unwrap();
    let CallOutcome::Task(task) = engine
        .call(Call::new("two_runs", serde_json::Map::new()))
        .await
        .unwrap()
    else {
        panic!("a task")
    };
    let done = engine
        .wait(&task.id, None, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.status.as_str(), "completed");

    let spans = spans.0.lock().unwrap().clone();
    let runs: Vec<&Seen> = spans.iter().filter(|s| s.name == "task_run").collect();
    let exits: Vec<&str> = runs.iter().map(|r| r.fields["exit"].as_str()).collect();
    assert_eq!(exits, ["asleep", "done"], "{runs:#?}");
    for run in &runs {
        assert_eq!(run.fields["tool"], "two_runs");
        assert_eq!(run.fields["task"], task.id[..8], "a prefix of the id");
        assert!(run.fields["attempt"].parse::<u64>().unwrap() >= 1);
    }
    let steps: Vec<(String, String, String)> = spans
        .iter()
        .filter(|s| s.name == "step")
        .map(|s| {
            assert_eq!(s.parent, Some("task_run"), "{s:?}");
            (
                s.fields["position"].clone(),
                s.fields["name"].clone(),
                s.fields["replayed"].clone(),
            )
        })
        .collect();
    let step = |p: &str, n: &str, r: &str| (p.to_owned(), n.to_owned(), r.to_owned());
    assert_eq!(
        steps,
        [
            step("0", "count", "false"),
            step("1", "sleep", "false"),
            step("0", "count", "true"),
            step("1", "sleep", "true"),
        ]
    );
    let all = format!("{spans:?}");
    assert!(!all.contains(&task.id), "the id never appears: {all}");
}

/// Asks, then finishes.
#[task_tool]
async fn asks() -> Result<String, ToolError> {
    let n = checkpoint("count", || async { Ok(3_u32) }).await?;
    let go = mcp_tasks_runtime::confirm("Go?").await?;
    mcp_tasks_runtime::durable::status("x".repeat(64));
    Ok(format!("{n} {go}"))
}

/// Fails with a tool error.
#[task_tool]
async fn fails() -> Result<String, ToolError> {
    Err(ToolError::new("no such service"))
}

/// Journals a value over the engine's limit.
#[task_tool]
async fn too_big() -> Result<String, ToolError> {
    checkpoint("big", || async { Ok("y".repeat(4096)) }).await
}

/// Waits until cancelled.
#[task_tool]
async fn waits() -> Result<String, ToolError> {
    durable::sleep(Duration::from_secs(3600)).await;
    Ok("woke".into())
}

/// Every event at INFO and above, as text.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<String>>>);

impl<S: Subscriber> Layer<S> for Lines {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.0
            .lock()
            .unwrap()
            .push(format!("{} {fields:?}", event.metadata().level()));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn nothing_logged_at_info_or_above_names_a_task_by_its_id() {
    let lines = Lines::default();
    let subscriber = tracing_subscriber::registry().with(
        lines
            .clone()
            .with_filter(tracing_subscriber::filter::LevelFilter::INFO),
    );
    let _default = tracing::subscriber::set_default(subscriber);

    let mut limits = mcp_tasks_runtime::engine::Limits::default();
    limits.max_journal_entry_bytes = 1024;
    limits.max_status_message_bytes = 16;
    let dir = tempfile::tempdir().unwrap();
    let store = mcp_tasks_runtime::store::SqliteStore::open(dir.path().join("tasks.db"))
        .await
        .unwrap();
    let registry = Registry::new()
        .with(asks_tool())
        .unwrap()
        .with(fails_tool())
        .unwrap()
        .with(too_big_tool())
        .unwrap()
        .with(waits_tool())
        .unwrap();
    let engine = Engine::builder(store)
        .registry(registry)
        .limits(limits)
        .start()
        .await
        .unwrap();
    let start = |name: &'static str| {
        let engine = engine.clone();
        async move {
            let caps = mcp_tasks_runtime::question::InputCapabilities::ALL;
            match engine
                .call(Call::new(name, serde_json::Map::new()).capabilities(caps))
                .await
                .unwrap()
            {
                CallOutcome::Task(task) => task.id,
                other => panic!("a task: {other:?}"),
            }
        }
    };
    let wait = |id: String, until: &'static str| {
        let engine = engine.clone();
        async move {
            let mut seen = None;
            for _ in 0..400 {
                let t = engine.get(&id, None).await.unwrap();
                if t.status.as_str() == until {
                    return t;
                }
                seen = Some(t);
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            panic!("task never reached {until}: {seen:?}")
        }
    };

    let mut ids = Vec::new();
    let asked = start("asks").await;
    let parked = wait(asked.clone(), "input_required").await;
    let key = parked.pending[0].key.clone();
    let mut answer = serde_json::Map::new();
    answer.insert(
        key,
        serde_json::json!({"action": "accept", "content": {"confirm": true}}),
    );
    engine.update(&asked, answer, None).await.unwrap();
    wait(asked.clone(), "completed").await;
    ids.push(asked);

    let failed = start("fails").await;
    wait(failed.clone(), "completed").await;
    ids.push(failed);

    let big = start("too_big").await;
    wait(big.clone(), "failed").await;
    ids.push(big);

    let cancelled = start("waits").await;
    wait(cancelled.clone(), "working").await;
    engine.cancel(&cancelled, None).await.unwrap();
    wait(cancelled.clone(), "cancelled").await;
    ids.push(cancelled);

    let lines = lines.0.lock().unwrap().clone();
    assert!(
        lines.iter().any(|l| l.contains("statusMessage cut")),
        "the workload logged at WARN: {lines:#?}"
    );
    // A tool error is stored `completed`, and its end is logged as a tool
    // error; a task that really completed, as completed.
    let ended = |id: &str, status: &str| {
        lines.iter().any(|l| {
            l.contains("task ended")
                && l.contains(&id[..8])
                && l.contains(&format!("\"status\": \"{status}\""))
        })
    };
    assert!(ended(&ids[1], "tool_error"), "{lines:#?}");
    assert!(ended(&ids[0], "completed"), "{lines:#?}");
    for id in &ids {
        for line in &lines {
            assert!(!line.contains(id.as_str()), "a task id at INFO+: {line}");
        }
    }
}
