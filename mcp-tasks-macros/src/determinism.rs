//! Refuses, in a tool's body, the calls that escape the journal or differ on
//! replay (`tokio::time::sleep`, `tokio::spawn`, `Instant::now`, …), each at
//! its path, and strips the `#[allow_nondeterminism]` marks that opt out.
//!
//! The check is syntactic: a path is matched as written, after the `use`
//! items of the fn's own body are applied to its first segment. What a name
//! imported at module level means cannot be seen, so a bare name is never
//! refused unless a `use` in the body says where it comes from: a bare
//! `sleep(..)` or `spawn(..)` is taken for the runtime's durable one
//! (`durable::sleep` imported by name). The runtime's are written
//! `durable::sleep(..)`, a path no refused one ends with. A path of two or
//! more segments is refused when it ends a refused path (`time::sleep`,
//! `thread::spawn`, `Instant::now`), whatever module it was imported through.
//!
//! Not checked: the arguments of `checkpoint`, `step` and `spawn` (their
//! closures run once, and their values are journaled), items declared in the
//! body (helpers, wherever they are, are not seen), and the statements or
//! expressions marked `#[allow_nondeterminism]`.

use syn::{
    Attribute, Expr, ExprCall, Ident, ItemUse, Macro, Path, Token, UseTree,
    punctuated::Punctuated,
    visit_mut::{self, VisitMut},
};

use crate::errors::Errors;

/// The attribute that opts one statement or expression out of the check.
pub(crate) const OPT_OUT: &str = "allow_nondeterminism";

/// A family of refused paths and what to write instead.
struct Refused {
    /// Full paths (`::`-separated); a macro's without the `!`.
    paths: &'static [&'static str],
    /// Whether these are macros (matched against macro invocations only).
    is_macro: bool,
    /// Why a replay cannot repeat it: follows "a replay would …".
    why: &'static str,
    /// The durable alternative.
    instead: &'static str,
}

/// Every refused path. Kept in the order `task_tool.md` lists them.
const REFUSED: &[Refused] = &[
    Refused {
        paths: &[
            "tokio::select",
            "tokio::macros::select",
            "futures::select",
            "futures::select_biased",
            "futures_util::select",
            "futures_util::select_biased",
        ],
        is_macro: true,
        why: "not know which branch won (it is not journaled, and depends on timing and poll order) and could take another branch, dropping a question or step of the first run",
        instead: "race journaled steps with `durable::select` or `durable::select_all`, which journal the winner, or race plain futures inside one `checkpoint`",
    },
    Refused {
        paths: &["futures::future::select", "futures::future::select_all"],
        is_macro: false,
        why: "not know which future won (it is not journaled, and depends on timing) and could take another branch",
        instead: "use `durable::select` or `durable::select_all`, which journal the winner, or race plain futures inside one `checkpoint`",
    },
    Refused {
        paths: &["tokio::time::sleep", "tokio::time::sleep_until"],
        is_macro: false,
        why: "wait again (the timer is not journaled), and a task parked on a question never wakes to see it fire",
        instead: "use `durable::sleep`, which journals its deadline and parks the task without holding a worker",
    },
    Refused {
        paths: &["tokio::time::timeout", "tokio::time::timeout_at"],
        is_macro: false,
        why: "time the future again and could decide otherwise, and a question under it parks the task so its timer never fires",
        instead: "give a question a deadline with `Question::timeout`, race a step against `durable::sleep` with `durable::select`, or time out work inside one `checkpoint`",
    },
    Refused {
        paths: &["tokio::time::interval", "tokio::time::interval_at"],
        is_macro: false,
        why: "tick again, at other times (its ticks are not journaled)",
        instead: "call `durable::sleep` in a loop",
    },
    Refused {
        paths: &[
            "tokio::spawn",
            "tokio::task::spawn",
            "tokio::task::spawn_local",
            "std::thread::spawn",
        ],
        is_macro: false,
        why: "run the spawned work again: it leaves the task, so its steps run unjournaled, once per replay",
        instead: "use `durable::spawn`, which runs a step in parallel and journals its value",
    },
    Refused {
        paths: &["tokio::task::spawn_blocking"],
        is_macro: false,
        why: "run the blocking work again: it leaves the task and is not journaled",
        instead: "call it inside a `checkpoint` closure, which journals its value",
    },
    Refused {
        paths: &["std::thread::sleep"],
        is_macro: false,
        why: "sleep again, and it blocks a runtime worker meanwhile",
        instead: "use `durable::sleep`, which journals its deadline and parks the task without holding a worker",
    },
    Refused {
        paths: &[
            "std::time::SystemTime::now",
            "std::time::Instant::now",
            "tokio::time::Instant::now",
            "chrono::Utc::now",
            "chrono::offset::Utc::now",
            "chrono::Local::now",
            "chrono::offset::Local::now",
            "time::OffsetDateTime::now_utc",
            "time::OffsetDateTime::now_local",
        ],
        is_macro: false,
        why: "read the clock again and could take another path",
        instead: "use `durable::now()`, which journals the instant, or read the clock inside a `checkpoint`",
    },
    Refused {
        paths: &["rand::random", "rand::thread_rng", "rand::rng"],
        is_macro: false,
        why: "draw other values and could take another path",
        instead: "use `durable::uuid()` for a journaled random identifier, or draw inside a `checkpoint`, which journals the result",
    },
    Refused {
        paths: &["uuid::Uuid::new_v4", "uuid::Uuid::now_v7"],
        is_macro: false,
        why: "make another identifier",
        instead: "use `durable::uuid()`, which journals it",
    },
];

