//! The one list of what a task tool's body may not call (the families of
//! refused paths, bare names and methods) and how a path is matched against
//! it. Both checks read it: `#[task_tool]` on its body (`determinism.rs`) and
//! `determinism_check!` on the whole crate (`crate_check.rs`).
//!
//! A pattern is a `::`-separated path:
//! - `tokio::time::sleep` matches a path that ends it, written with at least
//!   its last two segments for a fn (`time::sleep`, `tokio::time::sleep`),
//!   its last one for a type or a macro (`JoinSet`, `select!`);
//! - `std::|thread::Builder`: the segments after `|` must all be written;
//! - `*::now`: any path of two or more segments ending so (`Instant::now`,
//!   `chrono::Utc::now`);
//! - `fastrand::*`: any path under the crate, written from its root.

/// A family of refused paths and what to write instead.
pub(crate) struct Family {
    /// Fns and other values (`tokio::time::sleep`, `Instant::now`).
    pub(crate) fns: &'static [&'static str],
    /// Macros, without the `!`.
    pub(crate) macros: &'static [&'static str],
    /// Types: refused as types and as the start of a path (`JoinSet::new`).
    pub(crate) types: &'static [&'static str],
    /// Methods, on any receiver (`.elapsed()`, `.spawn(..)`).
    pub(crate) methods: &'static [&'static str],
    /// Why a replay cannot repeat it: follows "a replay would …".
    pub(crate) why: &'static str,
    /// The durable alternative.
    pub(crate) instead: &'static str,
}

const NONE: &[&str] = &[];

