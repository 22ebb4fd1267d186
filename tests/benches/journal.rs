//! Resume time against journal length: a task whose journal will hold N
//! entries (1,000, 10,000 and 100,000; 100 and 1,000 in a tiny run) is left
//! `working` with no lease and N − 1 checkpoint values journaled, as a crash
//! leaves it; an engine starts on the store, claims it, loads its journal,
//! replays the N − 1 steps (no step's closure runs) and parks it on the
//! question that follows, the N-th entry. At 100,000 that is a journal at
//! the default `Limits::max_journal_entries`. The
//! figure is the time from `start()` until the task is `input_required`,
//! which is also what each resume of a long task costs: a run always
//! replays its journal from position 0.
//!
//! In this process (no HTTP), on SQLite `FULL` (a real file) and on
//! Postgres (skipped, saying so, when no server answers). The journal is
//! written through the store's API (`create_with_journal`), not by running
//! the steps. It also prints this process's peak resident memory after each
//! level (`VmHWM`), which includes every level before.
//!
//! `cargo bench -p mcp-tasks-tests --bench journal`;
//! `MCP_TASKS_BENCH_QUICK=1` stops at 10,000; without `--bench`
//! (`cargo test --benches`) it runs tiny. Prints figures; asserts nothing
//! about speed.

mod support;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use mcp_tasks_runtime::{
    Elicit, Engine, ToolError, ask_user, checkpoint,
    store::{JournalEntry, StepKind, Store, TaskRecord, TaskStatus},
    task_tool,
    tool::Registry,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use support::{Size, StoreArgs, open_store, pg, selected};

/// The question after the steps.
#[derive(Deserialize, JsonSchema, Elicit)]
struct Go {
    /// Go on?
    go: bool,
}

/// `steps` checkpoints, then a question.
#[task_tool]
async fn long_journal(
    /// How many checkpoints.
    steps: u32,
) -> Result<u32, ToolError> {
    for i in 0..steps {
        let _: u32 = checkpoint(
            format!("s{i}"),
            move || async move { Ok::<_, ToolError>(i) },
        )
        .await?;
    }
    let answer = ask_user::<Go>("Go on?")
        .key("go")
        .await
        .map_err(|e| ToolError::new(e.to_string()))?;
    Ok(if answer.go { steps } else { 0 })
}

/// This process's peak resident memory, in MiB.
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// A `working` task of `long_journal` whose journal holds `n` − 1 steps:
/// its question will be the `n`-th entry.
async fn left_with_journal(store: &dyn Store, id: &str, n: u32) {
    let now_ms = support::unix_ms();
    let mut task = TaskRecord::new(id, "long_journal", now_ms);
    let n = n - 1;
    task.arguments.insert("steps".into(), json!(n));
    task.status = TaskStatus::Working;
    // Created by a client that answers forms.
    task.client_capabilities.elicitation = true;
    let journal = (0..n)
        .map(|i| JournalEntry {
            position: i,
            kind: StepKind::Checkpoint,
            name: format!("s{i}"),
            value: json!(i),
        })
        .collect();
    store
        .create_with_journal(task, journal)
        .await
        .expect("a task with its journal");
}

/// Resumes a task of `n` journaled steps on `store`; the time until it is
/// parked again, in ms.
async fn resume(store: Arc<dyn Store>, n: u32) -> f64 {
    let id = format!("long{n}");
    left_with_journal(store.as_ref(), &id, n).await;
    let began = Instant::now();
    let engine = Engine::builder_arc(store)
        .registry(Registry::new().with(long_journal_tool()).unwrap())
        .scan_interval(Duration::from_millis(1))
        .start()
        .await
        .expect("the engine starts");
    loop {
        let t = engine.get(&id, None).await.expect("the task");
        match t.status {
            TaskStatus::InputRequired => break,
            TaskStatus::Working => tokio::time::sleep(Duration::from_micros(200)).await,
            other => panic!("the task ended {other:?}: {t:?}"),
        }
    }
    let ms = began.elapsed().as_secs_f64() * 1e3;
    engine.shutdown().await.expect("the engine stops");
    ms
}

/// Measures each length on the store `store(n)` names, and prints the
/// table.
async fn run(name: &str, lengths: &[u32], store: impl Fn(u32) -> StoreArgs) {
    println!("\n[{name}]");
    println!("| journal entries | resume until parked | per entry | peak RSS of this process |");
    println!("|---:|---:|---:|---:|");
    let mut first: Option<f64> = None;
    for &n in lengths {
        let ms = resume(open_store(&store(n)).await, n).await;
        let base = *first.get_or_insert(ms);
        println!(
            "| {n} | {ms:.1} ms ({:.2}×) | {:.2} µs | {:.1} MiB |",
            ms / base,
            ms * 1e3 / f64::from(n),
            peak_rss_mib()
        );
    }
}

#[tokio::main]
async fn main() {
    let size = Size::from_args();
    let lengths: &[u32] = size.pick(&[100, 1_000], &[1_000, 10_000], &[1_000, 10_000, 100_000]);
    println!(
        "resume time against journal length, in this process ({} CPUs; {} build; {size:?} run: {lengths:?})",
        support::cpus(),
        support::profile(),
    );
    let dir = tempfile::tempdir().unwrap();
    if selected("sqlite") {
        run("SQLite FULL", lengths, |n| {
            StoreArgs::Sqlite(dir.path().join(format!("journal-{n}.db")))
        })
        .await;
    }
    if selected("postgres")
        && let Some(url) = pg::server_or_skip().await
    {
        let schema = pg::Schema::new(&url);
        run("Postgres", lengths, |_| schema.store()).await;
        drop(schema);
    }
}
