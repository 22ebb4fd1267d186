//! The tools an engine serves, and replacing them while it runs.
//!
//! The set is one [`Registry`] behind a `watch` channel: a reader (a call,
//! a run, `tools/list`) clones the `Arc` of the current set under a read
//! lock held for that clone alone, and keeps that snapshot for as long as
//! it needs it; [`Engine::set_registry`] puts a new one in its place. The
//! channel's receivers are woken when the tools a client sees change (their
//! definitions, or how they run as tasks), and only then: the front door's
//! `notifications/tools/list_changed` come from them. A receiver holds the
//! latest set only, never a queue of changes.

use std::sync::Arc;

use tokio::sync::watch;

use super::Engine;
use crate::{error::Result, tool::Registry};

/// The engine's current tools (see the module doc).
pub(super) struct Tools(watch::Sender<Arc<Registry>>);

impl Tools {
    pub(super) fn new(registry: Registry) -> Self {
        Self(watch::Sender::new(Arc::new(registry)))
    }

    /// The tools now.
    pub(super) fn current(&self) -> Arc<Registry> {
        self.0.borrow().clone()
    }

    /// Serves `registry` from now on; wakes the receivers when a client
    /// would see a difference.
    fn replace(&self, registry: Registry) {
        let new = Arc::new(registry);
        self.0.send_if_modified(|current| {
            let changed = !same_listing(current, &new);
            *current = new;
            changed
        });
    }
}

/// Whether a client sees the same tools in `a` and `b`: the same
/// definitions, in the same order, each run the same way (a 2025-11-25
/// client sees a tool's task support in its listing).
fn same_listing(a: &Registry, b: &Registry) -> bool {
    a.len() == b.len()
        && a.iter().zip(b.iter()).all(|(a, b)| {
            a.definition() == b.definition() && a.descriptor().policy() == b.descriptor().policy()
        })
}

impl Engine {
    /// The tools the engine serves now: a snapshot, which a later
    /// [`Engine::set_registry`] does not change.
    pub fn registry(&self) -> Arc<Registry> {
        self.inner.tools.current()
    }

    /// Replaces the tools the engine serves, while it runs: a front door
    /// built on it ([`TaskServer`](crate::mcp::TaskServer)) lists the new
    /// set at once, and tells its clients that the list changed (see
    /// [`mcp`](crate::mcp), "Tool list changes").
    ///
    /// The tasks of the tools already there are judged by the new set:
    ///
    /// - a run under way keeps the tool it started with, to its end or its
    ///   next suspension (a question, a durable sleep);
    /// - a task that must run again (answered, woken by its timer, taken
    ///   over, or resumed after a restart) runs with the tool of its name in
    ///   the new set, under its [version rules](crate::tool::ToolDescriptor::with_replays_from);
    ///   when the set has no tool of that name, the task ends `failed` with
    ///   `-32603`, "tool `NAME` is no longer registered on this server". Nothing
    ///   fails before then: a tool removed and put back in the meantime
    ///   finds its tasks waiting;
    /// - a new call of a tool the set lacks is refused as any unknown tool
    ///   is ([`Error::UnknownTool`](crate::Error::UnknownTool), `-32602`).
    ///
    /// Each instance serves the set it was given: instances sharing a store
    /// are each replaced on their own.
    ///
    /// ```
    /// use mcp_tasks_runtime::{Engine, Error, engine::Call, store::MemoryStore, task_tool, tool::Registry};
    ///
    /// /// Says hello.
    /// #[task_tool]
    /// async fn hello() -> String {
    ///     "Hello!".into()
    /// }
    ///
    /// /// Says goodbye.
    /// #[task_tool]
    /// async fn goodbye() -> String {
    ///     "Goodbye!".into()
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mcp_tasks_runtime::Result<()> {
    /// let engine = Engine::builder(MemoryStore::new())
    ///     .registry(Registry::new().with(hello_tool())?)
    ///     .start()
    ///     .await?;
    /// let mut changes = engine.watch_registry();
    /// engine.set_registry(Registry::new().with(goodbye_tool())?)?;
    ///
    /// changes.changed().await.expect("the engine is still there");
    /// let names: Vec<_> = engine.registry().iter().map(|t| t.descriptor().name().to_owned()).collect();
    /// assert_eq!(names, ["goodbye"]);
    /// let refused = engine.call(Call::new("hello", Default::default())).await;
    /// assert!(matches!(refused, Err(Error::UnknownTool(name)) if name == "hello"));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::MissingState`](crate::Error::MissingState) naming the tool and
    /// the type when a tool takes a [`State<T>`](crate::State) that the engine
    /// was not given; the engine then serves the tools it served before.
    pub fn set_registry(&self, registry: Registry) -> Result<()> {
        registry.check_state(&self.inner.state)?;
        // Tasks left to an instance serving a newer version of their tool
        // may be this instance's to run now.
        self.inner.versions.forget();
        self.inner.tools.replace(registry);
        Ok(())
    }

    /// Watches the tools the engine serves: the receiver holds the current
    /// set, and wakes when [`Engine::set_registry`] changes what a client
    /// sees of it (a tool added, removed or defined anew; not a set that
    /// lists the same definitions). Several changes before the receiver
    /// looks wake it once.
    pub fn watch_registry(&self) -> watch::Receiver<Arc<Registry>> {
        self.inner.tools.0.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tool::{Location, TaskPolicy, ToolDescriptor};

    fn tool(name: &str, description: &str, policy: TaskPolicy) -> ToolDescriptor {
        let definition = json!({
            "name": name,
            "description": description,
            "inputSchema": {"type": "object"},
        });
        let Some(definition) = definition.as_object().cloned() else {
            unreachable!("an object")
        };
        let location = Location {
            path: "tools::tests",
            file: file!(),
            line: line!(),
        };
        let handler: crate::tool::Handler =
            Arc::new(|_args, _state| Ok(Box::pin(async { Ok(crate::tool::JsonObject::new()) })));
        ToolDescriptor::from_definition(definition, handler, location)
            .expect("a valid definition")
            .with_policy(policy)
    }

    fn registry(tools: &[ToolDescriptor]) -> Registry {
        let mut registry = Registry::new();
        for t in tools {
            registry.insert(t.clone()).expect("distinct names");
        }
        registry
    }

    #[test]
    fn only_what_a_client_sees_is_a_change() {
        let a = tool("a", "A.", TaskPolicy::Optional);
        let b = tool("b", "B.", TaskPolicy::Optional);
        let tools = Tools::new(registry(&[a.clone(), b.clone()]));
        let mut rx = tools.0.subscribe();

        // The same definitions, built anew: served, but no change.
        tools.replace(registry(&[b.clone(), a.clone()]));
        assert!(!rx.has_changed().expect("open"));

        for changed in [
            registry(std::slice::from_ref(&a)),
            registry(&[a.clone(), tool("b", "B, again.", TaskPolicy::Optional)]),
            registry(&[a.clone(), tool("b", "B, again.", TaskPolicy::Required)]),
        ] {
            tools.replace(changed);
            assert!(rx.has_changed().expect("open"));
            rx.borrow_and_update();
        }
        assert_eq!(tools.current().len(), 2);
    }
}
