//! The operator's view of a task store: what is running, parked or stuck,
//! and why; and the few things an operator may do about it.
//!
//! ```text
//! cargo run --bin tasks -- --store demo.db list
//! cargo run --bin tasks -- --store demo.db list --status input_required --older-than 1h
//! cargo run --bin tasks -- --store postgres://postgres@127.0.0.1/postgres --pg-schema demo show ID
//! cargo run --bin tasks -- --store demo.db cancel ID
//! cargo run --bin tasks -- --store demo.db fail ID --reason "the upstream job was deleted"
//! cargo run --bin tasks -- --store demo.db purge
//! cargo run --bin tasks -- --store demo.db journal ID > task.json
//! cargo run --bin tasks -- --store demo.db migrate
//! ```
//!
//! `journal` prints the task's journal as JSON (always JSON: the runtime's
//! `replay::JournalExport`, as the admin page's `/tasks/{id}/journal.json`
//! serves it), for `ToolTest::replay_journal` to replay in a test. It holds
//! the call's arguments, the users' answers and every step's value in clear
//! (tokens, API replies) and the task id: with `--redact` they are replaced
//! (`JournalExport::redacted`), as an export shared or committed as a test
//! fixture should be; put back by hand only what the replay needs. The
//! replay check before a deploy needs the new build's tools, so it is not
//! here: run the server binary of that build with `--check-replay`.
//!
//! `list` shows the unfinished tasks of every caller (`--principal NAME`, or
//! `--anonymous` for tasks created without one, shows that caller's finished
//! tasks too; `--all`, every caller's). Every command prints a table, or JSON with `--json`. It works
//! on the store directly, beside running servers: a cancel or a failure goes
//! through the store's state machine, so a server running the task stops it
//! at its next step.
//!
//! `list`, `show` and `journal` open the store read-only: they migrate
//! nothing and write nothing (not a byte of a SQLite file, its `-wal` or
//! its `-shm`), so they can look at a store that servers of an older build
//! run on, and those still start on it afterwards. A store of an older
//! schema is read as it is when this build can, or refused naming
//! `migrate`. `cancel`, `fail` and `purge` write, and only to a store of
//! this build's schema: on an older one they refuse, naming `migrate`.
//! `migrate` is the one command that upgrades a store's schema (as a
//! server of this build does when it starts), printing the versions before
//! and after; servers of an older build refuse the store afterwards.

