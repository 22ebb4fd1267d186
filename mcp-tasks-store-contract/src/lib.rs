//! The store contract of `mcp-tasks-runtime` as a test kit: every
//! behaviour a [`Store`] must have, runnable against any store, including
//! yours.
//!
//! The behaviours cover creating and reading tasks, the journal, every
//! [`Transition`](mcp_tasks_runtime::store::Transition), answer and time-out as
//! [`TaskRecord::apply`](mcp_tasks_runtime::store::TaskRecord::apply),
//! [`TaskRecord::answer`](mcp_tasks_runtime::store::TaskRecord::answer) and
//! [`TaskRecord::time_out`](mcp_tasks_runtime::store::TaskRecord::time_out) define them
//! (including the version counter and questions' deadlines),
//! concurrent callers, recovery (`unfinished`) and expiry. The runtime runs
//! them against [`MemoryStore`](mcp_tasks_runtime::store::MemoryStore),
//! [`SqliteStore`](mcp_tasks_runtime::store::SqliteStore) and, on a real server,
//! `PostgresStore`. A store that needs a server the machine may lack can
//! skip the behaviours with [`Fixture::skip`].
//!
//! To run them against your store, write one line in a test file:
//! [`store_contract_tests!`](crate::store_contract_tests) expands to one
//! `#[test]` per behaviour, named after it, so a failure names the
//! behaviour that broke. Each test gets a fresh store from your factory,
//! an async closure that returns a [`Fixture`]:
//!
//! ```
//! use mcp_tasks_runtime::store::MemoryStore;
//! use mcp_tasks_store_contract::Fixture;
//!
//! mcp_tasks_store_contract::store_contract_tests!(|| async { Fixture::new(MemoryStore::new()) });
//! # fn main() {}
//! ```
//!
//! A store that lives in a file keeps its directory alive with
//! [`Fixture::keep`]:
//!
//! ```
//! use mcp_tasks_runtime::store::SqliteStore;
//! use mcp_tasks_store_contract::Fixture;
//!
//! async fn sqlite() -> Fixture {
//!     let dir = tempfile::tempdir().expect("a temporary directory");
//!     let store = SqliteStore::open(dir.path().join("tasks.db"))
//!         .await
//!         .expect("a store");
//!     Fixture::new(store).keep(dir)
//! }
//!
//! mcp_tasks_store_contract::store_contract_tests!(sqlite);
//! # fn main() {}
//! ```
//!
//! The front door's contract (spent tokens, protocol sessions: the
//! [`FrontDoorStore`] trait) is a kit of its own,
//! [`front_door_contract_tests!`](crate::front_door_contract_tests), run
//! the same way. A [`Fixture::new`] of a store that keeps front-door state
//! ([`Store::front_door`]) serves both kits; [`Fixture::front_door`] makes
//! one for a front-door store alone:
//!
//! ```
//! use mcp_tasks_runtime::store::MemoryStore;
//! use mcp_tasks_store_contract::Fixture;
//!
//! mcp_tasks_store_contract::front_door_contract_tests!(|| async {
//!     Fixture::front_door(MemoryStore::new())
//! });
//! # fn main() {}
//! ```
//!
//! The kit needs no test framework beyond `#[test]`: each test builds its
//! own Tokio runtime (two worker threads, so concurrent callers really run
//! at once).

mod answers;
mod deadlines;
mod forward;
mod front_door;
mod limits;
mod ownership;
mod recovery;
mod support;
mod tasks;
mod transitions;
mod versions;

pub use forward::{Forward, Forwarded};
pub use support::full_task;

use std::{any::Any, fmt, future::Future, io::Write as _, pin::Pin, sync::Arc};

// The behaviours, by name, for `BEHAVIOURS`.
use self::{
    answers::*, deadlines::*, front_door::*, limits::*, ownership::*, recovery::*, tasks::*,
    transitions::*, versions::*,
};
use mcp_tasks_runtime::store::{FrontDoorStore, Store};

// ---------------------------------------------------------------------------
// Running behaviours.

