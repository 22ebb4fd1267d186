//! Several instances on one store, as real processes: the examples started
//! with `--store postgres://…` (or one SQLite file), `--instance`, `--lease`
//! and `--scan-interval`, killed with SIGKILL, stopped with SIGSTOP, and
//! counted from outside.
//!
//! The counting uses the test-only `fleet-fixture` server: its `steps` tool
//! runs checkpoints whose effects append `begin`/`end` lines to a file, and
//! its result names the attempt of each step that was journaled. From those,
//! [`Tally`] checks that every journaled checkpoint's effect happened exactly
//! once, that no step began again once its value was journaled, and that no
//! task ran on two instances at once.
//!
//! The Postgres tests use `MCP_TASKS_POSTGRES_URL`, or
//! `postgres://postgres@127.0.0.1:5432/postgres`; each makes a schema of its
//! own and drops it at the end. When the server cannot be reached, they fail
//! if `CI` is set, and otherwise print `SKIPPED: …` and pass.
//!
//! The soak runs 60 tasks; `MCP_TASKS_SOAK_TASKS=1000` runs the full soak
//! (`cargo test -p mcp-tasks-tests --test fleet soak -- --nocapture` to see
//! its counts).
//!
//! The tests run one at a time (they measure takeovers, which a loaded
//! machine slows down). Every process started here is in a process group of
//! its own, killed when its guard drops, and every wait is bounded.

mod common;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    sync::Mutex,
    thread,
    time::{Duration, Instant},
};

use common::{
    Client, call,
    effects::{
        Attempt, Effect, Tally, completed, get, poll, read_effects, start_steps, steps_result,
        wait_for,
    },
    http_client, is_terminal,
    process::{self, ServerProcess, StoreArgs},
    task_id, update,
};
use rmcp::model::{DetailedTask, TaskPayload, TaskStatus};
use serde_json::{Value, json};

/// The lease the instances run with: short, so takeovers are quick.
const LEASE: Duration = Duration::from_secs(1);
/// How often the instances look for claimable tasks.
const SCAN: Duration = Duration::from_millis(100);
/// What a takeover may take beyond lease + scan on a loaded 2-core machine.
const SLACK: Duration = Duration::from_secs(3);

// ---------------------------------------------------------------------------
// The tests.

/// A task created on A is polled and answered on B; both see its result.
#[test]
fn two_instances_share_one_postgres_database() {
    serial(
        "two_instances_share_one_postgres_database",
        |store, _| async move {
            let a = conformance_instance(&store, "a");
            let b = conformance_instance(&store, "b");
            let on_a = http_client(&a.url, true).await;
            let on_b = http_client(&b.url, true).await;

            let id = task_id(
                on_a.call_tool_once(call("confirm_delete", json!({"filename": "shared.txt"})))
                    .await
                    .expect("tools/call on A"),
            );
            let parked = poll(&on_b, &id, Duration::from_secs(15), |t| {
                t.status() == TaskStatus::InputRequired
            })
            .await;
            let TaskPayload::InputRequired { input_requests } = &parked.payload else {
                panic!("B sees no question: {parked:?}")
            };
            assert_eq!(input_requests.keys().collect::<Vec<_>>(), ["confirm"]);

            update(
                &on_b,
                &id,
                json!({"confirm": {"action": "accept", "content": {"confirm": true}}}),
            )
            .await;
            let expected = "confirm_delete(shared.txt): confirmed = true";
            for (name, client) in [("B", &on_b), ("A", &on_a)] {
                let done = poll(client, &id, Duration::from_secs(15), is_terminal).await;
                assert_eq!(text(&done), expected, "the result as {name} sees it");
            }
        },
    );
}

