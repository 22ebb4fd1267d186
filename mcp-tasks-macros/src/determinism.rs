//! Refuses, in a tool's body, the calls that escape the journal or differ on
//! replay (`tokio::time::sleep`, `tokio::spawn`, `Instant::now`, …), each at
//! its path, and strips the `#[allow_nondeterminism]` marks that opt out.
//! What is refused is listed once, in `refused.rs`.
//!
//! The check is syntactic: a path is matched as written, after the `use`
//! items of the fn's own body are applied to its first segment. What a name
//! imported at module level means cannot be seen, so a bare call whose name
//! collides with tokio's or std's (`sleep(..)`, `spawn(..)`, `select(..)`,
//! `timeout(..)`, `now()`, …) is refused unless a `use` in the body says
//! where it comes from: the runtime's are written `durable::sleep(..)`, a
//! path no refused one ends with. A path of two or more segments is refused
//! when it ends a refused path (`time::sleep`, `thread::spawn`,
//! `Instant::now`), whatever module it was imported through; a refused type
//! (`JoinSet`, `FuturesUnordered`, `OsRng`) wherever it is named; a refused
//! method (`.elapsed()`, `.spawn(..)`) on any receiver.
//!
//! Checked too: items declared in the body (a nested fn, an impl, a
//! `macro_rules!`, whose rules are read as tokens) and the contents of
//! macros (as expressions, or else as tokens). Not checked: the arguments of
//! `checkpoint`, `step` and `durable::spawn` (their closures run once, and
//! their values are journaled), and what is marked `#[allow_nondeterminism]`.
//!
//! The same [`Checker`] runs in the crate-wide check (`crate_check.rs`), with
//! an [`Env`] that resolves the `use` items of the module and follows calls
//! into the same crate.

use std::collections::HashSet;

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};
use quote::ToTokens;
use syn::{
    Attribute, Expr, ExprCall, Ident, ItemUse, Macro, Path, Token, UseTree,
    punctuated::Punctuated,
    visit_mut::{self, VisitMut},
};

use crate::{
    errors::Errors,
    refused::{self, Kind},
};

/// The attribute that opts one statement or expression out of the check.
pub(crate) const OPT_OUT: &str = "allow_nondeterminism";

/// The runtime's fns whose arguments (the name and the closure) are not
/// checked: the closure's work is journaled as one value.
const COVERING: &[&str] = &["checkpoint", "step", "spawn"];

/// Keywords after which a name is declared, not used (in loose tokens).
const DECLARING: &[&str] = &[
    "fn", "let", "mut", "struct", "enum", "mod", "use", "impl", "trait", "type", "const", "static",
];

/// What a path written in a body stands for.
pub(crate) enum Target {
    /// A path of another crate (or one the check cannot place): matched
    /// against the refused ones.
    Other(Vec<String>),
    /// A fn or macro of the same crate: followed by the crate-wide check.
    Local(Vec<String>),
}

/// Where the check runs: what it can see beyond the body, and where its
/// findings go.
pub(crate) trait Env {
    /// What `segments` (as written, or as a `use` in the body made them)
    /// stand for at module level.
    fn resolve(&self, segments: Vec<String>, leading_colon: bool, kind: Kind) -> Vec<Target>;
    /// Whether a bare name that collides with a refused one is refused (when
    /// the module's `use` items cannot be seen).
    fn bare_names(&self) -> bool;
    /// A finding at `at`.
    fn report(&mut self, at: TokenStream, message: String);
    /// A call of `target`, a fn or macro of the same crate, at `at`.
    fn local(&mut self, target: &[String], kind: Kind, at: TokenStream);
}

/// The attribute macro's view: the body alone; findings are compile errors.
struct Body<'e> {
    errors: &'e mut Errors,
}