/// A fresh store for one behaviour, and whatever must live as long as it
/// (a temporary directory, a server process, …).
///
/// ```
/// use mcp_tasks_runtime::store::MemoryStore;
/// use mcp_tasks_store_contract::Fixture;
///
/// let fixture = Fixture::new(MemoryStore::new()).keep("anything that must outlive the store");
/// # drop(fixture);
/// ```
pub struct Fixture {
    // Dropped in this order: the store before what it depends on.
    /// The stores, or why there are none (the behaviour is skipped).
    store: Result<Stores, String>,
    guards: Vec<Box<dyn Any + Send>>,
}

/// What a [`Fixture`] holds: a task store, a front door, or both.
#[derive(Debug)]
struct Stores {
    tasks: Option<Arc<dyn Store>>,
    front_door: Option<Arc<dyn FrontDoorStore>>,
}

impl Fixture {
    /// A fixture for `store`.
    ///
    /// ```
    /// use mcp_tasks_runtime::store::MemoryStore;
    /// use mcp_tasks_store_contract::Fixture;
    ///
    /// let fixture = Fixture::new(MemoryStore::new());
    /// # drop(fixture);
    /// ```
    pub fn new(store: impl Store) -> Self {
        let tasks: Arc<dyn Store> = Arc::new(store);
        let front_door = tasks.clone().front_door();
        Self {
            store: Ok(Stores {
                tasks: Some(tasks),
                front_door,
            }),
            guards: Vec::new(),
        }
    }

    /// A fixture for a front-door store alone, for
    /// [`front_door_contract_tests!`](crate::front_door_contract_tests).
    ///
    /// ```
    /// use mcp_tasks_runtime::store::MemoryStore;
    /// use mcp_tasks_store_contract::Fixture;
    ///
    /// mcp_tasks_store_contract::run("spend_is_single_use_and_forgets_expired_records", || async {
    ///     Fixture::front_door(MemoryStore::new())
    /// });
    /// ```
    pub fn front_door(front_door: impl FrontDoorStore) -> Self {
        Self {
            store: Ok(Stores {
                tasks: None,
                front_door: Some(Arc::new(front_door)),
            }),
            guards: Vec::new(),
        }
    }

    /// No store: the behaviour is skipped, and [`run`] says so on stderr
    /// (`SKIPPED: <behaviour>: <reason>`, shown even though the test
    /// harness captures output) and passes. For stores that need
    /// a server the machine may not have; fail instead where the server must
    /// be there (on CI, say).
    ///
    /// ```
    /// use mcp_tasks_store_contract::{self, Fixture};
    ///
    /// mcp_tasks_store_contract::run("partial_then_full_answer", || async {
    ///     Fixture::skip("no server at 127.0.0.1:5432")
    /// });
    /// ```
    pub fn skip(reason: impl Into<String>) -> Self {
        Self {
            store: Err(reason.into()),
            guards: Vec::new(),
        }
    }

    /// Keeps `guard` alive until the behaviour has finished and the store
    /// has been dropped.
    ///
    /// ```
    /// use mcp_tasks_runtime::store::MemoryStore;
    /// use mcp_tasks_store_contract::Fixture;
    ///
    /// let dir = tempfile::tempdir().expect("a temporary directory");
    /// let fixture = Fixture::new(MemoryStore::new()).keep(dir);
    /// # drop(fixture);
    /// ```
    #[must_use]
    pub fn keep(mut self, guard: impl Any + Send) -> Self {
        self.guards.push(Box::new(guard));
        self
    }
}

impl fmt::Debug for Fixture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fixture")
            .field("store", &self.store)
            .field("guards", &self.guards.len())
            .finish()
    }
}