/// A is killed in the middle of a task; B finishes it from the last
/// checkpoint within the lease (plus a scan), and no journaled checkpoint's
/// effect runs twice.
#[test]
fn sigkill_mid_task_hands_it_over_from_the_last_checkpoint() {
    serial("sigkill_mid_task", |store, dir| async move {
        let effects = dir.join("effects.log");
        let a = fixture_instance(&store, "a", &effects);
        let b = fixture_instance(&store, "b", &effects);
        let on_a = http_client(&a.url, true).await;
        let on_b = http_client(&b.url, true).await;

        let id = start_steps(&on_a, "t", 8, 300).await;
        // A step begins only once the one before it is journaled, so A's
        // fourth `begin` means its first three steps are on record. (Its
        // third `end` would not: A may die between an effect's end and the
        // journal write that records it.)
        wait_for(&effects, Duration::from_secs(15), |e| {
            e.iter().filter(|e| e.is("begin", "a")).count() >= 4
        });
        drop(on_a);
        a.kill();
        let killed = Instant::now();
        wait_for(&effects, LEASE + SCAN + SLACK, |e| {
            e.iter().any(|e| e.is("begin", "b"))
        });
        let takeover = killed.elapsed();

        let done = poll(&on_b, &id, Duration::from_secs(20), is_terminal).await;
        let result = steps_result(&done);
        assert_eq!(result["finished_by"], "b");
        let tally = Tally::check(&read_effects(&effects), std::slice::from_ref(&result));
        let by_a = tally.journaled_by("a");
        assert!(by_a >= 3, "A's finished steps were kept: {tally:?}");
        assert_eq!(by_a + tally.journaled_by("b"), 8, "{tally:?}");
        assert!(
            tally.abandoned.iter().all(|a| a.instance == "a") && tally.abandoned.len() <= 1,
            "only the step A was in when it died may have run without being journaled: {tally:?}"
        );
        eprintln!(
            "sigkill: takeover after {takeover:?} (lease {LEASE:?}, scan {SCAN:?}); \
             {by_a} steps by A, {} by B, {} abandoned",
            8 - by_a,
            tally.abandoned.len()
        );
    });
}

/// A is stopped until its lease lapses; B takes the task over; A is let go
/// again. A's writes are refused and it starts no further step; the result is
/// B's.
#[test]
fn a_stopped_instance_is_fenced_out_after_its_lease_lapses() {
    serial(
        "a_stopped_instance_is_fenced_out",
        |store, dir| async move {
            let effects = dir.join("effects.log");
            let a = fixture_instance(&store, "a", &effects);
            let b = fixture_instance(&store, "b", &effects);
            let on_a = http_client(&a.url, true).await;
            let on_b = http_client(&b.url, true).await;

            let id = start_steps(&on_a, "t", 8, 400).await;
            wait_for(&effects, Duration::from_secs(15), |e| {
                e.iter().filter(|e| e.is("end", "a")).count() >= 2
                    && e.last().is_some_and(|e| e.is("begin", "a"))
            });
            a.signal("STOP");
            let stopped_at = read_effects(&effects).len();
            wait_for(&effects, LEASE + SCAN + SLACK, |e| {
                e.iter().any(|e| e.is("begin", "b"))
            });
            a.signal("CONT");

            let done = poll(&on_b, &id, Duration::from_secs(20), is_terminal).await;
            let result = steps_result(&done);
            assert_eq!(result["finished_by"], "b", "the result is B's");
            let seen_by_a = poll(&on_a, &id, Duration::from_secs(5), is_terminal).await;
            assert_eq!(steps_result(&seen_by_a), result, "A sees B's result");

            // Give A time to do whatever it would still do.
            thread::sleep(LEASE);
            let all = read_effects(&effects);
            let late: Vec<&Effect> = all[stopped_at..]
                .iter()
                .filter(|e| e.instance == "a")
                .collect();
            assert!(
                late.iter().all(|e| e.kind == "end") && late.len() <= 1,
                "after SIGCONT, A at most finishes the effect it was in, and begins no step: {late:?}"
            );
            let tally = Tally::check(&all, &[result]);
            assert_eq!(
                tally.abandoned.len(),
                1,
                "the step A was in when stopped was done again by B: {tally:?}"
            );
            eprintln!(
                "sigstop: {} steps by A, {} by B; A's late effects: {}",
                tally.journaled_by("a"),
                tally.journaled_by("b"),
                late.len()
            );
        },
    );
}

