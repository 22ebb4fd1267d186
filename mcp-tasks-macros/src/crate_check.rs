//! `determinism_check!`: the crate-wide check of what `#[task_tool]` cannot
//! see from a tool's body. At compile time it reads every `.rs` file under a
//! directory of the crate (`src` by default), finds the `#[task_tool]` fns,
//! checks their bodies with the same [`Checker`] and list as the attribute,
//! resolving names through the `use` items of their module (`use
//! tokio::time as t;`), and follows every call into the same crate (free
//! fns, `Type::fn`, `macro_rules!` macros), transitively, checking each.
//! It expands to a `DeterminismReport` of the runtime, each finding with
//! its file, line, column and call chain.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    path::{Path as FsPath, PathBuf},
};

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::{
    Item, LitStr, Token,
    parse::{Parse, ParseStream},
    visit_mut::VisitMut,
};

use crate::{
    determinism::{Checker, Env, Imports, OPT_OUT, Target},
    refused::Kind,
};

/// `determinism_check!("dir", crate = path)`, both optional.
struct Args {
    dir: Option<LitStr>,
    krate: Option<syn::Path>,
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Args {
            dir: None,
            krate: None,
        };
        if input.peek(LitStr) {
            args.dir = Some(input.parse()?);
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }
        if input.peek(Token![crate]) {
            input.parse::<Token![crate]>()?;
            input.parse::<Token![=]>()?;
            args.krate = Some(input.parse()?);
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }
        if !input.is_empty() {
            return Err(input.error(
                "expected `determinism_check!()`, `determinism_check!(\"dir\")` (a directory of \
                 the crate, `src` by default) or `determinism_check!(\"dir\", crate = path)`",
            ));
        }
        Ok(args)
    }
}