use std::{
    process::ExitCode,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use clap::{Parser, Subcommand};
use mcp_tasks_runtime::{
    question::InputRequest,
    replay::JournalExport,
    store::{JournalEntry, ListCursor, PURGE_BATCH, Store, TaskRecord, TaskStatus, Transition},
    tool::RpcError,
};
use mcp_tasks_server::StoreLocation;
use serde_json::{Value, json};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Lists, shows, cancels, fails and purges the tasks in a store.
#[derive(Debug, Parser)]
struct Args {
    /// The store: a SQLite file, or a Postgres URL (`postgres://…`).
    #[arg(long)]
    store: String,
    /// The Postgres schema of the tables (default `public`).
    #[arg(long)]
    pg_schema: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Lists tasks: the unfinished ones of every caller, or every task of one.
    List {
        /// Only tasks with this status (`working`, `input_required`,
        /// `completed`, `failed`, `cancelled`); repeatable.
        #[arg(long)]
        status: Vec<String>,
        /// Only tasks of this tool.
        #[arg(long)]
        tool: Option<String>,
        /// Only tasks created at least this long ago (`90s`, `1h`, `2d`).
        #[arg(long, value_parser = humantime::parse_duration)]
        older_than: Option<Duration>,
        /// Every task of this caller, finished ones included.
        #[arg(long, conflicts_with = "anonymous")]
        principal: Option<String>,
        /// Every task created without a caller, finished ones included.
        #[arg(long, conflicts_with = "all")]
        anonymous: bool,
        /// Every task of every caller, finished ones included.
        #[arg(long, conflicts_with = "principal")]
        all: bool,
    },
    /// Shows one task: its state, its outstanding questions and its journal.
    Show {
        /// The task's id.
        id: String,
    },
    /// Cancels a task (a parked or sleeping one at once; a running one at
    /// its next step, wherever it runs).
    Cancel {
        /// The task's id.
        id: String,
    },
    /// Ends a stuck task `failed` with a reason (`-32603`).
    Fail {
        /// The task's id.
        id: String,
        /// Why, as the client will read it.
        #[arg(long)]
        reason: String,
    },
    /// Deletes the tasks whose TTL ran out.
    Purge,
    /// Prints a task's journal as JSON (the export the testing kit's
    /// `replay_journal` replays). It holds arguments, answers and step
    /// values in clear: `--redact` before sharing it or committing it.
    Journal {
        /// The task's id.
        id: String,
        /// Replace the arguments, the answers, the steps' values, the id
        /// and the principal (strings become `"<redacted>"`, numbers 0;
        /// the path and the shape are kept).
        #[arg(long)]
        redact: bool,
    },
    /// Brings the store's schema up to this build's (creating the store if
    /// there is none), as a server of this build does when it starts, and
    /// prints the versions before and after. Servers of an older build
    /// refuse the store afterwards.
    Migrate,
}

impl Command {
    /// Whether the command only reads the store.
    fn reads_only(&self) -> bool {
        matches!(
            self,
            Self::List { .. } | Self::Show { .. } | Self::Journal { .. }
        )
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tasks: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), BoxError> {
    let location = StoreLocation::parse(&args.store, args.pg_schema.clone());
    if location == StoreLocation::Memory {
        return Err(
            "a `memory` store lives inside its server's process: there is nothing here to read"
                .into(),
        );
    }
    if let Command::Migrate = args.command {
        let v = location.migrate().await?;
        if args.json {
            println!("{}", json!({"from": v.found, "to": v.now}));
        } else if v.found < v.now {
            println!("schema version {} -> {}", v.found, v.now);
        } else {
            println!("schema version {}: up to date", v.now);
        }
        return Ok(());
    }
    let store = if args.command.reads_only() {
        // Read-only: no migration, no write, whatever the store's version.
        let (store, versions) = location.clone().open_read_only().await?;
        if let Some(v) = versions
            && v.found < v.latest
        {
            eprintln!(
                "tasks: the store has schema version {}, older than this build's ({}): read as \
                 it is; `{}` upgrades it",
                v.found,
                v.latest,
                location.migrate_command()
            );
        }
        store
    } else {
        location.open_current().await?
    };
    match args.command {
        Command::List {
            status,
            tool,
            older_than,
            principal,
            anonymous,
            all,
        } => {
            let statuses = status
                .iter()
                .map(|s| TaskStatus::parse(s).ok_or_else(|| format!("unknown status `{s}`")))
                .collect::<Result<Vec<_>, _>>()?;
            let mut tasks = if all {
                every_task(&*store, None).await?
            } else if principal.is_some() || anonymous {
                every_task(&*store, Some(principal.as_deref())).await?
            } else {
                store.unfinished().await?
            };
            let now = now_ms();
            tasks.retain(|t| {
                (statuses.is_empty() || statuses.contains(&t.status))
                    && tool.as_ref().is_none_or(|tool| &t.tool == tool)
                    && older_than.is_none_or(|age| now - t.created_at_ms >= millis(age))
            });
            tasks.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
            print_list(&tasks, args.json, now);
        }
        Command::Show { id } => {
            let task = found(&*store, &id).await?;
            let journal = store.journal(&id).await?;
            print_task(&task, &journal, args.json);
        }
        Command::Cancel { id } => {
            found(&*store, &id).await?;
            let after = store
                .transition(&id, Transition::RequestCancel, now_ms(), None)
                .await?;
            report(&*store, &id, after, args.json, "cancel requested").await?;
        }
        Command::Fail { id, reason } => {
            found(&*store, &id).await?;
            let error = RpcError::internal(format!("failed by an operator: {reason}"));
            let after = store
                .transition(&id, Transition::Fail(error), now_ms(), None)
                .await?;
            report(&*store, &id, after, args.json, "failed").await?;
        }
        Command::Journal { id, redact } => {
            let mut export = JournalExport::read(&*store, &id)
                .await?
                .ok_or_else(|| format!("no task {id} (never created, or expired and purged)"))?;
            if redact {
                export = export.redacted();
            }
            println!("{}", serde_json::to_string_pretty(&export)?);
        }
        Command::Migrate => unreachable!("migrated above"),
        Command::Purge => {
            // A batch a transaction, as the engine's sweep does, so that a
            // running server's writes go on between them.
            let now = now_ms();
            let mut purged = 0;
            loop {
                let batch = store.purge_expired(now, PURGE_BATCH).await?.len();
                purged += batch;
                if batch < PURGE_BATCH {
                    break;
                }
            }
            if args.json {
                println!("{}", json!({"purged": purged}));
            } else {
                println!("{purged} expired task(s) purged");
            }
        }
    }
    Ok(())
}

/// Every task of `principal`, page by page.
/// Every task of `caller` (`Some(None)`: those created without one), or of
/// every caller (`None`), finished ones included, page by page.
async fn every_task(
    store: &dyn Store,
    caller: Option<Option<&str>>,
) -> Result<Vec<TaskRecord>, BoxError> {
    let mut all = Vec::new();
    let mut after: Option<ListCursor> = None;
    loop {
        let page = match caller {
            Some(principal) => store.list(principal, after.as_ref(), 500).await?,
            None => store.list_all(after.as_ref(), 500).await?,
        };
        let Some(last) = page.last() else { break };
        after = Some(ListCursor::after(last));
        let full = page.len() == 500;
        all.extend(page);
        if !full {
            break;
        }
    }
    Ok(all)
}

async fn found(store: &dyn Store, id: &str) -> Result<TaskRecord, BoxError> {
    store
        .get(id)
        .await?
        .ok_or_else(|| format!("no task {id} (never created, or expired and purged)").into())
}

/// Prints what a change did: the task as it is now.
async fn report(
    store: &dyn Store,
    id: &str,
    after: Option<TaskRecord>,
    json: bool,
    what: &str,
) -> Result<(), BoxError> {
    let changed = after.is_some();
    let task = match after {
        Some(task) => task,
        None => found(store, id).await?,
    };
    if json {
        println!(
            "{}",
            json!({"id": task.id, "changed": changed, "status": task.status.as_str(),
                   "cancelRequested": task.cancel_requested})
        );
    } else if changed {
        println!("{id}: {what}; now {}", state(&task));
    } else {
        println!("{id}: unchanged ({})", state(&task));
    }
    Ok(())
}

fn state(task: &TaskRecord) -> String {
    let mut s = task.status.as_str().to_owned();
    if task.cancel_requested && !task.status.is_terminal() {
        s.push_str(", cancel requested");
    }
    s
}

fn print_list(tasks: &[TaskRecord], json: bool, now: i64) {
    if json {
        let rows: Vec<Value> = tasks.iter().map(summary).collect();
        println!("{}", Value::Array(rows));
        return;
    }
    let mut rows = vec![[
        "ID".to_owned(),
        "TOOL".to_owned(),
        "STATUS".to_owned(),
        "AGE".to_owned(),
        "PRINCIPAL".to_owned(),
        "MESSAGE".to_owned(),
    ]];
    for t in tasks {
        rows.push([
            t.id.clone(),
            t.tool.clone(),
            state(t),
            age(now - t.created_at_ms),
            t.principal.clone().unwrap_or_else(|| "-".into()),
            truncate(t.status_message.as_deref().unwrap_or(""), 60),
        ]);
    }
    print_table(&rows);
    let mut counts: Vec<(TaskStatus, usize)> = TaskStatus::ALL
        .into_iter()
        .map(|s| (s, tasks.iter().filter(|t| t.status == s).count()))
        .filter(|(_, n)| *n > 0)
        .collect();
    counts.sort_by_key(|(s, _)| TaskStatus::ALL.iter().position(|x| x == s));
    let counts: Vec<String> = counts
        .iter()
        .map(|(s, n)| format!("{n} {}", s.as_str()))
        .collect();
    println!(
        "\n{} task(s){}{}",
        tasks.len(),
        if counts.is_empty() { "" } else { ": " },
        counts.join(", ")
    );
}

fn summary(t: &TaskRecord) -> Value {
    json!({
        "id": t.id,
        "tool": t.tool,
        "status": t.status.as_str(),
        "cancelRequested": t.cancel_requested,
        "principal": t.principal,
        "createdAtMs": t.created_at_ms,
        "updatedAtMs": t.updated_at_ms,
        "statusMessage": t.status_message,
        "owner": t.lease.as_ref().map(|l| &l.owner),
        "wakeAtMs": t.wake_at_ms,
    })
}

fn print_task(task: &TaskRecord, journal: &[JournalEntry], json: bool) {
    if json {
        let mut out = summary(task);
        out["arguments"] = Value::Object(task.arguments.clone());
        out["questions"] = task
            .pending
            .iter()
            .map(|p| {
                json!({"key": p.key, "position": p.position, "kind": p.kind.as_str(),
                             "deadlineMs": p.deadline_ms})
            })
            .collect();
        out["journal"] = journal
            .iter()
            .map(|e| {
                json!({"position": e.position, "kind": e.kind.as_str(), "name": e.name,
                             "value": e.value})
            })
            .collect();
        out["result"] = task.result.clone().map_or(Value::Null, Value::Object);
        out["error"] = serde_json::to_value(&task.error).unwrap_or(Value::Null);
        println!("{out}");
        return;
    }
    let now = now_ms();
    println!("task      {}", visible(&task.id));
    println!("tool      {}", visible(&task.tool));
    println!("status    {}", state(task));
    if let Some(m) = &task.status_message {
        println!("message   {}", visible(m));
    }
    println!(
        "principal {}",
        visible(task.principal.as_deref().unwrap_or("-"))
    );
    println!("created   {} ago", age(now - task.created_at_ms));
    println!("updated   {} ago", age(now - task.updated_at_ms));
    if let Some(at) = task.expires_at_ms() {
        println!("expires   in {}", age(at - now));
    }
    if let Some(lease) = &task.lease {
        println!(
            "running   on {} (lease for {} more, attempt {})",
            visible(&lease.owner),
            age(lease.expires_at_ms - now),
            task.fence
        );
    }
    if let Some(at) = task.wake_at_ms {
        println!("wakes     in {}", age(at - now));
    }
    println!(
        "arguments {}",
        truncate(&Value::Object(task.arguments.clone()).to_string(), 100)
    );
    if let Some(e) = &task.error {
        println!("error     {} ({})", visible(&e.message), e.code);
    }
    if !task.pending.is_empty() {
        println!("\nwaiting on");
        for p in &task.pending {
            let what = match &p.request {
                InputRequest::Form(f) => f.message.clone(),
                InputRequest::Sample(_) => "a completion (sampling)".into(),
                InputRequest::ListRoots => "the client's roots".into(),
                _ => "a request".into(),
            };
            let deadline = p
                .deadline_ms
                .map(|at| format!(" (times out in {})", age(at - now)))
                .unwrap_or_default();
            println!(
                "  {} @{}: {}{deadline}",
                visible(&p.key),
                p.position,
                truncate(&what, 80)
            );
        }
    }
    println!("\njournal");
    let mut rows = vec![[
        "POS".to_owned(),
        "KIND".to_owned(),
        "NAME".to_owned(),
        "VALUE".to_owned(),
    ]];
    for e in journal {
        rows.push([
            e.position.to_string(),
            e.kind.as_str().to_owned(),
            e.name.clone(),
            truncate(&e.value.to_string(), 60),
        ]);
    }
    print_table(&rows);
    if let Some(result) = &task.result {
        println!(
            "\nresult    {}",
            truncate(&Value::Object(result.clone()).to_string(), 100)
        );
    }
}

/// Prints rows as columns padded to their widest cell, every cell written
/// with [`visible`].
fn print_table<const N: usize>(rows: &[[String; N]]) {
    let rows: Vec<[String; N]> = rows
        .iter()
        .map(|r| r.each_ref().map(|c| visible(c)))
        .collect();
    let widths: Vec<usize> = (0..N)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        println!("{}", cells.join("  ").trim_end());
    }
}

/// `s` on one line, written with [`visible`], cut at `max` characters.
fn truncate(s: &str, max: usize) -> String {
    let one_line = visible(s);
    if one_line.chars().count() <= max {
        one_line
    } else {
        let cut: String = one_line.chars().take(max - 1).collect();
        format!("{cut}…")
    }
}

/// `s` with every character a terminal could act on written out as a
/// visible escape, so that text a client chose (arguments, status messages,
/// questions, answers) cannot move the cursor, clear the screen, retitle the
/// window or reorder what follows it: the C0 controls (`\n`, `\r`, `\t`,
/// else `\x1b` and the like), DEL (`\x7f`), the C1 controls and the Unicode
/// bidirectional overrides, embeddings, isolates and marks (`\u{202e}` and
/// the like). `--json` needs none of this: JSON escapes the C0 controls, and
/// what reads it is a program.
fn visible(s: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0'..='\x1f' | '\x7f' => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            '\u{80}'..='\u{9f}'
            | '\u{61c}'
            | '\u{200e}'
            | '\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}' => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// A span of milliseconds, roughly: `42s`, `3m`, `5h`, `2d`.
fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