/// A is frozen (SIGSTOP) inside a step until its lease lapses; B takes the
/// task over and runs that step; A is let go (SIGCONT). A's step is dropped
/// at its next `.await`, before its work goes on: A never writes the step's
/// second effect, B writes it once, and both attempts saw the same step key.
/// B's step outlasts the lease three times: a step whose lease is renewed
/// runs to its end.
#[test]
fn a_frozen_instance_drops_the_step_it_was_in_when_it_wakes() {
    serial(
        "a_frozen_instance_drops_the_step",
        |store, dir| async move {
            let effects = dir.join("effects.log");
            let a = fixture_instance(&store, "a", &effects);
            let b = fixture_instance(&store, "b", &effects);
            let on_a = http_client(&a.url, true).await;
            let on_b = http_client(&b.url, true).await;

            let step_ms = 3 * u64::try_from(LEASE.as_millis()).expect("a short lease");
            let id = start_steps(&on_a, "t", 1, step_ms).await;
            wait_for(&effects, Duration::from_secs(15), |e| {
                e.iter().any(|e| e.is("begin", "a"))
            });
            a.signal("STOP");
            wait_for(&effects, LEASE + SCAN + SLACK + LEASE * 3, |e| {
                e.iter().any(|e| e.is("end", "b"))
            });
            a.signal("CONT");
            let done = poll(&on_b, &id, Duration::from_secs(20), is_terminal).await;
            assert_eq!(steps_result(&done)["finished_by"], "b", "the result is B's");

            // A wakes: its step's timer is long past. A runs a task of its own
            // to its end afterwards, so it has polled the stale step by then.
            let probe = start_steps(&on_a, "probe", 1, 10).await;
            let probed = poll(&on_a, &probe, Duration::from_secs(20), is_terminal).await;
            assert_eq!(steps_result(&probed)["finished_by"], "a");

            let text = std::fs::read_to_string(&effects).expect("the effects file");
            let lines: Vec<Vec<&str>> = text
                .lines()
                .map(|l| l.split(' ').collect::<Vec<_>>())
                .filter(|w| w.get(1) == Some(&"t"))
                .collect();
            let by = |kind: &str, who: &str| -> Vec<&Vec<&str>> {
                lines
                    .iter()
                    .filter(|w| w[0] == kind && w[3].starts_with(&format!("{who}.")))
                    .collect()
            };
            assert_eq!(by("begin", "a").len(), 1, "A began the step once: {text}");
            assert!(
                by("end", "a").is_empty(),
                "A, woken past its lease, does not go on with the step: {text}"
            );
            assert_eq!(by("begin", "b").len(), 1, "B ran the step once: {text}");
            assert_eq!(by("end", "b").len(), 1, "B ran the step once: {text}");
            let key = by("begin", "a")[0][4];
            assert_eq!(key, by("begin", "b")[0][4], "one step, one key: {text}");
            assert_eq!(
                key,
                format!("{id}:0"),
                "the key is the task and the position"
            );
        },
    );
}

/// A rolling restart: A gets SIGTERM in the middle of a task, releases its
/// lease as it exits, and B carries the task on at once, long before the
/// lease (30 s here) would have run out.
#[test]
fn sigterm_hands_tasks_over_without_waiting_for_the_lease() {
    serial("sigterm_hands_tasks_over", |store, dir| async move {
        let effects = dir.join("effects.log");
        let long = Duration::from_secs(30);
        let a = fixture_instance_leasing(&store, "a", &effects, long);
        let b = fixture_instance_leasing(&store, "b", &effects, long);
        let on_a = http_client(&a.url, true).await;
        let on_b = http_client(&b.url, true).await;

        let id = start_steps(&on_a, "t", 6, 300).await;
        // A's third `begin`: its first two steps are journaled.
        wait_for(&effects, Duration::from_secs(15), |e| {
            e.iter().filter(|e| e.is("begin", "a")).count() >= 3
        });
        drop(on_a);
        let status = a.terminate(Duration::from_secs(10));
        assert!(status.success(), "A exits cleanly on SIGTERM: {status}");
        let terminated = Instant::now();
        wait_for(&effects, SCAN + SLACK, |e| {
            e.iter().any(|e| e.is("begin", "b"))
        });
        let handover = terminated.elapsed();

        let done = poll(&on_b, &id, Duration::from_secs(20), is_terminal).await;
        let result = steps_result(&done);
        assert_eq!(result["finished_by"], "b");
        let tally = Tally::check(&read_effects(&effects), std::slice::from_ref(&result));
        assert!(tally.journaled_by("a") >= 2, "{tally:?}");
        assert!(tally.abandoned.len() <= 1, "{tally:?}");
        eprintln!(
            "sigterm: B carried on {handover:?} after A exited (lease {long:?}); \
             {} steps by A, {} by B",
            tally.journaled_by("a"),
            tally.journaled_by("b")
        );
    });
}