/// The runtime's fns whose arguments (the name and the closure) are not
/// checked: the closure's work is journaled as one value.
const COVERING: &[&str] = &["checkpoint", "step", "spawn"];

/// Checks `block`, the body of a `#[task_tool]` fn, reporting each refused
/// path to `errors` (none when `allowed`, the fn-wide opt-out), and removes
/// every `#[allow_nondeterminism]` from it.
pub(crate) fn check(block: &mut syn::Block, allowed: bool, errors: &mut Errors) {
    let mut imports = Imports::default();
    imports.visit_block_mut(block);
    let mut checker = Checker {
        imports,
        errors,
        quiet: usize::from(allowed),
    };
    checker.visit_block_mut(block);
}

/// What the `use` items of the body bring in: aliases (`sleep` →
/// `tokio::time::sleep`, `time` → `tokio::time`) and glob prefixes.
#[derive(Default)]
struct Imports {
    aliases: Vec<(String, Vec<String>)>,
    globs: Vec<Vec<String>>,
}

impl Imports {
    fn add(&mut self, prefix: &mut Vec<String>, tree: &UseTree) {
        match tree {
            UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.add(prefix, &p.tree);
                prefix.pop();
            }
            UseTree::Name(n) => self.alias(prefix, &n.ident, &n.ident),
            UseTree::Rename(r) => self.alias(prefix, &r.ident, &r.rename),
            UseTree::Glob(_) => self.globs.push(prefix.clone()),
            UseTree::Group(g) => {
                for tree in &g.items {
                    self.add(prefix, tree);
                }
            }
        }
    }

    fn alias(&mut self, prefix: &[String], name: &Ident, alias: &Ident) {
        let mut full = prefix.to_vec();
        if name != "self" {
            full.push(name.to_string());
        }
        let alias = if alias == "self" {
            prefix.last().cloned().unwrap_or_default()
        } else {
            alias.to_string()
        };
        self.aliases.push((alias, full));
    }

    /// The paths `path` may stand for: itself with its first segment
    /// replaced by what a `use` in the body made it mean, or a bare name
    /// under each glob.
    fn resolve(&self, path: &Path) -> Vec<Vec<String>> {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        let Some(first) = segments.first() else {
            return Vec::new();
        };
        if path.leading_colon.is_none()
            && let Some((_, full)) = self.aliases.iter().rev().find(|(a, _)| a == first)
        {
            let mut resolved = full.clone();
            resolved.extend(segments[1..].iter().cloned());
            return vec![resolved];
        }
        let mut out = vec![segments.clone()];
        if segments.len() == 1 && path.leading_colon.is_none() {
            out.extend(self.globs.iter().map(|g| {
                let mut full = g.clone();
                full.push(first.clone());
                full
            }));
        }
        out
    }
}

impl VisitMut for Imports {
    fn visit_item_use_mut(&mut self, u: &mut ItemUse) {
        self.add(&mut Vec::new(), &u.tree);
    }
}

/// The refused family `path` belongs to, if any, and the path it was taken
/// to mean (through a `use` in the body, or as written).
fn refused(
    imports: &Imports,
    path: &Path,
    is_macro: bool,
) -> Option<(&'static Refused, Vec<String>)> {
    let resolved = imports.resolve(path);
    REFUSED
        .iter()
        .filter(|r| r.is_macro == is_macro)
        .find_map(|r| {
            r.paths.iter().find_map(|full| {
                let full: Vec<&str> = full.split("::").collect();
                // A bare fn name is the runtime's unless a `use` in the body
                // says otherwise (then it resolved to a longer path); a bare
                // macro name (`select!`) never is.
                resolved
                    .iter()
                    .find(|p| (p.len() >= 2 || is_macro) && ends_with(&full, p))
                    .map(|p| (r, p.clone()))
            })
        })
}