impl Env for Body<'_> {
    fn resolve(&self, segments: Vec<String>, _: bool, _: Kind) -> Vec<Target> {
        vec![Target::Other(segments)]
    }

    fn bare_names(&self) -> bool {
        true
    }

    fn report(&mut self, at: TokenStream, message: String) {
        self.errors.spanned(at, message);
    }

    fn local(&mut self, _: &[String], _: Kind, _: TokenStream) {}
}

/// Checks `block`, the body of a `#[task_tool]` fn, reporting each refused
/// path to `errors` (none when `allowed`, the fn-wide opt-out), and removes
/// every `#[allow_nondeterminism]` from it.
pub(crate) fn check(block: &mut syn::Block, allowed: bool, errors: &mut Errors) {
    let mut env = Body { errors };
    Checker::new(block, &mut env, allowed).visit_block_mut(block);
}

/// What the `use` items of the body bring in: aliases (`sleep` →
/// `tokio::time::sleep`, `time` → `tokio::time`) and glob prefixes.
#[derive(Default)]
pub(crate) struct Imports {
    aliases: Vec<(String, Vec<String>)>,
    globs: Vec<Vec<String>>,
}

impl Imports {
    pub(crate) fn add(&mut self, prefix: &mut Vec<String>, tree: &UseTree) {
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
        if alias != "_" {
            self.aliases.push((alias, full));
        }
    }

    /// Adds what `other` imports.
    pub(crate) fn extend(&mut self, other: Imports) {
        self.aliases.extend(other.aliases);
        self.globs.extend(other.globs);
    }

    /// The glob prefixes.
    pub(crate) fn globs(&self) -> &[Vec<String>] {
        &self.globs
    }

    /// What `name` is an alias of.
    pub(crate) fn alias_of(&self, name: &str) -> Option<&[String]> {
        self.aliases
            .iter()
            .rev()
            .find(|(a, _)| a == name)
            .map(|(_, full)| full.as_slice())
    }
}

impl VisitMut for Imports {
    fn visit_item_use_mut(&mut self, u: &mut ItemUse) {
        self.add(&mut Vec::new(), &u.tree);
    }
}

/// The names the body binds (`let`, closure and fn parameters, nested fns):
/// a call of one is not the bare name of a refused fn.
#[derive(Default)]
struct Locals(HashSet<String>);

impl VisitMut for Locals {
    fn visit_pat_ident_mut(&mut self, p: &mut syn::PatIdent) {
        self.0.insert(p.ident.to_string());
        visit_mut::visit_pat_ident_mut(self, p);
    }

    fn visit_item_fn_mut(&mut self, f: &mut syn::ItemFn) {
        self.0.insert(f.sig.ident.to_string());
        visit_mut::visit_item_fn_mut(self, f);
    }
}

/// The segments of `path` as written.
pub(crate) fn segments(path: &Path) -> Vec<String> {
    path.segments.iter().map(|s| s.ident.to_string()).collect()
}

/// Walks a body, reporting to its [`Env`].
pub(crate) struct Checker<'e> {
    imports: Imports,
    locals: HashSet<String>,
    env: &'e mut dyn Env,
    /// Above 0 inside what is not checked (opted out, or covered by a
    /// journaled step); attributes are still stripped there.
    quiet: usize,
}

/// A path found refused: how it reads, and how it was taken.
struct Found {
    family: &'static refused::Family,
    meant: Vec<String>,
    /// Whether a `use` in the body made it mean `meant`.
    in_body: bool,
}

impl<'e> Checker<'e> {
    /// A checker of `block` (which it reads for `use` items and local names),
    /// quiet from the start when `allowed`.
    pub(crate) fn new(block: &mut syn::Block, env: &'e mut dyn Env, allowed: bool) -> Self {
        let mut imports = Imports::default();
        imports.visit_block_mut(block);
        let mut locals = Locals::default();
        locals.visit_block_mut(block);
        Checker {
            imports,
            locals: locals.0,
            env,
            quiet: usize::from(allowed),
        }
    }