/// Every refused family, in the order `task_tool.md` lists them.
pub(crate) const FAMILIES: &[Family] = &[
    Family {
        fns: NONE,
        macros: &[
            "tokio::select",
            "tokio::macros::select",
            "futures::select",
            "futures::select_biased",
            "futures_util::select",
            "futures_util::select_biased",
        ],
        types: NONE,
        methods: NONE,
        why: "not know which branch won (it is not journaled, and depends on timing and poll order) and could take another branch, dropping a question or step of the first run",
        instead: "race journaled steps with `durable::select` or `durable::select_all`, which journal the winner, or race plain futures inside one `checkpoint`",
    },
    Family {
        fns: &[
            "futures::future::select",
            "futures::future::select_all",
            "futures::future::select_ok",
            "futures::future::try_select",
            "futures_util::future::select",
            "futures_util::future::select_all",
            "futures_util::future::select_ok",
            "futures_util::future::try_select",
        ],
        macros: NONE,
        types: NONE,
        methods: NONE,
        why: "not know which future won (it is not journaled, and depends on timing) and could take another branch",
        instead: "use `durable::select` or `durable::select_all`, which journal the winner, or race plain futures inside one `checkpoint`",
    },
    Family {
        fns: &[
            "futures::stream::select",
            "futures::stream::select_all",
            "futures::stream::select_with_strategy",
            "futures_util::stream::select",
            "futures_util::stream::select_all",
            "futures_util::stream::select_with_strategy",
        ],
        macros: &["futures::stream_select", "futures_util::stream_select"],
        types: &[
            "futures::stream::FuturesUnordered",
            "futures::stream::SelectAll",
            "futures_util::stream::FuturesUnordered",
            "futures_util::stream::SelectAll",
            "tokio_stream::StreamMap",
        ],
        methods: &["buffer_unordered", "try_buffer_unordered"],
        why: "take the items in another order (they come as they finish, which depends on timing) and could take another path",
        instead: "await journaled steps in a fixed order (`durable::spawn` them, then await each handle), race them with `durable::select_all`, which journals the winner, or collect the results inside one `checkpoint`",
    },
    Family {
        fns: &["tokio::time::sleep", "tokio::time::sleep_until"],
        macros: NONE,
        types: &["|futures_timer::Delay"],
        methods: NONE,
        why: "wait again (the timer is not journaled), and a task parked on a question never wakes to see it fire",
        instead: "use `durable::sleep`, which journals its deadline and parks the task without holding a worker",
    },
    Family {
        fns: &["tokio::time::timeout", "tokio::time::timeout_at"],
        macros: NONE,
        types: NONE,
        methods: NONE,
        why: "time the future again and could decide otherwise, and a question under it parks the task so its timer never fires",
        instead: "give a question a deadline with `Question::timeout`, race a step against `durable::sleep` with `durable::select`, or time out work inside one `checkpoint`",
    },
    Family {
        fns: &["tokio::time::interval", "tokio::time::interval_at"],
        macros: NONE,
        types: NONE,
        methods: NONE,
        why: "tick again, at other times (its ticks are not journaled)",
        instead: "call `durable::sleep` in a loop",
    },
    Family {
        fns: &[
            "tokio::spawn",
            "tokio::task::spawn",
            "tokio::task::spawn_local",
            "std::thread::spawn",
            "std::thread::scope",
            "tokio::runtime::Handle::current",
            "tokio::runtime::Handle::try_current",
            "tokio::runtime::Runtime::new",
            "tokio::runtime::Builder::new_current_thread",
            "tokio::runtime::Builder::new_multi_thread",
            "rayon::spawn",
            "rayon::spawn_fifo",
        ],
        macros: NONE,
        types: &[
            "tokio::task::JoinSet",
            "tokio::task::LocalSet",
            "tokio_util::task::TaskTracker",
            "std::|thread::Builder",
        ],
        methods: &["spawn", "spawn_local", "spawn_scoped"],
        why: "run the spawned work again: it leaves the task, so its steps run unjournaled, once per replay",
        instead: "use `durable::spawn`, which runs a step in parallel and journals its value",
    },
    Family {
        fns: &["tokio::task::spawn_blocking"],
        macros: NONE,
        types: NONE,
        methods: &["spawn_blocking"],
        why: "run the blocking work again: it leaves the task and is not journaled",
        instead: "call it inside a `checkpoint` closure, which journals its value",
    },
    Family {
        fns: &["std::thread::sleep"],
        macros: NONE,
        types: NONE,
        methods: NONE,
        why: "sleep again, and it blocks a runtime worker meanwhile",
        instead: "use `durable::sleep`, which journals its deadline and parks the task without holding a worker",
    },
    Family {
        fns: &[
            "std::time::SystemTime::now",
            "std::time::Instant::now",
            "tokio::time::Instant::now",
            "chrono::Utc::now",
            "chrono::Utc::today",
            "chrono::Local::now",
            "chrono::Local::today",
            "time::OffsetDateTime::now_utc",
            "time::OffsetDateTime::now_local",
            "time::UtcDateTime::now",
            "*::now",
            "*::now_utc",
            "*::now_local",
            "*::today",
            "*::elapsed",
        ],
        macros: NONE,
        types: NONE,
        methods: &["elapsed"],
        why: "read the clock again and could take another path",
        instead: "use `durable::now()`, which journals the instant (and subtract two of them for a duration), or read the clock inside a `checkpoint`",
    },
    Family {
        fns: &[
            "rand::random",
            "rand::random_range",
            "rand::random_bool",
            "rand::random_ratio",
            "rand::random_iter",
            "rand::fill",
            "rand::thread_rng",
            "rand::rng",
            "*::from_entropy",
            "*::from_os_rng",
            "fastrand::*",
            "getrandom::*",
        ],
        macros: NONE,
        types: &[
            "rand::rngs::OsRng",
            "rand::rngs::ThreadRng",
            "rand_core::OsRng",
        ],
        methods: NONE,
        why: "draw other values and could take another path",
        instead: "use `durable::uuid()` for a journaled random identifier, seed a generator from it, or draw inside a `checkpoint`, which journals the result",
    },
    Family {
        fns: &[
            "uuid::Uuid::new_v4",
            "uuid::Uuid::now_v1",
            "uuid::Uuid::now_v6",
            "uuid::Uuid::now_v7",
            "ulid::Ulid::new",
        ],
        macros: NONE,
        types: NONE,
        methods: NONE,
        why: "make another identifier",
        instead: "use `durable::uuid()`, which journals it",
    },
    Family {
        fns: &[
            "std::env::var",
            "std::env::var_os",
            "std::env::vars",
            "std::env::vars_os",
            "dotenvy::var",
        ],
        macros: NONE,
        types: NONE,
        methods: NONE,
        why: "read the environment again, which may differ on the instance that resumes the task or after a restart",
        instead: "read it once at start-up into the tool's `State`, or inside a `checkpoint`, which journals it",
    },
];