/// Whether `full` ends with the segments `tail`.
fn ends_with(full: &[&str], tail: &[String]) -> bool {
    full.len() >= tail.len()
        && full[full.len() - tail.len()..]
            .iter()
            .zip(tail)
            .all(|(a, b)| a == b)
}

struct Checker<'e> {
    imports: Imports,
    errors: &'e mut Errors,
    /// Above 0 inside what is not checked (opted out, or covered by a
    /// journaled step); attributes are still stripped there.
    quiet: usize,
}

impl Checker<'_> {
    fn path(&mut self, path: &Path, is_macro: bool) {
        if self.quiet > 0 {
            return;
        }
        let Some((r, meant)) = refused(&self.imports, path, is_macro) else {
            return;
        };
        let bang = if is_macro { "!" } else { "" };
        let written = crate::paths::to_string(path);
        let meant = meant.join("::");
        let through = if written.trim_start_matches("::") == meant {
            String::new()
        } else {
            format!(" (`{meant}{bang}`, as a `use` in the body imports it)")
        };
        self.errors.spanned(
            path,
            format_args!(
                "`{written}{bang}`{through} in a task tool's body: a replay would {}; {} (or \
                 mark the statement `#[{OPT_OUT}]` if that is intended)",
                r.why, r.instead
            ),
        );
    }

    /// Runs `f` with the check off.
    fn quietly(&mut self, f: impl FnOnce(&mut Self)) {
        self.quiet += 1;
        f(self);
        self.quiet -= 1;
    }

    /// Runs `f`, with the check off when `opted_out`.
    fn visit(&mut self, opted_out: bool, f: impl FnOnce(&mut Self)) {
        if opted_out {
            self.quietly(f);
        } else {
            f(self);
        }
    }
}

/// Whether `attrs` hold the opt-out; removes it.
fn opt_out(attrs: Option<&mut Vec<Attribute>>) -> bool {
    attrs.is_some_and(|attrs| {
        let before = attrs.len();
        attrs.retain(|a| !a.path().is_ident(OPT_OUT));
        attrs.len() < before
    })
}

/// A call to `checkpoint`, `step` or the runtime's `spawn` (any path ending
/// so that is not itself refused, like `tokio::spawn`).
fn covering(imports: &Imports, call: &ExprCall) -> bool {
    let Expr::Path(p) = &*call.func else {
        return false;
    };
    p.path
        .segments
        .last()
        .is_some_and(|s| COVERING.iter().any(|c| s.ident == c))
        && refused(imports, &p.path, false).is_none()
}

impl VisitMut for Checker<'_> {
    fn visit_expr_mut(&mut self, expr: &mut Expr) {
        let opted_out = opt_out(expr_attrs(expr));
        self.visit(opted_out, |this| match expr {
            Expr::Call(call) if covering(&this.imports, call) => {
                this.visit_expr_mut(&mut call.func);
                this.quietly(|this| {
                    for arg in &mut call.args {
                        this.visit_expr_mut(arg);
                    }
                });
            }
            Expr::Path(p) => {
                this.path(&p.path, false);
                visit_mut::visit_expr_path_mut(this, p);
            }
            _ => visit_mut::visit_expr_mut(this, expr),
        });
    }

    fn visit_local_mut(&mut self, local: &mut syn::Local) {
        let opted_out = opt_out(Some(&mut local.attrs));
        self.visit(opted_out, |this| visit_mut::visit_local_mut(this, local));
    }

    fn visit_stmt_macro_mut(&mut self, stmt: &mut syn::StmtMacro) {
        let opted_out = opt_out(Some(&mut stmt.attrs));
        self.visit(opted_out, |this| this.visit_macro_mut(&mut stmt.mac));
    }

    fn visit_arm_mut(&mut self, arm: &mut syn::Arm) {
        let opted_out = opt_out(Some(&mut arm.attrs));
        self.visit(opted_out, |this| visit_mut::visit_arm_mut(this, arm));
    }

    /// Items in the body (a nested fn, an impl) are helpers: not checked.
    fn visit_item_mut(&mut self, item: &mut syn::Item) {
        self.quietly(|this| visit_mut::visit_item_mut(this, item));
    }

    /// A refused macro is reported; the arguments of another are checked
    /// when they read as expressions (`format!`, `assert!`, `join!`, …).
    fn visit_macro_mut(&mut self, mac: &mut Macro) {
        self.path(&mac.path, true);
        if self.quiet > 0 || refused(&self.imports, &mac.path, true).is_some() {
            return;
        }
        let parser = Punctuated::<Expr, Token![,]>::parse_terminated;
        if let Ok(mut args) = mac.parse_body_with(parser) {
            // Reported only: the macro's tokens are emitted as written.
            for arg in &mut args {
                self.visit_expr_mut(arg);
            }
        }
    }
}