/// Runs the behaviour named `behaviour` (of either kit: the task store's
/// or the front door's) against a fresh store from `factory`, on a Tokio
/// runtime of its own; panics, naming what went wrong, if the store breaks
/// the contract. Call it from a plain `#[test]` (not inside a runtime).
/// [`store_contract_tests!`](crate::store_contract_tests) and
/// [`front_door_contract_tests!`](crate::front_door_contract_tests) write
/// one such test per behaviour.
///
/// ```
/// use mcp_tasks_runtime::store::MemoryStore;
/// use mcp_tasks_store_contract::Fixture;
///
/// mcp_tasks_store_contract::run("partial_then_full_answer", || async {
///     Fixture::new(MemoryStore::new())
/// });
/// ```
///
/// # Panics
///
/// If the store breaks the behaviour, no behaviour has that name, or the
/// fixture lacks the store the behaviour checks (a task behaviour on a
/// [`Fixture::front_door`], or a front-door behaviour on a task store that
/// keeps no front-door state).
pub fn run<F, Fut>(behaviour: &str, factory: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Fixture>,
{
    let task = BEHAVIOURS.iter().find(|(name, _)| *name == behaviour);
    let door = FRONT_DOOR_BEHAVIOURS
        .iter()
        .find(|(name, _)| *name == behaviour);
    if task.is_none() && door.is_none() {
        let names: Vec<&str> = behaviours().chain(front_door_behaviours()).collect();
        panic!(
            "no store behaviour is named `{behaviour}`; the behaviours are: {}",
            names.join(", ")
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime for the store contract");
    runtime.block_on(async {
        let fixture = factory().await;
        match &fixture.store {
            Ok(stores) => match (task, door) {
                (Some((_, check)), _) => {
                    let Some(store) = stores.tasks.clone() else {
                        panic!(
                            "`{behaviour}` checks a task store, and this fixture has none \
                             (Fixture::front_door): make it with Fixture::new"
                        );
                    };
                    check(store).await;
                }
                (None, Some((_, check))) => {
                    let Some(store) = stores.front_door.clone() else {
                        panic!(
                            "`{behaviour}` checks front-door state, and this fixture's store \
                             keeps none (its Store::front_door is None): give one with \
                             Fixture::front_door"
                        );
                    };
                    check(store).await;
                }
                (None, None) => unreachable!("looked up above"),
            },
            // Written to stderr itself, past the test harness's capture, so
            // that a skip shows even though the test passes.
            Err(reason) => {
                let _ = writeln!(std::io::stderr(), "SKIPPED: {behaviour}: {reason}");
            }
        }
        drop(fixture);
    });
}

/// The names of every behaviour, in the order they are listed.
///
/// ```
/// use mcp_tasks_store_contract as testing;
///
/// assert!(testing::behaviours().any(|name| name == "terminal_states_never_change"));
/// ```
pub fn behaviours() -> impl Iterator<Item = &'static str> {
    BEHAVIOURS.iter().map(|(name, _)| *name)
}

/// The names of every behaviour of the front door's kit
/// ([`front_door_contract_tests!`](crate::front_door_contract_tests)).
///
/// ```
/// use mcp_tasks_store_contract as testing;
///
/// assert!(testing::front_door_behaviours().any(|name| name.starts_with("spend")));
/// ```
pub fn front_door_behaviours() -> impl Iterator<Item = &'static str> {
    FRONT_DOOR_BEHAVIOURS.iter().map(|(name, _)| *name)
}

type Behaviour = fn(Arc<dyn Store>) -> Pin<Box<dyn Future<Output = ()>>>;

type FrontDoorBehaviour = fn(Arc<dyn FrontDoorStore>) -> Pin<Box<dyn Future<Output = ()>>>;

crate::store_contract_tests!(@names [@table BEHAVIOURS: Behaviour;]);

crate::store_contract_tests!(@front_door_names [@table FRONT_DOOR_BEHAVIOURS: FrontDoorBehaviour;]);

/// One `#[test]` per behaviour of the [store contract](crate),
/// each running it against a fresh store from `factory`.
///
/// `factory` is an expression for something you can call with no
/// arguments to get a future of a [`Fixture`](crate::Fixture):
/// an async fn's path, or an async closure. It is evaluated once per test.
/// The tests are plain `#[test]` fns named after the behaviours; to run the
/// contract against two stores in one file, invoke the macro in two modules.
/// (The arms that start with `@` are the macro's own plumbing.)
///
/// ```
/// use mcp_tasks_runtime::store::MemoryStore;
/// use mcp_tasks_store_contract::Fixture;
///
/// mod memory {
///     use super::*;
///     mcp_tasks_store_contract::store_contract_tests!(|| async { Fixture::new(MemoryStore::new()) });
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! store_contract_tests {
    // The one list of behaviours, handed to the arm named in brackets.
    (@names [$($arm:tt)*]) => {
        $crate::store_contract_tests!($($arm)*
            create_get_round_trip,
            create_refuses_an_existing_id,
            concurrent_creates_fail_only_the_duplicate,
            journal_is_ordered_and_keeps_the_first_entry,
            journal_of_a_missing_task,
            status_message,
            park_and_sleep,
            request_cancel_on_a_running_task,
            request_cancel_on_parked_and_sleeping_tasks,
            park_or_sleep_after_a_cancel_request_cancels,
            finishing_transitions,
            terminal_states_never_change,
            updated_at_never_goes_back,
            transition_of_a_missing_task,
            answer_ignores_unknown_keys,
            partial_then_full_answer,
            answer_on_working_or_terminal_task_is_ignored,
            concurrent_answers_to_one_key_accept_exactly_one,
            concurrent_answers_to_different_keys_all_land,
            unfinished_lists_working_and_input_required,
            purge_deletes_expired_tasks_and_their_journals_only,
            next_expiry_is_the_earliest_deadline,
            purge_takes_at_most_its_limit_the_earliest_first,
            create_with_journal_lands_task_and_journal_together,
            version_starts_at_zero,
            version_survives_a_round_trip,
            version_counts_each_change_once,
            versions_reads_each_existing_tasks_version,
            unfinished_among_names_the_open_tasks_asked_for,
            refused_changes_leave_the_version,
            list_pages_a_principals_tasks_in_creation_order,
            list_all_pages_every_task_in_creation_order,
            summaries_page_a_filter_both_ways_and_count_tasks_counts_it,
            claim_takes_a_runnable_task_no_live_lease_holds,
            claim_moves_the_fence_and_refuses_the_old_holder,
            fenced_append_keeps_the_first_entry_and_says_so,
            unhurried_append_is_an_append,
            journaled_transition_lands_entries_with_the_change,
            renew_extends_live_leases_and_drops_lapsed_ones,
            release_frees_an_instances_tasks,
            claimable_lists_due_unheld_working_tasks_oldest_first,
            park_sleep_and_finish_release_the_lease,
            park_keeps_deadlines_and_wakes_at_the_earliest,
            time_out_journals_the_marker_and_frees_the_key,
            late_answer_after_a_time_out_is_ignored,
            answer_before_the_deadline_wins_and_the_timer_then_does_nothing,
            questions_asked_together_time_out_one_by_one,
            overdue_lists_parked_tasks_past_their_deadline,
            a_client_cannot_forge_a_time_out,
            cancel_ends_a_task_parked_on_a_timed_question,
            racing_answers_and_time_outs_journal_exactly_one,
            count_unfinished_counts_a_principals_open_tasks,
            tool_version_is_kept_and_defaults_to_one,
            release_gives_up_one_held_working_task,
        );
    };
    // The front door's, likewise.
    (@front_door_names [$($arm:tt)*]) => {
        $crate::store_contract_tests!($($arm)*
            spend_is_single_use_and_forgets_expired_records,
            sessions_round_trip_and_are_forgotten,
            purge_sessions_deletes_stale_sessions_only,
        );
    };
    // Inside the kit: a table `run` looks behaviours up in, by name.
    (@table $table:ident: $behaviour:ty; $($name:ident,)+) => {
        const $table: &[(&str, $behaviour)] = &[
            $((::core::stringify!($name), |store| ::std::boxed::Box::pin($name(store)))),+
        ];
    };
    (@tests $factory:expr; $($name:ident,)+) => {
        $(
            #[test]
            fn $name() {
                $crate::run(::core::stringify!($name), $factory);
            }
        )+
    };
    ($factory:expr $(,)?) => {
        $crate::store_contract_tests!(@names [@tests $factory;]);
    };
}

/// One `#[test]` per behaviour of the front door's contract (spent tokens,
/// protocol sessions: the [`FrontDoorStore`](mcp_tasks_runtime::store::FrontDoorStore)
/// trait), each running it against a fresh store from `factory`, as
/// [`store_contract_tests!`](crate::store_contract_tests) does for task
/// storage. The fixture is a [`Fixture::new`](crate::Fixture::new)
/// of a store that keeps front-door state, or a
/// [`Fixture::front_door`](crate::Fixture::front_door).
///
/// ```
/// use mcp_tasks_runtime::store::MemoryStore;
/// use mcp_tasks_store_contract::Fixture;
///
/// mcp_tasks_store_contract::front_door_contract_tests!(|| async { Fixture::new(MemoryStore::new()) });
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! front_door_contract_tests {
    ($factory:expr $(,)?) => {
        $crate::store_contract_tests!(@front_door_names [@tests $factory;]);
    };
}