    /// What `segments` stand for: through a `use` in the body (its alias of
    /// the first segment, or each glob for a bare name), then the module.
    fn targets(&self, segments: &[String], leading_colon: bool, kind: Kind) -> Vec<(Target, bool)> {
        let Some(first) = segments.first() else {
            return Vec::new();
        };
        if !leading_colon && let Some(full) = self.imports.alias_of(first) {
            let mut resolved = full.to_vec();
            resolved.extend(segments[1..].iter().cloned());
            return self
                .env
                .resolve(resolved, false, kind)
                .into_iter()
                .map(|t| (t, true))
                .collect();
        }
        let mut out: Vec<(Target, bool)> = self
            .env
            .resolve(segments.to_vec(), leading_colon, kind)
            .into_iter()
            .map(|t| (t, false))
            .collect();
        if segments.len() == 1 && !leading_colon {
            for glob in self.imports.globs() {
                let mut full = glob.clone();
                full.push(first.clone());
                out.extend(
                    self.env
                        .resolve(full, false, kind)
                        .into_iter()
                        .map(|t| (t, true)),
                );
            }
        }
        out
    }

    /// The refused family `segments` stand for, if any; calls of the same
    /// crate's fns are handed to the env when `follow`.
    fn find(
        &mut self,
        segments: &[String],
        leading_colon: bool,
        kind: Kind,
        at: Option<&TokenStream>,
    ) -> Option<Found> {
        let mut found = None;
        for (target, in_body) in self.targets(segments, leading_colon, kind) {
            match target {
                Target::Other(meant) => {
                    if found.is_none()
                        && let Some(family) = refused::family(&meant, kind)
                    {
                        found = Some(Found {
                            family,
                            meant,
                            in_body,
                        });
                    }
                }
                Target::Local(fn_path) => {
                    if let Some(at) = at
                        && self.quiet == 0
                    {
                        self.env.local(&fn_path, kind, at.clone());
                    }
                }
            }
        }
        found
    }