/// Paths under a refused pattern that are deterministic.
const ALLOWED: &[&str] = &["fastrand::Rng::with_seed"];

/// A bare name that collides with one of tokio's or std's (or another
/// crate's refused one): refused in a body unless written `durable::…`.
pub(crate) struct Bare {
    pub(crate) name: &'static str,
    /// A refused path the name may stand for (its family gives the reason).
    pub(crate) may_be: &'static str,
    /// Whether `durable::<name>` exists.
    pub(crate) durable: bool,
}

macro_rules! bare {
    ($($name:literal => $may_be:literal, $durable:literal;)*) => {
        &[$(Bare { name: $name, may_be: $may_be, durable: $durable }),*]
    };
}

/// Every refused bare name.
pub(crate) const BARE: &[Bare] = bare! {
    "sleep" => "tokio::time::sleep", true;
    "sleep_until" => "tokio::time::sleep_until", false;
    "spawn" => "tokio::spawn", true;
    "spawn_local" => "tokio::task::spawn_local", false;
    "spawn_blocking" => "tokio::task::spawn_blocking", false;
    "select" => "futures::future::select", true;
    "select_all" => "futures::future::select_all", true;
    "select_ok" => "futures::future::select_ok", false;
    "try_select" => "futures::future::try_select", false;
    "timeout" => "tokio::time::timeout", false;
    "timeout_at" => "tokio::time::timeout_at", false;
    "interval" => "tokio::time::interval", false;
    "interval_at" => "tokio::time::interval_at", false;
    "now" => "std::time::SystemTime::now", true;
    "random" => "rand::random", false;
    "thread_rng" => "rand::thread_rng", false;
    "rng" => "rand::rng", false;
};

/// The kind of place a path is written in.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A value: a fn called or named, a const, an associated fn.
    Value,
    /// A macro invocation.
    Macro,
    /// A type.
    Type,
}

/// The family `segments` (a path as resolved) belongs to, if any.
pub(crate) fn family(segments: &[String], kind: Kind) -> Option<&'static Family> {
    if segments.iter().any(|s| s == "durable")
        || ALLOWED
            .iter()
            .any(|a| a.split("::").eq(segments.iter().map(String::as_str)))
    {
        return None;
    }
    FAMILIES.iter().find(|f| match kind {
        Kind::Macro => f.macros.iter().any(|p| matches(p, segments, 1)),
        Kind::Type => f.types.iter().any(|p| matches(p, segments, 1)),
        Kind::Value => {
            f.fns.iter().any(|p| matches(p, segments, 2))
                // `JoinSet::new`, `thread::Builder::new`: a refused type
                // at the start of the path.
                || (1..=segments.len())
                    .any(|n| f.types.iter().any(|p| matches(p, &segments[..n], 1)))
        }
    })
}

/// The family of a method called by `name` with `args` arguments.
pub(crate) fn method_family(name: &str, args: usize) -> Option<&'static Family> {
    // `elapsed` takes none; a method of that name with arguments is another.
    if name == "elapsed" && args > 0 {
        return None;
    }
    FAMILIES.iter().find(|f| f.methods.contains(&name))
}

/// The bare name `name`, if refused.
pub(crate) fn bare(name: &str) -> Option<&'static Bare> {
    BARE.iter().find(|b| b.name == name)
}

/// Whether `segments` match `pattern` (see the module's doc), a path whose
/// last `min` segments at least must be written unless it says otherwise.
fn matches(pattern: &str, segments: &[String], min: usize) -> bool {
    let (pattern, min) = match pattern.split_once('|') {
        Some((_, tail)) => (pattern.replace('|', ""), tail.split("::").count()),
        None => (pattern.to_owned(), min),
    };
    let pattern: Vec<&str> = pattern.split("::").collect();
    if pattern.last() == Some(&"*") {
        let prefix = &pattern[..pattern.len() - 1];
        return segments.len() > prefix.len() && prefix.iter().zip(segments).all(|(p, s)| p == s);
    }
    if pattern.first() == Some(&"*") {
        let rest = &pattern[1..];
        return segments.len() > rest.len()
            && ends_with(rest, &segments[segments.len() - rest.len()..]);
    }
    segments.len() >= min.min(pattern.len()) && ends_with(&pattern, segments)
}