/// The attributes of `expr`, for the kinds that have them.
fn expr_attrs(expr: &mut Expr) -> Option<&mut Vec<Attribute>> {
    macro_rules! attrs {
        ($($kind:ident),*) => {
            match expr {
                $(Expr::$kind(e) => Some(&mut e.attrs),)*
                _ => None,
            }
        };
    }
    attrs!(
        Array, Assign, Async, Await, Binary, Block, Break, Call, Cast, Closure, Const, Continue,
        Field, ForLoop, Group, If, Index, Infer, Let, Lit, Loop, Macro, Match, MethodCall, Paren,
        Path, Range, RawAddr, Reference, Repeat, Return, Struct, Try, TryBlock, Tuple, Unary,
        Unsafe, While, Yield
    )
}

#[cfg(test)]
mod tests {
    use quote::ToTokens;

    use super::check;
    use crate::errors::Errors;

    /// The paths refused in `body` (the text of a block), in order, and the
    /// block as emitted.
    fn refused(body: &str) -> (Vec<String>, String) {
        let mut block: syn::Block = syn::parse_str(body).expect("a block");
        let mut errors = Errors::default();
        check(&mut block, false, &mut errors);
        let found = errors
            .into_compile_errors()
            .to_string()
            .split("compile_error !")
            .skip(1)
            .map(|e| {
                let start = e.find('`').expect("a quoted path") + 1;
                let len = e[start..].find('`').expect("its end");
                e[start..start + len].to_owned()
            })
            .collect();
        (found, block.to_token_stream().to_string())
    }

    #[test]
    fn paths_are_matched_as_written_and_through_uses_in_the_body() {
        let (found, _) = refused(
            "{
                tokio::time::sleep(d).await;
                ::tokio::spawn(f);
                time::timeout(d, f).await;
                thread::sleep(d);
                let f = Instant::now;
                chrono::offset::Utc::now();
                {
                    use tokio::time::interval as every;
                    use std::time::{self as clock};
                    use rand::*;
                    every(d);
                    clock::SystemTime::now();
                    thread_rng();
                }
                select! { _ = a => {} };
                format!(\"{:?}\", Uuid::new_v4());
            }",
        );
        assert_eq!(
            found,
            [
                "tokio::time::sleep",
                "::tokio::spawn",
                "time::timeout",
                "thread::sleep",
                "Instant::now",
                "chrono::offset::Utc::now",
                "every",
                "clock::SystemTime::now",
                "thread_rng",
                "select!",
                "Uuid::new_v4",
            ]
        );
    }

    #[test]
    fn bare_runtime_names_and_step_closures_are_not_refused() {
        let (found, _) = refused(
            "{
                sleep(d).await;
                let s = spawn(\"s\", || async { tokio::spawn(f); Ok(1) });
                select(a, b).await;
                now().await;
                uuid().await;
                mcp_tasks_runtime::durable::sleep(d).await;
                durable::sleep(d).await;
                let s = durable::spawn(\"s\", || async { tokio::spawn(f); Ok(1) });
                durable::select(a, b).await;
                durable::now().await;
                checkpoint(\"c\", || async { Ok(Instant::now()) }).await;
                rt::step(\"s\", || async { tokio::time::sleep(d).await }).await;
                fn helper() { std::thread::sleep(d) }
            }",
        );
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn the_opt_out_is_honoured_and_removed() {
        let (found, emitted) = refused(
            "{
                #[allow_nondeterminism]
                let t = Instant::now();
                #[allow_nondeterminism]
                tokio::time::sleep(d).await;
                checkpoint(\"c\", || async { #[allow_nondeterminism] let x = 1; Ok(x) }).await;
                if first_run() {
                    #[allow_nondeterminism]
                    tokio::time::sleep(d).await;
                }
                std::thread::sleep(d);
            }",
        );
        assert_eq!(found, ["std::thread::sleep"]);
        assert!(!emitted.contains("allow_nondeterminism"), "{emitted}");
    }
}