    /// Whether `segments` is a bare name refused in call position.
    fn bare(&self, segments: &[String], leading_colon: bool) -> Option<&'static refused::Bare> {
        let [name] = segments else { return None };
        if leading_colon
            || !self.env.bare_names()
            || self.locals.contains(name)
            || self.imports.alias_of(name).is_some()
        {
            return None;
        }
        refused::bare(name)
    }

    /// Checks a path written `segments` at `at`; `bang` for a macro.
    /// Returns whether it was refused.
    fn check(
        &mut self,
        segments: &[String],
        leading_colon: bool,
        kind: Kind,
        called: bool,
        at: &TokenStream,
    ) -> bool {
        if self.quiet > 0 {
            // Nor followed: a call in a journaled closure runs once.
            return false;
        }
        if called
            && kind == Kind::Value
            && let Some(b) = self.bare(segments, leading_colon)
        {
            self.env
                .report(at.clone(), refused::bare_message(b, OPT_OUT));
            return true;
        }
        let Some(found) = self.find(segments, leading_colon, kind, Some(at)) else {
            return false;
        };
        let bang = if kind == Kind::Macro { "!" } else { "" };
        let written = format!(
            "{}{}",
            if leading_colon { "::" } else { "" },
            segments.join("::")
        );
        let meant = found.meant.join("::");
        let through = if written.trim_start_matches("::") == meant {
            String::new()
        } else if found.in_body {
            format!(" (`{meant}{bang}`, as a `use` in the body imports it)")
        } else {
            format!(" (`{meant}{bang}`, as a `use` imports it)")
        };
        self.env.report(
            at.clone(),
            refused::message(&format!("{written}{bang}"), &through, found.family, OPT_OUT),
        );
        true
    }

    fn path(&mut self, path: &Path, kind: Kind, called: bool) -> bool {
        self.check(
            &segments(path),
            path.leading_colon.is_some(),
            kind,
            called,
            &path.to_token_stream(),
        )
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

    /// Checks loose tokens (a `macro_rules!` body, a macro's contents that
    /// are not expressions): paths, calls, macros and methods as they read.
    pub(crate) fn tokens(&mut self, tokens: TokenStream) {
        if self.quiet > 0 {
            return;
        }
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            let first = match &trees[i] {
                TokenTree::Group(g) => {
                    self.tokens(g.stream());
                    i += 1;
                    continue;
                }
                TokenTree::Ident(first) => first,
                TokenTree::Punct(_) | TokenTree::Literal(_) => {
                    i += 1;
                    continue;
                }
            };
            let before = |n: usize| i.checked_sub(n).map(|at| &trees[at]);
            let leading_colon = before(1).is_some_and(|t| is_punct(t, ':'))
                && before(2).is_some_and(|t| is_punct(t, ':'))
                && !before(3).is_some_and(|t| matches!(t, TokenTree::Ident(_)));
            let start = if leading_colon { i - 2 } else { i };
            let mut segs = vec![first.to_string()];
            let mut j = i + 1;
            while j + 1 < trees.len()
                && is_joint_colon(&trees[j])
                && is_punct(&trees[j + 1], ':')
                && let Some(TokenTree::Ident(next)) = trees.get(j + 2)
            {
                segs.push(next.to_string());
                j += 3;
            }
            let at: TokenStream = trees[start..j].iter().cloned().collect();
            let next = trees.get(j);
            let args = match next {
                Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis => {
                    Some(usize::from(!g.stream().is_empty()))
                }
                _ => None,
            };
            // `$x` (a macro's variable, but `$crate`), `fn name`, `let name`.
            let declared = before(1).is_some_and(|t| is_punct(t, '$') && first != "crate")
                || before(1).is_some_and(
                    |t| matches!(t, TokenTree::Ident(k) if DECLARING.iter().any(|d| k == d)),
                );
            if declared {
                i = j;
                continue;
            }
            if before(1).is_some_and(|t| is_punct(t, '.')) && segs.len() == 1 {
                if let Some(args) = args
                    && let Some(f) = refused::method_family(&segs[0], args)
                {
                    let shown = refused::method_shown(&segs[0], args);
                    let message = refused::message(&shown, "", f, OPT_OUT);
                    self.env.report(at, message);
                }
            } else if next.is_some_and(|t| is_punct(t, '!')) {
                if segs != ["macro_rules"] {
                    self.check(&segs, leading_colon, Kind::Macro, false, &at);
                }
            } else {
                self.check(&segs, leading_colon, Kind::Value, args.is_some(), &at);
            }
            i = j;
        }
    }

    /// A method call: refused by name (`.elapsed()`, `.spawn(..)`), unless
    /// what it is called on is refused already (`Handle::current().spawn(..)`).
    fn method(&mut self, call: &syn::ExprMethodCall) {
        if self.quiet > 0 {
            return;
        }
        let name = call.method.to_string();
        let Some(f) = refused::method_family(&name, call.args.len()) else {
            return;
        };
        let mut root = &*call.receiver;
        loop {
            root = match root {
                Expr::MethodCall(m) => &m.receiver,
                Expr::Await(a) => &a.base,
                Expr::Try(t) => &t.expr,
                Expr::Paren(p) => &p.expr,
                Expr::Call(c) => &c.func,
                _ => break,
            };
        }
        if let Expr::Path(p) = root {
            let segments = segments(&p.path);
            if self
                .find(&segments, p.path.leading_colon.is_some(), Kind::Value, None)
                .is_some()
            {
                return;
            }
        }
        let shown = refused::method_shown(&name, call.args.len());
        self.env.report(
            call.method.to_token_stream(),
            refused::message(&shown, "", f, OPT_OUT),
        );
    }
}

fn is_punct(t: &TokenTree, c: char) -> bool {
    matches!(t, TokenTree::Punct(p) if p.as_char() == c)
}

fn is_joint_colon(t: &TokenTree) -> bool {
    matches!(t, TokenTree::Punct(p) if p.as_char() == ':' && p.spacing() == Spacing::Joint)
}