/// The macro's expansion.
pub(crate) fn expand(input: TokenStream) -> TokenStream {
    let args = match syn::parse2::<Args>(input) {
        Ok(args) => args,
        Err(e) => return e.to_compile_error(),
    };
    let krate = match &args.krate {
        Some(path) => quote!(#path),
        None => quote!(::mcp_tasks_runtime),
    };
    let Ok(manifest) = std::env::var("CARGO_MANIFEST_DIR") else {
        return error("`determinism_check!` needs CARGO_MANIFEST_DIR: build with cargo");
    };
    let rel = args
        .dir
        .as_ref()
        .map_or_else(|| "src".to_owned(), LitStr::value);
    let manifest = PathBuf::from(manifest);
    let dir = manifest.join(&rel);
    let mut files = Vec::new();
    if let Err(e) = rs_files(&dir, &mut files) {
        return error(&format!(
            "`determinism_check!` cannot read `{}`: {e}",
            dir.display()
        ));
    }
    files.sort();
    // Parsed by proc-macro2's own lexer, whose spans know their lines.
    proc_macro2::fallback::force();
    let report = Crate::read(&manifest, &dir, &files).map(|mut c| c.check());
    proc_macro2::fallback::unforce();
    let report = match report {
        Ok(report) => report,
        Err(message) => return error(&message),
    };
    let tracked = files.iter().map(|f| {
        let f = f.to_string_lossy();
        quote!(
            const _: &[u8] = ::core::include_bytes!(#f);
        )
    });
    let findings = report.findings.iter().map(|f| {
        let (file, line, column, message) = (&f.file, f.line, f.column, &f.message);
        let chain = &f.chain;
        quote!((#file, #line, #column, #message, &[#(#chain),*]))
    });
    let (nfiles, ntools) = (files.len(), report.tools);
    quote!({
        #(#tracked)*
        #krate::testing::DeterminismReport::__from_check(&[#(#findings),*], #nfiles, #ntools)
    })
}

fn error(message: &str) -> TokenStream {
    syn::Error::new(Span::call_site(), message).to_compile_error()
}

/// Every `.rs` file under `dir`.
fn rs_files(dir: &FsPath, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rs_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// A fn's place: its module and, for a method, its type.
struct FnDef {
    file: String,
    module: Vec<String>,
    /// `name`, `Type::name`, or `mod::name` as shown in a chain.
    shown: String,
    line: usize,
    block: syn::Block,
    tool: Option<bool>,
}

/// A `macro_rules!` macro.
struct MacroDef {
    file: String,
    module: Vec<String>,
    line: usize,
    tokens: TokenStream,
}

/// A module: what its `use` items import and the names it declares.
#[derive(Default)]
struct Module {
    imports: Imports,
    /// Child modules, fns, types, consts: names a path can start with.
    names: HashSet<String>,
}

/// The crate as read.
struct Crate {
    modules: HashMap<Vec<String>, Module>,
    /// Free fns by module and name, and methods by type name and name.
    fns: Vec<FnDef>,
    free: HashMap<(Vec<String>, String), usize>,
    methods: HashMap<(String, String), usize>,
    macros: HashMap<String, MacroDef>,
}

/// A finding with its place and the calls that reach it.
struct Finding {
    file: String,
    line: usize,
    column: usize,
    message: String,
    chain: Vec<String>,
}

struct Report {
    findings: Vec<Finding>,
    tools: usize,
}

impl Crate {
    fn read(manifest: &FsPath, dir: &FsPath, files: &[PathBuf]) -> Result<Self, String> {
        let mut c = Crate {
            modules: HashMap::new(),
            fns: Vec::new(),
            free: HashMap::new(),
            methods: HashMap::new(),
            macros: HashMap::new(),
        };
        for path in files {
            let shown = path
                .strip_prefix(manifest)
                .unwrap_or(path)
                .to_string_lossy()
                .replace('\\', "/");
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("`determinism_check!` cannot read `{shown}`: {e}"))?;
            let file = syn::parse_file(&text).map_err(|e| {
                let at = e.span().start();
                format!(
                    "`determinism_check!` cannot parse `{shown}` ({}:{}): {e}",
                    at.line,
                    at.column + 1
                )
            })?;
            let module = module_of(path.strip_prefix(dir).unwrap_or(path));
            c.items(&shown, &module, file.items);
        }
        Ok(c)
    }

    fn items(&mut self, file: &str, module: &[String], items: Vec<Item>) {
        let mut imports = Imports::default();
        let mut names = HashSet::new();
        for item in items {
            match item {
                Item::Use(u) => imports.add(&mut Vec::new(), &u.tree),
                Item::Fn(f) => {
                    let name = f.sig.ident.to_string();
                    names.insert(name.clone());
                    let tool = tool_attr(&f.attrs);
                    let id = self.fns.len();
                    self.fns.push(FnDef {
                        file: file.to_owned(),
                        module: module.to_vec(),
                        shown: shown_path(module, &name),
                        line: f.sig.ident.span().start().line,
                        block: *f.block,
                        tool,
                    });
                    self.free.insert((module.to_vec(), name), id);
                }
                Item::Impl(i) => {
                    let ty = match &*i.self_ty {
                        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
                        _ => None,
                    };
                    let Some(ty) = ty else { continue };
                    for item in i.items {
                        if let syn::ImplItem::Fn(f) = item {
                            let name = f.sig.ident.to_string();
                            let id = self.fns.len();
                            self.fns.push(FnDef {
                                file: file.to_owned(),
                                module: module.to_vec(),
                                shown: shown_path(module, &format!("{ty}::{name}")),
                                line: f.sig.ident.span().start().line,
                                block: f.block,
                                tool: None,
                            });
                            self.methods.entry((ty.clone(), name)).or_insert(id);
                        }
                    }
                }
                Item::Mod(m) => {
                    names.insert(m.ident.to_string());
                    if let Some((_, items)) = m.content {
                        let mut child = module.to_vec();
                        child.push(m.ident.to_string());
                        self.items(file, &child, items);
                    }
                }
                Item::Macro(m) if m.mac.path.is_ident("macro_rules") => {
                    if let Some(name) = &m.ident {
                        self.macros.insert(
                            name.to_string(),
                            MacroDef {
                                file: file.to_owned(),
                                module: module.to_vec(),
                                line: name.span().start().line,
                                tokens: m.mac.tokens,
                            },
                        );
                    }
                }
                Item::Struct(s) => {
                    names.insert(s.ident.to_string());
                }
                Item::Enum(e) => {
                    names.insert(e.ident.to_string());
                }
                Item::Const(k) => {
                    names.insert(k.ident.to_string());
                }
                Item::Static(s) => {
                    names.insert(s.ident.to_string());
                }
                Item::Type(t) => {
                    names.insert(t.ident.to_string());
                }
                Item::Trait(t) => {
                    names.insert(t.ident.to_string());
                }
                _ => {}
            }
        }
        let entry = self.modules.entry(module.to_vec()).or_default();
        entry.names.extend(names);
        entry.imports.extend(imports);
    }

    /// Checks every tool, then every fn and macro they reach.
    fn check(&mut self) -> Report {
        let mut findings = Vec::new();
        let mut seen: HashSet<(String, usize, usize, String)> = HashSet::new();
        let mut queue: VecDeque<(Callee, Vec<String>)> = VecDeque::new();
        let mut visited: HashSet<Callee> = HashSet::new();
        let mut tools = 0;
        for (id, f) in self.fns.iter().enumerate() {
            if f.tool.is_some() {
                tools += 1;
                visited.insert(Callee::Fn(id));
                queue.push_back((Callee::Fn(id), Vec::new()));
            }
        }
        while let Some((callee, chain)) = queue.pop_front() {
            let (file, module, line, shown) = match callee {
                Callee::Fn(id) => {
                    let f = &self.fns[id];
                    (f.file.clone(), f.module.clone(), f.line, f.shown.clone())
                }
                Callee::Macro(ref name) => {
                    let m = &self.macros[name];
                    (m.file.clone(), m.module.clone(), m.line, format!("{name}!"))
                }
            };
            let tool = matches!(callee, Callee::Fn(id) if self.fns[id].tool.is_some());
            let link = if tool {
                format!("tool `{shown}` ({file}:{line})")
            } else {
                format!("`{shown}` ({file}:{line})")
            };
            let mut chain = chain;
            chain.push(link);
            let mut env = CrateEnv {
                krate: self,
                module: module.clone(),
                found: Vec::new(),
                calls: Vec::new(),
            };
            match callee {
                Callee::Fn(id) => {
                    let mut block = env.krate.fns[id].block.clone();
                    let allowed = env.krate.fns[id].tool == Some(true);
                    Checker::new(&mut block, &mut env, allowed).visit_block_mut(&mut block);
                }
                Callee::Macro(ref name) => {
                    let tokens = env.krate.macros[name].tokens.clone();
                    let mut empty: syn::Block = syn::parse_quote!({});
                    Checker::new(&mut empty, &mut env, false).tokens(tokens);
                }
            }
            let CrateEnv { found, calls, .. } = env;
            for (span, message) in found {
                let at = span.start();
                let message = if tool {
                    message
                } else {
                    helper_message(&message, &shown)
                };
                if seen.insert((file.clone(), at.line, at.column, message.clone())) {
                    findings.push(Finding {
                        file: file.clone(),
                        line: at.line,
                        column: at.column + 1,
                        message,
                        chain: chain.clone(),
                    });
                }
            }
            for (target, kind) in calls {
                let Some(next) = self.callee(&target, kind) else {
                    continue;
                };
                if visited.insert(next.clone()) {
                    queue.push_back((next, chain.clone()));
                }
            }
        }
        findings.sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
        Report { findings, tools }
    }

    fn callee(&self, target: &[String], kind: Kind) -> Option<Callee> {
        match (kind, target) {
            (Kind::Macro, [name]) => self
                .macros
                .contains_key(name)
                .then(|| Callee::Macro(name.clone())),
            (_, [key]) => key.parse().ok().map(Callee::Fn),
            _ => None,
        }
    }

    /// What `segments` stand for in `module` (see [`Env::resolve`]).
    fn resolve(
        &self,
        module: &[String],
        segments: Vec<String>,
        leading_colon: bool,
        depth: usize,
    ) -> Vec<Target> {
        let Some(first) = segments.first().cloned() else {
            return Vec::new();
        };
        if leading_colon || depth > 8 {
            return vec![Target::Other(segments)];
        }
        let rest = &segments[1..];
        match first.as_str() {
            "crate" | "$crate" => return self.walk(&module[..1.min(module.len())], rest, depth),
            "self" => return self.walk(module, rest, depth),
            "super" => {
                return self.walk(
                    &module[..module.len().saturating_sub(1).max(1)],
                    rest,
                    depth,
                );
            }
            _ => {}
        }
        let here = self.modules.get(module);
        if let Some(full) = here.and_then(|m| m.imports.alias_of(&first))
            && full != [first.clone()]
        {
            let mut resolved = full.to_vec();
            resolved.extend(rest.iter().cloned());
            return self.resolve(module, resolved, false, depth + 1);
        }
        if here.is_some_and(|m| m.names.contains(&first))
            || self.free.contains_key(&(module.to_vec(), first.clone()))
        {
            return self.walk(module, &segments, depth);
        }
        if segments.len() == 1
            && let Some(here) = here
        {
            let mut out = Vec::new();
            for glob in here.imports.globs() {
                let mut full = glob.clone();
                full.push(first.clone());
                out.extend(self.resolve(module, full, false, depth + 1));
            }
            if !out.is_empty() {
                return out;
            }
        }
        // `Type::f` of a type this crate implements (a method).
        if let [ty, name] = segments.as_slice()
            && let Some(id) = self.methods.get(&(ty.clone(), name.clone()))
        {
            return vec![Target::Local(vec![id.to_string()])];
        }
        vec![Target::Other(segments)]
    }

    /// `rest`, a path inside `module`.
    fn walk(&self, module: &[String], rest: &[String], depth: usize) -> Vec<Target> {
        let Some(first) = rest.first() else {
            return Vec::new();
        };
        if first == "super" {
            return self.walk(
                &module[..module.len().saturating_sub(1).max(1)],
                &rest[1..],
                depth,
            );
        }
        if rest.len() == 1
            && let Some(id) = self.free.get(&(module.to_vec(), first.clone()))
        {
            return vec![Target::Local(vec![id.to_string()])];
        }
        let mut child = module.to_vec();
        child.push(first.clone());
        if self.modules.contains_key(&child) {
            return self.walk(&child, &rest[1..], depth);
        }
        if let Some(full) = self
            .modules
            .get(module)
            .and_then(|m| m.imports.alias_of(first))
        {
            let mut resolved = full.to_vec();
            resolved.extend(rest[1..].iter().cloned());
            return self.resolve(module, resolved, false, depth + 1);
        }
        if let [ty, name] = rest
            && let Some(id) = self.methods.get(&(ty.clone(), name.clone()))
        {
            return vec![Target::Local(vec![id.to_string()])];
        }
        Vec::new()
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
enum Callee {
    Fn(usize),
    Macro(String),
}

/// The crate-wide check's view of one fn or macro.
struct CrateEnv<'c> {
    krate: &'c Crate,
    module: Vec<String>,
    found: Vec<(Span, String)>,
    calls: Vec<(Vec<String>, Kind)>,
}

impl Env for CrateEnv<'_> {
    fn resolve(&self, segments: Vec<String>, leading_colon: bool, kind: Kind) -> Vec<Target> {
        if kind == Kind::Macro {
            let name = segments.last().cloned().unwrap_or_default();
            let local = segments.len() == 1
                || matches!(segments[0].as_str(), "crate" | "$crate" | "self" | "super");
            if local && self.krate.macros.contains_key(&name) {
                return vec![Target::Local(vec![name])];
            }
            return vec![Target::Other(segments)];
        }
        self.krate.resolve(&self.module, segments, leading_colon, 0)
    }

    fn bare_names(&self) -> bool {
        false
    }

    fn report(&mut self, at: TokenStream, message: String) {
        let span = at
            .into_iter()
            .next()
            .map_or_else(Span::call_site, |t| t.span());
        self.found.push((span, message));
    }

    fn local(&mut self, target: &[String], kind: Kind, _: TokenStream) {
        self.calls.push((target.to_vec(), kind));
    }
}

/// The message for a finding in a helper: it cannot be marked, but the call
/// of the helper can go in a `checkpoint`.
fn helper_message(message: &str, helper: &str) -> String {
    let message = message.replacen(
        " in a task tool's body",
        &format!(" in `{helper}`, which a tool calls"),
        1,
    );
    match message.rfind(" (or mark the statement") {
        Some(at) => format!(
            "{} (or make the tool call its helper inside a `checkpoint`, which journals its \
             value)",
            &message[..at]
        ),
        None => message,
    }
}

/// Whether `attrs` hold `#[task_tool]`: `Some(true)` when it turns the
/// check off (`allow_nondeterminism`).
fn tool_attr(attrs: &[syn::Attribute]) -> Option<bool> {
    let attr = attrs.iter().find(|a| {
        a.path()
            .segments
            .last()
            .is_some_and(|s| s.ident == "task_tool")
    })?;
    let mut allowed = false;
    if let syn::Meta::List(list) = &attr.meta {
        let _ = list.parse_nested_meta(|m| {
            if m.path.is_ident(OPT_OUT) {
                allowed = if m.input.peek(Token![=]) {
                    m.value()?.parse::<syn::LitBool>()?.value
                } else {
                    true
                };
            } else if m.input.peek(Token![=]) {
                let _: syn::Expr = m.value()?.parse()?;
            }
            Ok(())
        });
    }
    Some(allowed)
}

/// The module a file holds, by its path under the checked directory:
/// `lib.rs`/`main.rs` the root (`crate`), `a.rs` or `a/mod.rs` `crate::a`,
/// `bin/x.rs` the root of a crate of its own.
fn module_of(rel: &FsPath) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    let mut root = "crate".to_owned();
    if parts.first().is_some_and(|p| p == "bin") && parts.len() >= 2 {
        root = format!("bin:{}", parts[1]);
        parts.drain(..2);
        if parts.is_empty() {
            parts.push("main".into());
        }
    }
    if matches!(
        parts.last().map(String::as_str),
        Some("lib" | "main" | "mod")
    ) {
        parts.pop();
    }
    let mut module = vec![root];
    module.extend(parts);
    module
}

fn shown_path(module: &[String], name: &str) -> String {
    let mut parts: Vec<&str> = module.iter().skip(1).map(String::as_str).collect();
    parts.push(name);
    parts.join("::")
}
