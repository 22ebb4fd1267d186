//! Shared state for tools: values registered once on the engine (a database
//! pool, an HTTP client, a config) and handed to every tool that declares a
//! [`State<T>`] parameter.
//!
//! State lives in the engine, not in a global: two engines in one process
//! (two tests, say) each hand their tools their own values. An engine refuses
//! to start when one of its tools needs a type it was not given, naming the
//! tool and the type, so a missing value is never found at call time.

use std::{
    any::{Any, TypeId},
    collections::HashMap,
    fmt,
    ops::Deref,
    sync::Arc,
};

/// A shared value a tool receives by declaring a parameter of this type.
///
/// Register the value with [`EngineBuilder::state`](crate::engine::EngineBuilder::state);
/// every call of every tool that takes `State<T>` gets the same value (an
/// `Arc` clone). A `State` parameter is not a tool argument: it is not in the
/// input schema and the client never sees it. It is not journaled either, so
/// a replay sees the engine's value of the moment.
///
/// ```
/// use mcp_tasks_runtime::{
///     Engine, State, ToolError, store::MemoryStore, task_tool, tool::Registry,
/// };
///
/// /// A connection pool, a client, a config: anything `Send + Sync + 'static`.
/// struct Warehouse {
///     region: String,
/// }
///
/// /// Counts a table's rows.
/// #[task_tool]
/// async fn count_rows(db: State<Warehouse>, table: String) -> Result<String, ToolError> {
///     Ok(format!("{table} in {}: 42 rows", db.region))
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mcp_tasks_runtime::Result<()> {
/// let engine = Engine::builder(MemoryStore::new())
///     .registry(Registry::new().with(count_rows_tool())?)
///     .state(Warehouse { region: "eu-west-1".into() })
///     .start()
///     .await?;
/// # let _ = engine;
/// # Ok(())
/// # }
/// ```
pub struct State<T: ?Sized>(pub Arc<T>);

impl<T: ?Sized> State<T> {
    /// The shared `Arc` itself.
    pub fn into_inner(self) -> Arc<T> {
        self.0
    }
}

impl<T: ?Sized> Clone for State<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T: ?Sized> Deref for State<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: ?Sized> AsRef<T> for State<T> {
    fn as_ref(&self) -> &T {
        &self.0
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for State<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("State").field(&&*self.0).finish()
    }
}

/// The state values an engine hands its tools, one per type.
///
/// Built by [`EngineBuilder::state`](crate::engine::EngineBuilder::state); build one
/// yourself only to call [`ToolDescriptor::prepare`](crate::tool::ToolDescriptor::prepare)
/// by hand.
#[derive(Clone, Default)]
pub struct StateMap {
    values: HashMap<TypeId, Entry>,
}

#[derive(Clone)]
struct Entry {
    value: Arc<dyn Any + Send + Sync>,
    type_name: &'static str,
}

impl fmt::Debug for StateMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.values.values().map(|e| e.type_name).collect();
        names.sort_unstable();
        f.debug_set().entries(names).finish()
    }
}

impl StateMap {
    /// No state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `value`, replacing any earlier value of the same type.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        self.insert_arc(Arc::new(value));
    }

    /// Adds a value that is already shared.
    pub fn insert_arc<T: Send + Sync + 'static>(&mut self, value: Arc<T>) {
        self.values.insert(
            TypeId::of::<T>(),
            Entry {
                value,
                type_name: std::any::type_name::<T>(),
            },
        );
    }

    /// The value of type `T`, if one was added.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<State<T>> {
        let entry = self.values.get(&TypeId::of::<T>())?;
        entry.value.clone().downcast::<T>().ok().map(State)
    }

    /// Whether a value of the type `need` names was added.
    pub fn provides(&self, need: &StateNeed) -> bool {
        self.values.contains_key(&(need.type_id)())
    }

    /// How many values there are.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// A state type a tool needs: what `#[task_tool]` records for each
/// [`State<T>`] parameter, so that an engine can check before it starts.
#[derive(Clone, Copy)]
pub struct StateNeed {
    type_id: fn() -> TypeId,
    type_name: fn() -> &'static str,
}

impl StateNeed {
    /// The need for a `T`.
    pub const fn of<T: Send + Sync + 'static>() -> Self {
        Self {
            type_id: TypeId::of::<T>,
            type_name: std::any::type_name::<T>,
        }
    }

    /// The type's name, as `std::any::type_name` spells it.
    pub fn type_name(&self) -> &'static str {
        (self.type_name)()
    }
}

impl fmt::Debug for StateNeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.type_name())
    }
}

impl PartialEq for StateNeed {
    fn eq(&self, other: &Self) -> bool {
        (self.type_id)() == (other.type_id)()
    }
}

impl Eq for StateNeed {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_found_by_type_and_shared() {
        let mut map = StateMap::new();
        map.insert(7_u32);
        map.insert(String::from("config"));
        let a = map.get::<u32>().unwrap();
        let b = map.get::<u32>().unwrap();
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(*a, 7);
        assert_eq!(&*map.get::<String>().unwrap(), "config");
        assert!(map.get::<u64>().is_none());
        assert!(map.provides(&StateNeed::of::<u32>()));
        assert!(!map.provides(&StateNeed::of::<u64>()));
        assert_eq!(StateNeed::of::<u64>().type_name(), "u64");
        map.insert(8_u32);
        assert_eq!(*map.get::<u32>().unwrap(), 8, "a later value replaces");
        assert_eq!(map.len(), 2);
    }
}