/// Whether `attrs` hold the opt-out; removes it.
fn opt_out(attrs: Option<&mut Vec<Attribute>>) -> bool {
    attrs.is_some_and(|attrs| {
        let before = attrs.len();
        attrs.retain(|a| !a.path().is_ident(OPT_OUT));
        attrs.len() < before
    })
}

impl Checker<'_> {
    /// A call to `checkpoint`, `step` or the runtime's `spawn`: its
    /// arguments are not checked. Reports the callee when refused (a bare
    /// `spawn`, whose arguments are then not checked either, or `tokio::spawn`,
    /// whose are).
    fn call(&mut self, call: &mut ExprCall) {
        let Expr::Path(p) = &mut *call.func else {
            self.visit_expr_mut(&mut call.func);
            for arg in &mut call.args {
                self.visit_expr_mut(arg);
            }
            return;
        };
        let path = p.path.clone();
        let covering_name = path
            .segments
            .last()
            .is_some_and(|s| COVERING.iter().any(|c| s.ident == c));
        let bare = self.quiet == 0
            && self
                .bare(&segments(&path), path.leading_colon.is_some())
                .is_some();
        let refused = self.path(&path, Kind::Value, true);
        visit_mut::visit_expr_path_mut(self, p);
        if covering_name && (!refused || bare) {
            self.quietly(|this| {
                for arg in &mut call.args {
                    this.visit_expr_mut(arg);
                }
            });
        } else {
            for arg in &mut call.args {
                self.visit_expr_mut(arg);
            }
        }
    }

    /// A macro's contents: as expressions, or else as tokens.
    fn macro_contents(&mut self, mac: &mut Macro) {
        let parser = Punctuated::<Expr, Token![,]>::parse_terminated;
        if let Ok(mut args) = mac.parse_body_with(parser) {
            // Reported only: the macro's tokens are emitted as written.
            for arg in &mut args {
                self.visit_expr_mut(arg);
            }
        } else {
            self.tokens(mac.tokens.clone());
        }
    }
}

impl VisitMut for Checker<'_> {
    fn visit_expr_mut(&mut self, expr: &mut Expr) {
        let opted_out = opt_out(expr_attrs(expr));
        self.visit(opted_out, |this| match expr {
            Expr::Call(call) => {
                for attr in &mut call.attrs {
                    this.visit_attribute_mut(attr);
                }
                this.call(call);
            }
            Expr::Path(p) => {
                this.path(&p.path, Kind::Value, false);
                visit_mut::visit_expr_path_mut(this, p);
            }
            Expr::MethodCall(m) => {
                this.method(m);
                visit_mut::visit_expr_method_call_mut(this, m);
            }
            _ => visit_mut::visit_expr_mut(this, expr),
        });
    }

    fn visit_type_path_mut(&mut self, t: &mut syn::TypePath) {
        if t.qself.is_none() {
            self.path(&t.path, Kind::Type, false);
        }
        visit_mut::visit_type_path_mut(self, t);
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

    /// Items in the body (a nested fn, an impl, a `macro_rules!`) are
    /// checked like the body: they run as part of the tool.
    fn visit_item_mut(&mut self, item: &mut syn::Item) {
        let opted_out = opt_out(item_attrs(item));
        self.visit(opted_out, |this| match item {
            syn::Item::Use(_) => {}
            syn::Item::Macro(m) if m.mac.path.is_ident("macro_rules") => {
                this.tokens(m.mac.tokens.clone());
            }
            _ => visit_mut::visit_item_mut(this, item),
        });
    }

    /// A refused macro is reported; the contents of another are checked.
    fn visit_macro_mut(&mut self, mac: &mut Macro) {
        let at = mac.path.to_token_stream();
        if self.check(
            &segments(&mac.path),
            mac.path.leading_colon.is_some(),
            Kind::Macro,
            false,
            &at,
        ) || self.quiet > 0
        {
            return;
        }
        self.macro_contents(mac);
    }
}

