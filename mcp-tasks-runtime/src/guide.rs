//! The guide: writing task tools, serving them, running them in production.
//!
//! Each chapter is a module of its own. It opens with the code you write,
//! then explains it; its examples are compiled as doctests, so they stay
//! true. Read them in this order:
//!
//! 1. [`writing_tools`]: arguments, state, steps, questions, races, tests.
//! 2. [`versions`]: changing a tool while its tasks are in flight.
//! 3. [`serving`]: the HTTP and stdio transports, graceful shutdown, push, logs.
//! 4. [`protocol_versions`]: what clients of each MCP version see.
//! 5. [`durability`]: the journal, replay, and what runs again when.
//! 6. [`fleet`]: several instances on one store, leases and takeover.
//! 7. [`operating`]: metrics, the admin page, traces, graceful drain.
//! 8. [`security`]: what protects what, and the limits.
//!
//! Calling task tools from Rust is the crate `mcp-tasks-client`'s
//! (`TaskClient`), with a guide of its own.

#[doc = include_str!("../docs/guide/writing-tools.md")]
pub mod writing_tools {}

#[doc = include_str!("../docs/guide/versions.md")]
pub mod versions {}

#[doc = include_str!("../docs/guide/serving.md")]
pub mod serving {}

#[doc = include_str!("../docs/guide/protocol-versions.md")]
pub mod protocol_versions {}

#[doc = include_str!("../docs/guide/durability.md")]
pub mod durability {}

#[doc = include_str!("../docs/guide/fleet.md")]
pub mod fleet {}

#[doc = include_str!("../docs/guide/operating.md")]
pub mod operating {}

#[doc = include_str!("../docs/guide/security.md")]
pub mod security {}
