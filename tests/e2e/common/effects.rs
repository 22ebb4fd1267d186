//! The fleet fixture's `steps` tool, counted from outside: its effects
//! file (`begin`/`end` lines), and [`Tally`], which checks them against the
//! tasks' results (tests/e2e/fleet.rs, tests/e2e/db_faults.rs).

use std::{
    collections::BTreeSet,
    path::Path,
    thread,
    time::{Duration, Instant},
};

use rmcp::model::{DetailedTask, GetTaskParams, TaskPayload};
use serde_json::{Value, json};

use super::{Client, call, task_id};

/// One line of the effects file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    /// `begin` or `end`.
    pub kind: String,
    pub tag: String,
    pub step: u32,
    pub nonce: String,
    /// The instance that ran it (the nonce's prefix).
    pub instance: String,
}

impl Effect {
    pub fn is(&self, kind: &str, instance: &str) -> bool {
        self.kind == kind && self.instance == instance
    }
}

pub fn read_effects(path: &Path) -> Vec<Effect> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let mut words = line.split(' ');
            let (kind, tag, step, nonce) =
                (words.next()?, words.next()?, words.next()?, words.next()?);
            let (instance, _) = nonce.rsplit_once('.')?;
            Some(Effect {
                kind: kind.to_owned(),
                tag: tag.to_owned(),
                step: step.parse().ok()?,
                nonce: nonce.to_owned(),
                instance: instance.to_owned(),
            })
        })
        .collect()
}

/// Waits until the effects file satisfies `done`, for at most `within`.
pub fn wait_for(path: &Path, within: Duration, done: impl Fn(&[Effect]) -> bool) {
    let deadline = Instant::now() + within;
    loop {
        let effects = read_effects(path);
        if done(&effects) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the effects never got there within {within:?}: {effects:#?}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// An effect whose value was not journaled: its run died or lost the task
/// before recording it, and the step ran again elsewhere.
#[derive(Debug)]
#[allow(dead_code, reason = "read through `Debug`, in failure messages")]
pub struct Attempt {
    pub tag: String,
    pub step: u32,
    pub instance: String,
    /// Whether its `end` line was written.
    pub ended: bool,
}

/// What the effects file and the tasks' results say together.
#[derive(Debug)]
pub struct Tally {
    pub tasks: usize,
    /// Journaled checkpoints.
    pub steps: usize,
    /// The instance of each journaled checkpoint.
    pub journaled: Vec<String>,
    pub abandoned: Vec<Attempt>,
}

impl Tally {
    /// Checks the effects against the results (of `steps` calls), panicking
    /// on any effect of a journaled checkpoint that did not happen exactly
    /// once, any step begun again after its value was recorded, and any task
    /// whose steps ran on one instance, then another, then the first again.
    pub fn check(effects: &[Effect], results: &[Value]) -> Self {
        let mut tally = Self {
            tasks: results.len(),
            steps: 0,
            journaled: Vec::new(),
            abandoned: Vec::new(),
        };
        let mut journaled_nonces = BTreeSet::new();
        for result in results {
            let tag = result["tag"].as_str().expect("a tag");
            let nonces = result["nonces"].as_array().expect("nonces");
            for (step, nonce) in nonces.iter().enumerate() {
                let nonce = nonce.as_str().expect("a nonce");
                let step = u32::try_from(step).expect("few steps");
                let lines: Vec<(usize, &Effect)> = effects
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| e.nonce == nonce)
                    .collect();
                let kinds: Vec<&str> = lines.iter().map(|(_, e)| e.kind.as_str()).collect();
                assert_eq!(
                    kinds,
                    ["begin", "end"],
                    "the journaled effect of {tag} step {step} ({nonce}) happened exactly once"
                );
                assert!(
                    lines.iter().all(|(_, e)| e.tag == tag && e.step == step),
                    "{nonce} is the effect of {tag} step {step}: {lines:?}"
                );
                let recorded_at = lines[1].0;
                let again: Vec<&Effect> = effects[recorded_at..]
                    .iter()
                    .filter(|e| e.kind == "begin" && e.tag == tag && e.step == step)
                    .collect();
                assert!(
                    again.is_empty(),
                    "{tag} step {step} began again after {nonce} finished it: {again:?}"
                );
                journaled_nonces.insert(nonce.to_owned());
                tally.steps += 1;
                tally.journaled.push(lines[0].1.instance.clone());
            }
            // Never on two instances at once: the instances that began its
            // steps, in order, each appear in one stretch.
            let mut stretches: Vec<&str> = Vec::new();
            for e in effects.iter().filter(|e| e.kind == "begin" && e.tag == tag) {
                if stretches.last() != Some(&e.instance.as_str()) {
                    assert!(
                        !stretches.contains(&e.instance.as_str()),
                        "{tag} went back to {} after {stretches:?}",
                        e.instance
                    );
                    stretches.push(&e.instance);
                }
            }
        }
        for e in effects.iter().filter(|e| e.kind == "begin") {
            if !journaled_nonces.contains(&e.nonce) {
                tally.abandoned.push(Attempt {
                    tag: e.tag.clone(),
                    step: e.step,
                    instance: e.instance.clone(),
                    ended: effects
                        .iter()
                        .any(|x| x.kind == "end" && x.nonce == e.nonce),
                });
            }
        }
        tally
    }

    /// How many journaled checkpoints `instance` ran.
    pub fn journaled_by(&self, instance: &str) -> usize {
        self.journaled.iter().filter(|i| *i == instance).count()
    }
}

/// Starts `steps` with `tag`; returns the task's id.
pub async fn start_steps(client: &Client, tag: &str, steps: u32, step_ms: u64) -> String {
    task_id(
        client
            .call_tool_once(call(
                "steps",
                json!({"tag": tag, "steps": steps, "step_ms": step_ms}),
            ))
            .await
            .expect("tools/call steps"),
    )
}

pub async fn get(client: &Client, id: &str) -> DetailedTask {
    client
        .peer()
        .get_task(GetTaskParams::new(id.to_owned()))
        .await
        .expect("tasks/get")
        .task
}

/// Polls `tasks/get` until `done`, for at most `within`.
pub async fn poll(
    client: &Client,
    id: &str,
    within: Duration,
    done: impl Fn(&DetailedTask) -> bool,
) -> DetailedTask {
    let deadline = Instant::now() + within;
    loop {
        let t = get(client, id).await;
        if done(&t) {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "task {id} never got there within {within:?}: {t:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A completed task's result.
pub fn completed(t: &DetailedTask) -> &serde_json::Map<String, Value> {
    let TaskPayload::Completed { result } = &t.payload else {
        panic!("expected a completed task, got {t:?}")
    };
    assert_ne!(result.get("isError"), Some(&json!(true)), "{result:?}");
    result
}

/// The structured result of a completed `steps` task.
pub fn steps_result(t: &DetailedTask) -> Value {
    completed(t)["structuredContent"].clone()
}