/// Two processes on one SQLite file, both taking tasks; one is killed half
/// way. No task runs on both, and every journaled effect happened once.
#[test]
fn two_processes_on_one_sqlite_file_never_run_a_task_twice() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = StoreArgs::Sqlite(dir.path().join("tasks.db"));
    let effects = dir.path().join("effects.log");
    runtime().block_on(async {
        let a = fixture_instance(&store, "a", &effects);
        let b = fixture_instance(&store, "b", &effects);
        let on_a = http_client(&a.url, true).await;
        let on_b = http_client(&b.url, true).await;

        let mut ids = Vec::new();
        for n in 0..20 {
            let client = if n % 2 == 0 { &on_a } else { &on_b };
            ids.push(start_steps(client, &format!("t{n}"), 5, 150).await);
        }
        wait_for(&effects, Duration::from_secs(15), |e| {
            e.iter().filter(|e| e.is("end", "a")).count() >= 10
        });
        drop(on_a);
        a.kill();

        let mut results = Vec::new();
        for id in &ids {
            let done = poll(&on_b, id, Duration::from_secs(30), is_terminal).await;
            results.push(steps_result(&done));
        }
        let tally = Tally::check(&read_effects(&effects), &results);
        assert_eq!(tally.steps, 100, "{tally:?}");
        assert!(
            tally.abandoned.iter().all(|a| a.instance == "a"),
            "only the killed process left steps unjournaled: {tally:?}"
        );
        eprintln!(
            "sqlite: {} tasks, {} steps ({} by A, {} by B), {} abandoned by the killed process",
            tally.tasks,
            tally.steps,
            tally.journaled_by("a"),
            tally.journaled_by("b"),
            tally.abandoned.len()
        );
    });
}