/// Whether `full` ends with the segments `tail`.
fn ends_with(full: &[&str], tail: &[String]) -> bool {
    full.len() >= tail.len()
        && full[full.len() - tail.len()..]
            .iter()
            .zip(tail)
            .all(|(a, b)| a == b)
}

/// The message for a refused path, as written (`written`, with `!` for a
/// macro) and as meant (`meant`, when a `use` made it another).
pub(crate) fn message(written: &str, through: &str, f: &Family, opt_out: &str) -> String {
    format!(
        "`{written}`{through} in a task tool's body: a replay would {}; {} (or mark the \
         statement `#[{opt_out}]` if that is intended)",
        f.why, f.instead
    )
}

/// The message for a refused bare name.
pub(crate) fn bare_message(b: &Bare, opt_out: &str) -> String {
    let f = family(&split(b.may_be), Kind::Value).expect("a bare name stands for a refused path");
    let name = b.name;
    let write = if b.durable {
        format!(
            "write `durable::{name}` for the runtime's journaled one, or the path of the one you \
             mean"
        )
    } else {
        format!(
            "{}; if it is your own, write its path (`self::{name}`)",
            f.instead
        )
    };
    let could_be = if name == "now" {
        "another crate's `now` reads the clock".to_owned()
    } else {
        format!("after `use {};` there it is {}", b.may_be, owner(b.may_be))
    };
    format!(
        "bare `{name}` in a task tool's body: this check cannot see the `use` items at module \
         level, and {could_be}: a replay would {}; {write} (or mark the statement \
         `#[{opt_out}]` if that is intended)",
        f.why
    )
}

/// Whose `path` is, as a possessive (`tokio's`).
fn owner(path: &str) -> &'static str {
    match path.split("::").next() {
        Some("tokio") => "tokio's",
        Some("std") => "std's",
        Some("futures") => "futures'",
        Some("rand") => "rand's",
        _ => "another crate's",
    }
}

/// How a method call reads in a message: `.elapsed()`, `.spawn(..)`.
pub(crate) fn method_shown(name: &str, args: usize) -> String {
    if args == 0 {
        format!(".{name}()")
    } else {
        format!(".{name}(..)")
    }
}

/// `a::b` as segments.
pub(crate) fn split(path: &str) -> Vec<String> {
    path.split("::").map(str::to_owned).collect()
}

#[cfg(test)]
mod tests {
    use super::{Kind, family, split};

    fn refused(path: &str, kind: Kind) -> bool {
        family(&split(path), kind).is_some()
    }

    #[test]
    fn patterns() {
        assert!(refused("time::sleep", Kind::Value));
        assert!(!refused("sleep", Kind::Value));
        assert!(refused("JoinSet::new", Kind::Value));
        assert!(refused("JoinSet", Kind::Type));
        assert!(refused("thread::Builder::new", Kind::Value));
        assert!(!refused("Builder::new", Kind::Value));
        assert!(refused("Utc::today", Kind::Value));
        assert!(refused("jiff::Zoned::now", Kind::Value));
        assert!(!refused("now", Kind::Value));
        assert!(!refused("durable::now", Kind::Value));
        assert!(!refused("mcp_tasks_runtime::durable::now", Kind::Value));
        assert!(refused("fastrand::u32", Kind::Value));
        assert!(refused("fastrand::Rng::new", Kind::Value));
        assert!(!refused("fastrand::Rng::with_seed", Kind::Value));
        assert!(!refused("rand::rngs::StdRng::seed_from_u64", Kind::Value));
        assert!(refused("StdRng::from_entropy", Kind::Value));
        assert!(refused("OsRng", Kind::Type));
        assert!(refused("stream::select", Kind::Value));
        assert!(refused("FuturesUnordered::new", Kind::Value));
        assert!(refused("select", Kind::Macro));
        assert!(!refused("join", Kind::Macro));
        assert!(refused("env::var", Kind::Value));
        assert!(!refused("var", Kind::Value));
    }
}
