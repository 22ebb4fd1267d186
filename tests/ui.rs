//! Compile-time behaviour of `#[task_tool]` and `#[derive(Elicit)]`.
//!
//! `ui/pass/*.rs` must compile (and run); `ui/fail/*.rs` must fail with exactly
//! the checked-in `.stderr`. The `.stderr` files depend on the toolchain: when
//! it changes, regenerate them with `TRYBUILD=overwrite cargo test -p
//! mcp-tasks-tests --test ui` and review the diff like code.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/pass/*.rs");
    t.compile_fail("ui/fail/*.rs");
}
