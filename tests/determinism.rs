//! `determinism_check!`, the crate-wide check, on fixture source trees
//! (`determinism/*/src`, read as data, never compiled): each reaches a call
//! the attribute cannot see, and each is reported at its file and line with
//! the chain of calls from the tool. The control reports nothing.

use mcp_tasks_runtime::testing::{DeterminismReport, determinism_check};

/// The findings as `file:line` and the start of their message.
fn found(report: &DeterminismReport) -> Vec<(String, String)> {
    report
        .findings()
        .iter()
        .map(|f| {
            let what = f
                .message()
                .split(": a replay")
                .next()
                .unwrap_or_default()
                .to_owned();
            (format!("{}:{}", f.file(), f.line()), what)
        })
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(at, what)| ((*at).to_owned(), (*what).to_owned()))
        .collect()
}

#[test]
fn module_level_aliases_are_resolved() {
    let report = determinism_check!("determinism/module_alias/src");
    assert_eq!(report.tools(), 3, "{report}");
    assert_eq!(
        found(&report),
        pairs(&[
            (
                "determinism/module_alias/src/lib.rs:13",
                "`t::sleep` (`tokio::time::sleep`, as a `use` imports it) in a task tool's body"
            ),
            (
                "determinism/module_alias/src/lib.rs:18",
                "`Id::new_v4` (`uuid::Uuid::new_v4`, as a `use` imports it) in a task tool's body"
            ),
            (
                "determinism/module_alias/src/lib.rs:23",
                "`within` (`tokio::time::timeout`, as a `use` imports it) in a task tool's body"
            ),
        ]),
        "{report}"
    );
    let sleep = &report.findings()[0];
    assert_eq!(sleep.column(), 5);
    assert!(sleep.message().contains("use `durable::sleep`"), "{sleep}");
    assert_eq!(
        sleep.chain(),
        ["tool `nap` (determinism/module_alias/src/lib.rs:12)"]
    );
}

#[test]
fn a_helper_in_another_module_is_followed() {
    let report = determinism_check!("determinism/helper/src");
    assert_eq!(
        found(&report),
        pairs(&[(
            "determinism/helper/src/helpers/mod.rs:2",
            "`tokio::spawn` in `helpers::start_background`, which a tool calls"
        )]),
        "{report}"
    );
    let f = &report.findings()[0];
    assert_eq!(
        f.chain(),
        [
            "tool `deploy` (determinism/helper/src/lib.rs:8)",
            "`helpers::start_background` (determinism/helper/src/helpers/mod.rs:1)",
        ]
    );
    assert!(f.message().contains("use `durable::spawn`"), "{f}");
    assert!(
        f.message()
            .contains("(or make the tool call its helper inside a `checkpoint`"),
        "{f}"
    );
}

#[test]
fn helpers_are_followed_transitively_through_uses_and_methods() {
    let report = determinism_check!("determinism/transitive/src");
    assert_eq!(
        found(&report),
        pairs(&[
            (
                "determinism/transitive/src/lib.rs:27",
                "`.elapsed()` in `clock::Rolling::next`, which a tool calls"
            ),
            (
                "determinism/transitive/src/lib.rs:28",
                "`SystemTime::now` (`std::time::SystemTime::now`, as a `use` imports it) in \
                 `clock::Rolling::next`, which a tool calls"
            ),
        ]),
        "{report}"
    );
    assert_eq!(
        report.findings()[1].chain(),
        [
            "tool `report` (determinism/transitive/src/lib.rs:8)",
            "`format_report` (determinism/transitive/src/lib.rs:12)",
            "`clock::stamp` (determinism/transitive/src/lib.rs:19)",
            "`clock::Rolling::next` (determinism/transitive/src/lib.rs:26)",
        ]
    );
}

#[test]
fn macro_rules_wrappers_are_read() {
    let report = determinism_check!("determinism/macro_wrapper/src");
    assert_eq!(
        found(&report),
        pairs(&[
            (
                "determinism/macro_wrapper/src/lib.rs:10",
                "`sleep` (`tokio::time::sleep`, as a `use` imports it) in `pause!`, which a tool calls"
            ),
            (
                "determinism/macro_wrapper/src/lib.rs:16",
                "`tokio::select!` in `first_of!`, which a tool calls"
            ),
        ]),
        "{report}"
    );
    assert_eq!(
        report.findings()[0].chain(),
        [
            "tool `settle` (determinism/macro_wrapper/src/lib.rs:24)",
            "`pause!` (determinism/macro_wrapper/src/lib.rs:8)",
        ]
    );
}

#[test]
fn a_fn_declared_in_the_body_is_checked() {
    let report = determinism_check!("determinism/fn_in_body/src");
    assert_eq!(
        found(&report),
        pairs(&[(
            "determinism/fn_in_body/src/lib.rs:11",
            "`SystemTime::now` (`std::time::SystemTime::now`, as a `use` imports it) in a task \
             tool's body"
        )]),
        "{report}"
    );
}

#[test]
fn deterministic_code_reports_nothing() {
    let report = determinism_check!("determinism/control/src");
    assert_eq!(report.tools(), 2);
    assert_eq!(report.files(), 2);
    report.assert_clean();
}

/// The example servers of this workspace, as a user would check them.
#[test]
fn the_examples_are_clean() {
    let report = determinism_check!("../examples/src");
    assert!(report.tools() > 0, "{report}");
    report.assert_clean();
}

#[test]
fn a_report_lists_its_findings_when_asserted_clean() {
    let report = determinism_check!("determinism/helper/src");
    let message = std::panic::catch_unwind(|| report.assert_clean())
        .expect_err("a finding fails the assertion");
    let message = message
        .downcast_ref::<String>()
        .expect("a formatted message");
    assert!(
        message.starts_with("1 finding(s) in the 1 tool(s) of 2 file(s)\n"),
        "{message}"
    );
    assert!(
        message.contains(
            "determinism/helper/src/helpers/mod.rs:2:5: `tokio::spawn` in `helpers::start_background`"
        ),
        "{message}"
    );
    assert!(
        message.contains("reached from tool `deploy` (determinism/helper/src/lib.rs:8) -> "),
        "{message}"
    );
}
