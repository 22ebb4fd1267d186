//! Generated code adds no warnings to the user's crate, whatever lints the
//! user turns on: this file denies warnings, rustc's strict lints and (under
//! `cargo clippy`, as CI runs it) clippy's pedantic, nursery and a choice of
//! restriction lints, then uses every shape of `#[task_tool]` and
//! `#[derive(Elicit)]`.

#![deny(warnings)]
#![deny(
    missing_docs,
    missing_debug_implementations,
    unused_qualifications,
    unreachable_pub,
    unused_results,
    unused_import_braces,
    unused_lifetimes,
    single_use_lifetimes,
    trivial_casts,
    trivial_numeric_casts,
    elided_lifetimes_in_paths,
    explicit_outlives_requirements,
    let_underscore_drop,
    meta_variable_misuse,
    non_ascii_idents,
    redundant_lifetimes,
    unit_bindings,
    unnameable_types,
    variant_size_differences,
    rust_2018_idioms
)]
#![forbid(unsafe_code)]
#![warn(clippy::all, clippy::pedantic, clippy::nursery)]
// Restriction lints that generated code could plausibly trip.
#![warn(
    clippy::absolute_paths,
    clippy::allow_attributes,
    clippy::allow_attributes_without_reason,
    clippy::missing_docs_in_private_items,
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    clippy::alloc_instead_of_core,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable,
    clippy::indexing_slicing,
    clippy::pattern_type_mismatch,
    clippy::shadow_unrelated,
    clippy::shadow_reuse,
    clippy::default_numeric_fallback,
    clippy::missing_inline_in_public_items,
    clippy::ref_patterns,
    clippy::min_ident_chars,
    clippy::single_char_lifetime_names,
    clippy::exhaustive_structs,
    clippy::exhaustive_enums,
    clippy::pub_use,
    clippy::mod_module_files,
    clippy::items_after_statements,
    clippy::module_name_repetitions,
    clippy::wildcard_imports,
    clippy::as_conversions,
    clippy::arithmetic_side_effects,
    clippy::let_underscore_must_use,
    clippy::let_underscore_untyped,
    clippy::semicolon_outside_block,
    clippy::semicolon_inside_block
)]
// rustc's `unreachable_pub` and clippy's `redundant_pub_crate` disagree; the
// former wins here.
#![expect(clippy::redundant_pub_crate, reason = "`unreachable_pub` is denied")]

use core::fmt;

use mcp_tasks_runtime::{Elicit, ToolError, mcp::CallToolResult, task_tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A structured report.
#[derive(Debug, Serialize, JsonSchema)]
#[non_exhaustive]
pub struct Report {
    /// The total.
    pub total: u32,
}

/// The arguments of [`summed`].
#[derive(Debug, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct SumArgs {
    /// The numbers.
    pub numbers: Vec<u32>,
}

/// A deployment environment.
#[derive(Debug, Deserialize, JsonSchema, Elicit)]
#[non_exhaustive]
pub enum Env {
    /// Staging.
    Staging,
    /// Production.
    Production,
}

/// An approval form.
#[derive(Debug, Deserialize, JsonSchema, Elicit)]
#[non_exhaustive]
pub struct Approval {
    /// Approve?
    pub approve: bool,
    /// Why.
    pub reason: Option<String>,
    /// Where.
    pub env: Env,
    /// Where else.
    pub others: Vec<Env>,
}

/// A tool error type.
#[derive(Debug)]
#[non_exhaustive]
pub struct Quota;

impl fmt::Display for Quota {
    #[inline]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("over quota")
    }
}

/// Adds two numbers, as text.
#[task_tool(ttl = "1h", poll_interval = "2s", read_only, idempotent)]
#[inline]
pub async fn add(
    /// The first.
    first: u32,
    /// The second (default 0).
    second: Option<u32>,
) -> String {
    format!("{}", first.saturating_add(second.unwrap_or_default()))
}

/// Sums numbers into a report.
///
/// # Errors
///
/// Never.
#[task_tool(name = "sum", title = "Sum", task = required)]
#[inline]
pub async fn summed(#[args] args: SumArgs) -> Result<Report, ToolError> {
    Ok(Report {
        total: args.numbers.iter().sum(),
    })
}

/// Does nothing.
#[task_tool(task = forbidden)]
#[inline]
pub async fn nothing() {}

/// Fails with a `Display` error.
///
/// # Errors
///
/// Always.
#[task_tool]
#[inline]
pub async fn over_quota() -> Result<(), Quota> {
    Err(Quota)
}

/// Returns a raw result.
#[task_tool(destructive = false, open_world = false)]
#[inline]
pub async fn raw() -> CallToolResult {
    CallToolResult::structured(serde_json::Value::Null)
}

/// A private module with private tools.
mod private {
    use mcp_tasks_runtime::{ToolError, ask_user, task_tool};

    /// Asks for approval.
    ///
    /// # Errors
    ///
    /// When the user declines.
    #[task_tool]
    pub(crate) async fn ask() -> Result<bool, ToolError> {
        let answer: super::Approval = ask_user("Approve?").await?;
        Ok(answer.approve && answer.reason.is_none() && answer.others.is_empty())
    }

    /// Private and unused except through the registry.
    #[task_tool]
    async fn hidden() {}
}

#[test]
fn tools_are_registered() {
    use mcp_tasks_runtime::tool::Registry;

    let registry = Registry::from_inventory();
    assert!(registry.is_ok_and(|tools| tools.len() == 7));
    assert_eq!(add_tool().name(), "add");
    assert_eq!(summed_tool().name(), "sum");
    assert_eq!(private::ask_tool().name(), "ask");
    assert!(nothing_tool().output_schema().is_none());
    assert!(over_quota_tool().output_schema().is_none());
    assert!(raw_tool().output_schema().is_none());
}