/// The soak: three instances on one Postgres schema, tasks with checkpoints
/// created in waves, and a random instance killed with SIGKILL every one to
/// three seconds, in the middle of a wave's work, and started again (under a
/// new name). At the end every task
/// is completed, and every checkpoint's effect was recorded exactly once.
///
/// 60 tasks by default; set `MCP_TASKS_SOAK_TASKS` (e.g. `1000`) for more.
#[test]
fn soak_three_instances_with_random_sigkills() {
    let tasks: usize = std::env::var("MCP_TASKS_SOAK_TASKS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(60);
    serial("soak", |store, dir| async move {
        soak(&store, &dir.join("effects.log"), tasks).await;
    });
}

async fn soak(store: &StoreArgs, effects: &Path, tasks: usize) {
    const STEPS: u32 = 5;
    const STEP_MS: u64 = 400;
    const WAVES: usize = 8;
    let started = Instant::now();
    // Generous for 1,000 tasks; about 20 s for 60.
    let budget = Duration::from_secs(60) + Duration::from_millis(200) * tasks as u32;
    let mut rng = Rng::seeded();
    let mut generation = [0u32; 3];
    let mut slots: Vec<(Instance, Client)> = Vec::new();
    for slot in 0..3 {
        slots.push(start_slot(store, effects, slot, 0).await);
    }
    let mut killed: BTreeSet<String> = BTreeSet::new();
    let mut ids: Vec<String> = Vec::new();
    let mut results: BTreeMap<String, Value> = BTreeMap::new();
    let per_wave = tasks.div_ceil(WAVES);

    loop {
        assert!(
            started.elapsed() < budget,
            "the soak did not finish within {budget:?}: {} of {tasks} tasks created, {} finished",
            ids.len(),
            results.len()
        );
        // A wave of new tasks, spread over the instances.
        for _ in 0..per_wave.min(tasks - ids.len()) {
            let (_, client) = &slots[rng.below(3)];
            let tag = format!("t{}", ids.len());
            ids.push(start_steps(client, &tag, STEPS, STEP_MS).await);
        }
        // Into the wave's work, kill one instance, and start it again.
        tokio::time::sleep(Duration::from_millis(300 + 100 * rng.below(13) as u64)).await;
        let slot = rng.below(3);
        let (instance, client) = slots.remove(slot);
        drop(client);
        killed.insert(slot_name(slot, generation[slot]));
        instance.kill();
        generation[slot] += 1;
        slots.insert(
            slot,
            start_slot(store, effects, slot, generation[slot]).await,
        );
        tokio::time::sleep(Duration::from_millis(300 + 100 * rng.below(13) as u64)).await;
        // Collect what finished, through an instance that is up.
        for id in &ids {
            if results.contains_key(id) {
                continue;
            }
            let t = get(&slots[rng.below(3)].1, id).await;
            if t.status().is_terminal() {
                results.insert(id.clone(), steps_result(&t));
            }
        }
        if results.len() == tasks {
            break;
        }
    }
    let elapsed = started.elapsed();

    let results: Vec<Value> = results.into_values().collect();
    let tally = Tally::check(&read_effects(effects), &results);
    assert_eq!(tally.tasks, tasks);
    assert_eq!(tally.steps, tasks * STEPS as usize);
    let unexplained: Vec<&Attempt> = tally
        .abandoned
        .iter()
        .filter(|a| !killed.contains(&a.instance))
        .collect();
    assert!(
        unexplained.is_empty(),
        "steps left unjournaled by instances that were never killed: {unexplained:?}"
    );
    let moved = results
        .iter()
        .filter(|r| {
            let by: BTreeSet<&str> = r["nonces"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n.as_str()?.rsplit_once('.').map(|(i, _)| i))
                .collect();
            by.len() > 1
        })
        .count();
    eprintln!(
        "soak: {} tasks, all completed; {} checkpoints, each effect recorded exactly once; \
         {} kills (-9), {moved} tasks moved between instances, {} effects of unjournaled \
         attempts (all by killed instances); {elapsed:.1?}",
        tally.tasks,
        tally.steps,
        killed.len(),
        tally.abandoned.len()
    );
}

/// The name of instance `slot` in its `generation`-th life.
fn slot_name(slot: usize, generation: u32) -> String {
    format!("s{slot}g{generation}")
}

/// Starts instance `slot` (its `generation`-th life) and a client on it.
async fn start_slot(
    store: &StoreArgs,
    effects: &Path,
    slot: usize,
    generation: u32,
) -> (Instance, Client) {
    let instance = fixture_instance(store, &slot_name(slot, generation), effects);
    let client = http_client(&instance.url, true).await;
    (instance, client)
}

fn text(t: &DetailedTask) -> String {
    completed(t)["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

// ---------------------------------------------------------------------------
// Processes.

/// An instance of the fleet: an example server process.
type Instance = ServerProcess;

/// The conformance example as instance `name`.
fn conformance_instance(store: &StoreArgs, name: &str) -> Instance {
    start_instance(common::bin("conformance"), store, name, None, LEASE)
}

/// The fleet fixture as instance `name`, counting its effects in `effects`.
fn fixture_instance(store: &StoreArgs, name: &str, effects: &Path) -> Instance {
    fixture_instance_leasing(store, name, effects, LEASE)
}

fn fixture_instance_leasing(
    store: &StoreArgs,
    name: &str,
    effects: &Path,
    lease: Duration,
) -> Instance {
    let bin = common::bin("fleet-fixture");
    start_instance(bin, store, name, Some(effects), lease)
}

fn start_instance(
    bin: &str,
    store: &StoreArgs,
    name: &str,
    effects: Option<&Path>,
    lease: Duration,
) -> Instance {
    let args = process::instance_args(name, lease, SCAN);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ServerProcess::start(bin, store, &args, effects, Duration::from_secs(20))
}

// ---------------------------------------------------------------------------
// Running the tests one at a time, each on a schema of its own.

static SERIAL: Mutex<()> = Mutex::new(());

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Runs `test` alone, on a Postgres schema of its own (dropped afterwards)
/// and a temporary directory; skipped (loudly) when Postgres is not
/// reachable and `CI` is not set.
fn serial<F, Fut>(name: &str, test: F)
where
    F: FnOnce(StoreArgs, PathBuf) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let runtime = runtime();
    let Some(url) = runtime.block_on(pg::server_or_skip(name)) else {
        return;
    };
    let schema = pg::Schema::new(&url, "mcp_tasks_fleet");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = StoreArgs::Postgres {
        url: schema.url(),
        schema: schema.name().to_owned(),
    };
    runtime.block_on(test(store, dir.path().to_owned()));
    drop(runtime);
    drop(schema);
}

/// A small pseudo-random generator (xorshift), seeded from the clock; the
/// seed is printed so that a run can be told apart from another.
struct Rng(u64);

impl Rng {
    fn seeded() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1;
        eprintln!("soak seed: {seed}");
        Self(seed)
    }

    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Finding the Postgres server, and a schema per test: the runtime's test
/// kit (features `testing` and `postgres`).
mod pg {
    /// The server's URL; `None` (after saying so on stderr) when it cannot
    /// be reached. With `CI` set, an unreachable server panics.
    pub(crate) use mcp_tasks_runtime::store::testing::postgres_server_or_skip as server_or_skip;

    /// A test's schema, dropped with everything in it when this drops.
    pub(crate) type Schema = mcp_tasks_runtime::store::testing::PostgresSchema;
}
