//! The official MCP conformance suite (`@modelcontextprotocol/conformance`,
//! pinned in `.ci/conformance.sh`) against the conformance example over
//! Streamable HTTP on 127.0.0.1, both eras at the one endpoint: the
//! 2026-07-28 server requirements (stateless) and each `tasks-*` scenario on
//! its own, then the 2025-11-25 server requirements (`initialize` and
//! sessions; the same task tools, their questions sent as
//! `elicitation/create` and `sampling/createMessage`). Any failing check in
//! any scenario fails this test.
//!
//! The suite needs Node 22, which the script installs from the npm registry
//! into `.ci/.tools/` on first use.

mod common;

use std::process::Command;

use common::Server;

#[test]
fn official_conformance_suite_passes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("conformance.db"));
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new("bash")
        .arg(root.join(".ci/conformance.sh"))
        .arg(&server.url)
        .env("CONFORMANCE_OUT_DIR", dir.path().join("results"))
        .current_dir(&root)
        .output()
        .expect("bash runs the conformance script");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "the conformance suite failed (exit {:?})",
        out.status.code()
    );
}
