//! The official MCP conformance suite (`@modelcontextprotocol/conformance`,
//! pinned in `.ci/conformance.sh`) against the gateway (`mcp-tasks-gateway`)
//! in front of a server written with the official TypeScript SDK
//! (`@modelcontextprotocol/server`, npm, pinned in
//! `tests/e2e/upstreams/package.json`): `tests/e2e/upstreams/conformance_fixtures.mjs`,
//! the suite's fixtures as plain tools, prompts and resources of that SDK,
//! which serves no tasks. The gateway, on a SQLite file, makes the task
//! fixtures durable tasks by its operator's policies, and passes the rest
//! upstream as it comes.
//!
//! Run: the 2026-07-28 requirement set, each `tasks-*` scenario, and the
//! 2025-11-25 requirement set (clients in sessions, to which the gateway
//! asks the upstream's MRTR questions as requests of the session). The
//! fixture that asks before its task exists runs in an inline window. Every
//! check must pass but those listed in [`KNOWN`], each with its reason; a
//! check listed there that passes fails the test too, so the list stays
//! true.

mod common;

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use common::process::ServerProcess;
use serde_json::Value;

/// Checks that fail through the gateway, and why.
const KNOWN: &[(&str, &str)] = &[
    (
        "resources-subscribe",
        "the gateway relays no resource subscriptions (it declares no `resources.subscribe`)",
    ),
    (
        "resources-unsubscribe",
        "the gateway relays no resource subscriptions (it declares no `resources.subscribe`)",
    ),
];

/// The fixtures that run as tasks, and their policies: the suite's
/// `tasks-*` scenarios expect them so (its fixture list; the same as the
/// project's own conformance example registers).
const TASKS: &[(&str, &str)] = &[
    ("slow_compute", "optional"),
    ("protocol_error_job", "optional"),
    ("test_sampling", "optional"),
    ("test_elicitation", "optional"),
    ("test_elicitation_sep1034_defaults", "optional"),
    ("failing_job", "required"),
    ("short_lived", "required"),
    ("confirm_delete", "required"),
    ("run_job", "required"),
    ("multi_input", "required"),
    ("test_tool_with_task", "required"),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The ids of the checks that failed, from every `checks.json` under `dir`.
fn failed_checks(dir: &Path, failed: &mut BTreeSet<String>, read: &mut usize) {
    for entry in std::fs::read_dir(dir).expect("the results folder") {
        let path = entry.expect("a results entry").path();
        if path.is_dir() {
            failed_checks(&path, failed, read);
        } else if path.file_name().is_some_and(|n| n == "checks.json") {
            *read += 1;
            let checks: Value =
                serde_json::from_slice(&std::fs::read(&path).expect("checks.json reads"))
                    .expect("checks.json is JSON");
            for check in checks.as_array().expect("checks.json is a list") {
                if check["status"] == "FAILURE" {
                    failed.insert(check["id"].as_str().unwrap_or("?").to_owned());
                }
            }
        }
    }
}

#[test]
fn the_gateway_in_front_of_a_typescript_server_passes_the_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(common::bin("mcp-tasks-gateway"));
    command
        .args(["--addr", "127.0.0.1:0", "--store"])
        .arg(dir.path().join("gateway.db"))
        .args(["--task-policy", "*=forbidden"])
        // The fixture that asks before its task exists (MRTR, then a task):
        // its upstream's question comes back within the window.
        .args(["--inline-window", "test_tool_with_task=10000"])
        .env("RUST_LOG", "error");
    for (tool, policy) in TASKS {
        command.args(["--task-policy", &format!("{tool}={policy}")]);
    }
    command.arg("--").args(common::upstreams("fixtures"));
    let gateway = ServerProcess::spawn(command, Duration::from_secs(60));
    let results = dir.path().join("results");
    let out = Command::new("bash")
        .arg(root().join(".ci/conformance.sh"))
        .arg(&gateway.url)
        .env("CONFORMANCE_REQUIREMENTS", "2026-07-28 2025-11-25")
        .env("CONFORMANCE_OUT_DIR", &results)
        .current_dir(root())
        .output()
        .expect("bash runs the conformance script");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    for set in ["2026-07-28", "2025-11-25"] {
        assert!(
            stdout.contains(&format!("CONFORMANCE requirements-{set}")),
            "the {set} set did not run"
        );
    }
    let (mut failed, mut read) = (BTreeSet::new(), 0);
    failed_checks(&results, &mut failed, &mut read);
    // The requirement set and the ten `tasks-*` scenarios each wrote theirs.
    assert!(
        read >= 11,
        "only {read} checks.json files under {results:?}"
    );
    let known: BTreeSet<String> = KNOWN.iter().map(|(id, _)| (*id).to_owned()).collect();
    let unexpected: Vec<_> = failed.difference(&known).collect();
    assert!(
        unexpected.is_empty(),
        "checks failed through the gateway: {unexpected:?}"
    );
    let passing: Vec<_> = known.difference(&failed).collect();
    assert!(
        passing.is_empty(),
        "listed as failing, and passed: {passing:?}; take them out of KNOWN"
    );
}
