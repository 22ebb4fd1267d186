//! Two tools with one name: the registry refuses them and names both
//! definitions. A test binary of its own, so that the clash does not reach the
//! inventory of the other tests.

use mcp_tasks_runtime::{Error, task_tool, tool::Registry};

mod billing {
    use super::task_tool;

    /// Sends the invoice.
    #[task_tool(name = "send")]
    pub(crate) async fn send_invoice() {}
}

mod mail {
    use super::task_tool;

    /// Sends an email.
    #[task_tool(name = "send")]
    pub(crate) async fn send_email() {}
}

fn assert_names_both(err: &Error) {
    match err {
        Error::DuplicateTool {
            name,
            first,
            second,
            first_location,
            second_location,
        } => {
            assert_eq!(name, "send");
            assert_eq!(first, "duplicates::billing::send_invoice");
            assert_eq!(second, "duplicates::mail::send_email");
            assert!(
                first_location.ends_with("duplicates.rs:11"),
                "{first_location}"
            );
            assert!(
                second_location.ends_with("duplicates.rs:19"),
                "{second_location}"
            );
        }
        other => panic!("expected a duplicate tool error, got {other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.starts_with(
            "duplicate tool name `send`: defined by `duplicates::billing::send_invoice`"
        ),
        "{message}"
    );
    assert!(
        message.contains("`duplicates::mail::send_email`"),
        "{message}"
    );
}

#[test]
fn inventory_rejects_duplicate_names() {
    let err = Registry::from_inventory().expect_err("two tools are named `send`");
    assert_names_both(&err);
}

#[test]
fn by_hand_rejects_duplicate_names() {
    let mut registry = Registry::new();
    registry
        .insert(billing::send_invoice_tool().clone())
        .expect("the first `send`");
    let err = registry
        .insert(mail::send_email_tool().clone())
        .expect_err("the second `send`");
    assert_names_both(&err);
    // The first one stays.
    assert_eq!(
        registry.get("send").map(|t| t.descriptor().description()),
        Some(Some("Sends the invoice."))
    );

    let err = Registry::new()
        .with(billing::send_invoice_tool())
        .and_then(|r| r.with(mail::send_email_tool()))
        .expect_err("the second `send`");
    assert_names_both(&err);
}