/// The attributes of `item`, for the kinds that have them.
fn item_attrs(item: &mut syn::Item) -> Option<&mut Vec<Attribute>> {
    use syn::Item;
    match item {
        Item::Const(i) => Some(&mut i.attrs),
        Item::Enum(i) => Some(&mut i.attrs),
        Item::Fn(i) => Some(&mut i.attrs),
        Item::Impl(i) => Some(&mut i.attrs),
        Item::Macro(i) => Some(&mut i.attrs),
        Item::Mod(i) => Some(&mut i.attrs),
        Item::Static(i) => Some(&mut i.attrs),
        Item::Struct(i) => Some(&mut i.attrs),
        Item::Trait(i) => Some(&mut i.attrs),
        Item::Type(i) => Some(&mut i.attrs),
        Item::Use(i) => Some(&mut i.attrs),
        _ => None,
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
    fn bare_names_that_collide_are_refused() {
        let (found, _) = refused(
            "{
                sleep(d).await;
                let s = spawn(\"s\", || async { tokio::spawn(f); Ok(1) });
                select(a, b).await;
                now().await;
                timeout(d, f).await;
                interval(d);
                random();
                let at = durable::now().await;
                println!(\"{:?}\", at);
                let tick = || 1;
                tick();
                uuid().await;
                checkpoint(\"c\", || async { Ok(1) }).await;
            }",
        );
        assert_eq!(
            found,
            [
                "sleep", "spawn", "select", "now", "timeout", "interval", "random"
            ]
        );
    }

    #[test]
    fn families_methods_types_items_and_macro_rules() {
        let (found, _) = refused(
            "{
                let mut set = JoinSet::new();
                set.spawn(f);
                Handle::current();
                thread::Builder::new().name(n).spawn(f);
                future::select_ok(v).await;
                futures::future::try_select(a, b).await;
                let all: FuturesUnordered<_> = v.into_iter().collect();
                stream::select(a, b);
                UNIX_EPOCH.elapsed();
                fastrand::u32(..);
                OsRng.next_u32();
                StdRng::from_entropy();
                time::UtcDateTime::now();
                chrono::Utc::today();
                env::var(\"X\");
                fn helper() { std::thread::sleep(d) }
                macro_rules! wait { ($d:expr) => { tokio::time::sleep($d) }; }
                vec![tokio::task::spawn_blocking(f); 2];
            }",
        );
        assert_eq!(
            found,
            [
                "JoinSet::new",
                ".spawn(..)",
                "Handle::current",
                "thread::Builder::new",
                "future::select_ok",
                "futures::future::try_select",
                "FuturesUnordered",
                "stream::select",
                ".elapsed()",
                "fastrand::u32",
                "OsRng",
                "StdRng::from_entropy",
                "time::UtcDateTime::now",
                "chrono::Utc::today",
                "env::var",
                "std::thread::sleep",
                "tokio::time::sleep",
                "tokio::task::spawn_blocking",
            ]
        );
    }

    #[test]
    fn durable_names_and_step_closures_are_not_refused() {
        let (found, _) = refused(
            "{
                mcp_tasks_runtime::durable::sleep(d).await;
                durable::sleep(d).await;
                let s = durable::spawn(\"s\", || async { tokio::spawn(f); Ok(1) });
                durable::select(a, b).await;
                durable::select_all(v).await;
                durable::now().await;
                checkpoint(\"c\", || async { Ok(Instant::now()) }).await;
                rt::step(\"s\", || async { tokio::time::sleep(d).await }).await;
                let rng = StdRng::seed_from_u64(7);
                let r = fastrand::Rng::with_seed(7);
                let map: HashMap<String, u32> = HashMap::new();
                #[allow_nondeterminism]
                fn helper() { std::thread::sleep(d) }
                {
                    use mcp_tasks_runtime::durable::sleep;
                    sleep(d).await;
                }
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
