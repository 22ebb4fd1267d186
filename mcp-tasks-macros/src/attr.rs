//! Parses `#[task_tool(...)]` options into [`Args`].
//!
//! Policy (as in serde): a bad option is reported and then ignored, so the
//! user sees every mistake in one build and the fn still expands with the
//! options that were fine. Every option is stored through [`Set::set`], the
//! one place that reports duplicates.

use syn::{Expr, ExprLit, Lit, LitStr, Path, meta::ParseNestedMeta, spanned::Spanned};

use crate::{duration, errors::Errors};

/// Every option, in the order the docs list them.
pub(crate) const OPTIONS: &str = "`name`, `description`, `title`, `task`, `ttl`, \
     `poll_interval`, `version`, `replays_from`, `read_only`, `destructive`, `idempotent`, \
     `open_world`, `allow_nondeterminism` or `crate`";

/// A value set at most once.
pub(crate) struct Set<T> {
    pub(crate) value: Option<T>,
    seen: bool,
    name: &'static str,
}

impl<T> Set<T> {
    /// Whether the option was written (even with an invalid value).
    pub(crate) fn given(&self) -> bool {
        self.seen
    }

    const fn new(name: &'static str) -> Self {
        Self {
            value: None,
            seen: false,
            name,
        }
    }

    /// Marks the option as given (reporting a repeat at `at`) and stores the
    /// value if it was valid. An invalid first value still counts as given, so
    /// a repeat is reported as a repeat.
    fn set(&mut self, errors: &mut Errors, at: &Path, value: Option<T>) {
        if self.seen {
            errors.spanned(
                at,
                format_args!("duplicate `{}` option; give it once", self.name),
            );
            return;
        }
        self.seen = true;
        self.value = value;
    }
}

/// `task = ...`.
#[derive(Clone, Copy)]
pub(crate) enum Policy {
    Forbidden,
    Optional,
    Required,
}

pub(crate) struct Args {
    pub(crate) name: Set<LitStr>,
    pub(crate) description: Set<LitStr>,
    pub(crate) title: Set<LitStr>,
    pub(crate) task: Set<Policy>,
    pub(crate) ttl: Set<u64>,
    pub(crate) poll_interval: Set<u64>,
    pub(crate) version: Set<syn::LitInt>,
    pub(crate) replays_from: Set<syn::LitInt>,
    pub(crate) read_only: Set<bool>,
    pub(crate) destructive: Set<bool>,
    pub(crate) idempotent: Set<bool>,
    pub(crate) open_world: Set<bool>,
    pub(crate) allow_nondeterminism: Set<bool>,
    pub(crate) krate: Set<Path>,
}

impl Args {
    pub(crate) fn new() -> Self {
        Self {
            name: Set::new("name"),
            description: Set::new("description"),
            title: Set::new("title"),
            task: Set::new("task"),
            ttl: Set::new("ttl"),
            poll_interval: Set::new("poll_interval"),
            version: Set::new("version"),
            replays_from: Set::new("replays_from"),
            read_only: Set::new("read_only"),
            destructive: Set::new("destructive"),
            idempotent: Set::new("idempotent"),
            open_world: Set::new("open_world"),
            allow_nondeterminism: Set::new("allow_nondeterminism"),
            krate: Set::new("crate"),
        }
    }

    /// Parses one option. Mistakes go to `errors`; only input that cannot be
    /// tokenized as `key` or `key = expr` is returned as `Err`, which stops
    /// the parse.
    pub(crate) fn parse(
        &mut self,
        meta: &ParseNestedMeta<'_>,
        errors: &mut Errors,
    ) -> syn::Result<()> {
        let path = &meta.path;
        let key = path
            .get_ident()
            .map(ToString::to_string)
            .unwrap_or_else(|| crate::paths::to_string(path));
        let value = value(meta)?;
        let mut v = Value {
            key: &key,
            path,
            value: value.as_ref(),
            errors,
        };
        match key.as_str() {
            "name" => {
                let lit = v.string("name = \"deploy\"");
                let lit = lit.filter(|lit| check_tool_name(v.errors, lit));
                self.name.set(v.errors, path, lit);
            }
            "description" => {
                let lit = v.string("description = \"Deploys a service.\"");
                self.description.set(v.errors, path, lit);
            }
            "title" => {
                let lit = v.string("title = \"Deploy a service\"");
                self.title.set(v.errors, path, lit);
            }
            "task" => {
                let policy = v.policy();
                self.task.set(v.errors, path, policy);
            }
            "ttl" => {
                let ms = v.duration("ttl = \"1h\"");
                self.ttl.set(v.errors, path, ms);
            }
            "poll_interval" => {
                let ms = v.duration("poll_interval = \"2s\"");
                self.poll_interval.set(v.errors, path, ms);
            }
            "version" => {
                let n = v.version("version = 2");
                self.version.set(v.errors, path, n);
            }
            "replays_from" => {
                let n = v.version("replays_from = 2");
                self.replays_from.set(v.errors, path, n);
            }
            "read_only" => {
                let b = v.flag();
                self.read_only.set(v.errors, path, b);
            }
            "destructive" => {
                let b = v.flag();
                self.destructive.set(v.errors, path, b);
            }
            "idempotent" => {
                let b = v.flag();
                self.idempotent.set(v.errors, path, b);
            }
            "open_world" => {
                let b = v.flag();
                self.open_world.set(v.errors, path, b);
            }
            "allow_nondeterminism" => {
                let b = v.flag();
                self.allow_nondeterminism.set(v.errors, path, b);
            }
            "crate" => {
                let p = v.path();
                self.krate.set(v.errors, path, p);
            }
            other => {
                let hint = match other {
                    "rename" | "tool_name" => "; the tool's name is set with `name = \"...\"`",
                    "desc" | "doc" | "docs" | "about" => {
                        "; the description is set with `description = \"...\"` (or a doc comment)"
                    }
                    "ttl_ms" | "ttl_secs" | "timeout" | "keep_alive" => {
                        "; durations are strings: `ttl = \"30m\"`"
                    }
                    "poll" | "poll_ms" | "poll_interval_ms" | "pollInterval" => {
                        "; write `poll_interval = \"2s\"`"
                    }
                    "readonly" | "readOnly" | "read_only_hint" | "readOnlyHint" => {
                        "; write `read_only`"
                    }
                    "destructiveHint" | "destructive_hint" => "; write `destructive`",
                    "idempotentHint" | "idempotent_hint" => "; write `idempotent`",
                    "openWorldHint" | "open_world_hint" | "openworld" => "; write `open_world`",
                    "policy" | "task_support" | "taskSupport" | "execution" => {
                        "; the task policy is set with `task = required`, `task = optional` or `task = forbidden`"
                    }
                    "krate" | "runtime" => "; write `crate = path::to::mcp_tasks_runtime`",
                    "ver" | "tool_version" | "revision" => "; write `version = 2`",
                    "allow_nondeterministic"
                    | "nondeterministic"
                    | "allow_non_determinism"
                    | "deterministic" => "; write `allow_nondeterminism`",
                    "min_version" | "oldest_version" | "replays" | "supports_from"
                    | "compatible_from" => "; write `replays_from = 2`",
                    _ => "",
                };
                v.errors.spanned(
                    path,
                    format_args!("unknown `task_tool` option `{other}`; expected {OPTIONS}{hint}"),
                );
            }
        }
        Ok(())
    }

    /// Checks the options against each other, once all are parsed:
    /// `replays_from` is at most `version` (1 when not given).
    pub(crate) fn check(&self, errors: &mut Errors) {
        let Some(from) = &self.replays_from.value else {
            return;
        };
        let version = self.version.value.as_ref();
        let current = version.map_or(Ok(1), syn::LitInt::base10_parse::<u32>);
        let (Ok(oldest), Ok(current)) = (from.base10_parse::<u32>(), current) else {
            return;
        };
        if oldest > current {
            let which = if version.is_some() {
                format!("`version = {current}`")
            } else {
                "version 1 (no `version` option)".to_owned()
            };
            errors.spanned(
                from,
                format_args!(
                    "`replays_from = {oldest}` is newer than the tool's {which}: a tool always \
                     replays its own version's journals; write `replays_from` between 1 and \
                     {current}, or raise `version` to at least {oldest}"
                ),
            );
        }
    }
}

/// Reads what follows an option's key: `= expr`, nothing, or a parenthesized
/// list (kept as opaque tokens, which no option accepts, so that it is
/// reported like any other value of the wrong shape and parsing goes on).
fn value(meta: &ParseNestedMeta<'_>) -> syn::Result<Option<Expr>> {
    if meta.input.peek(syn::Token![=]) {
        Ok(Some(meta.value()?.parse()?))
    } else if meta.input.peek(syn::token::Paren) {
        let list: proc_macro2::TokenTree = meta.input.parse()?;
        Ok(Some(Expr::Verbatim(list.into())))
    } else {
        Ok(None)
    }
}

/// One option's value, with what is needed to report problems with it.
struct Value<'a> {
    key: &'a str,
    path: &'a Path,
    value: Option<&'a Expr>,
    errors: &'a mut Errors,
}

impl Value<'_> {
    /// Reports that the value has the wrong shape; `example` shows the right one.
    fn expected(&mut self, what: &str, example: &str) {
        let key = self.key;
        let message = if self.value.is_some() {
            format!("expected {what} for `{key}`: write `{example}`")
        } else {
            format!("`{key}` needs a value: write `{example}`")
        };
        match self.value {
            Some(v) => self.errors.spanned(v, message),
            None => self.errors.spanned(self.path, message),
        }
    }

    fn string(&mut self, example: &str) -> Option<LitStr> {
        match self.value {
            Some(Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            })) => Some(s.clone()),
            _ => {
                self.expected("a string literal", example);
                None
            }
        }
    }

    fn duration(&mut self, example: &str) -> Option<u64> {
        let lit = self.string(example)?;
        match duration::parse_millis(&lit.value()) {
            Ok(ms) => Some(ms),
            Err(e) => {
                self.errors
                    .spanned(&lit, format_args!("invalid duration: {e}"));
                None
            }
        }
    }

    /// `flag`, `flag = true` or `flag = false`.
    fn flag(&mut self) -> Option<bool> {
        match self.value {
            None => Some(true),
            Some(Expr::Lit(ExprLit {
                lit: Lit::Bool(b), ..
            })) => Some(b.value),
            Some(_) => {
                let key = self.key;
                self.expected("`true` or `false`", &format!("{key}` or `{key} = false"));
                None
            }
        }
    }

    /// `version = 2`, `replays_from = 2`: a positive integer literal that
    /// fits a `u32`.
    fn version(&mut self, example: &str) -> Option<syn::LitInt> {
        let key = self.key;
        let lit = match self.value {
            Some(Expr::Lit(ExprLit {
                lit: Lit::Int(n), ..
            })) => n.clone(),
            Some(Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            })) if s.value().parse::<u32>().is_ok() => {
                let n = s.value();
                self.errors.spanned(
                    s,
                    format_args!(
                        "expected an integer literal for `{key}`, not a string: write `{key} = {n}`"
                    ),
                );
                return None;
            }
            _ => {
                self.expected("a positive integer literal", example);
                return None;
            }
        };
        if !lit.suffix().is_empty() {
            self.errors.spanned(
                &lit,
                format_args!(
                    "`{key}` takes a plain integer without a type suffix: write `{key} = {}`",
                    lit.base10_digits()
                ),
            );
            return None;
        }
        match lit.base10_parse::<u32>() {
            Ok(0) => {
                let hint = if key == "version" {
                    "a tool's first version is 1 (the default): write `version = 1`, or leave the option out"
                } else {
                    "write `replays_from = 1` to replay every version, or leave the option out"
                };
                self.errors
                    .spanned(&lit, format_args!("`{key}` counts from 1; {hint}"));
                None
            }
            Ok(_) => Some(lit),
            Err(_) => {
                self.errors.spanned(
                    &lit,
                    format_args!(
                        "`{key} = {}` is too large: versions are counted in a `u32` (at most {})",
                        lit.base10_digits(),
                        u32::MAX
                    ),
                );
                None
            }
        }
    }

    /// `task = required` (or `"required"`).
    fn policy(&mut self) -> Option<Policy> {
        let (text, span) = match self.value {
            Some(Expr::Path(p)) if p.qself.is_none() && p.path.get_ident().is_some() => {
                (crate::paths::to_string(&p.path), p.span())
            }
            Some(Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            })) => (s.value(), s.span()),
            _ => {
                self.expected("a task policy", "task = required");
                return None;
            }
        };
        match text.as_str() {
            "forbidden" => Some(Policy::Forbidden),
            "optional" => Some(Policy::Optional),
            "required" => Some(Policy::Required),
            other => {
                let hint = match other {
                    "always" | "Required" | "must" => "; did you mean `required`?",
                    "never" | "none" | "Forbidden" | "inline" => "; did you mean `forbidden`?",
                    "maybe" | "Optional" | "auto" => "; did you mean `optional`?",
                    _ => "",
                };
                self.errors.push(syn::Error::new(
                    span,
                    format_args!(
                        "unknown task policy `{other}`; expected `required`, `optional` or `forbidden`{hint}"
                    ),
                ));
                None
            }
        }
    }

    /// `crate = path` (or `"path"`).
    fn path(&mut self) -> Option<Path> {
        match self.value {
            Some(Expr::Path(p)) if p.qself.is_none() => Some(p.path.clone()),
            Some(Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            })) => match s.parse::<Path>() {
                Ok(p) => Some(p),
                Err(_) => {
                    self.expected("a path", "crate = my_facade::mcp_tasks_runtime");
                    None
                }
            },
            _ => {
                self.expected("a path", "crate = my_facade::mcp_tasks_runtime");
                None
            }
        }
    }
}

/// Reports a name MCP does not accept.
fn check_tool_name(errors: &mut Errors, lit: &LitStr) -> bool {
    let name = lit.value();
    let ok = valid_tool_name(&name);
    if !ok {
        errors.spanned(lit, invalid_name_message(&name));
    }
    ok
}

pub(crate) fn invalid_name_message(name: &str) -> String {
    const RULE: &str =
        "a tool name is 1 to 128 characters of `A-Z`, `a-z`, `0-9`, `_`, `-` and `.`";
    if name.is_empty() {
        return format!("invalid tool name: it is empty; {RULE}");
    }
    if name.len() > 128 {
        return format!("invalid tool name: it is {} bytes long; {RULE}", name.len());
    }
    let bad = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
        .unwrap_or(' ');
    let bad = match bad {
        ' ' => "a space".to_owned(),
        c if c.is_control() || c.is_whitespace() => format!("`{}`", c.escape_default()),
        c => format!("`{c}`"),
    };
    format!(
        "invalid tool name `{}`: {bad} is not allowed; {RULE}",
        name.escape_debug()
    )
}

/// MCP's rule for tool names; the runtime's `is_valid_tool_name` says the same.
pub(crate) fn valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::{invalid_name_message, valid_tool_name};

    #[test]
    fn tool_names() {
        assert!(valid_tool_name("deploy"));
        assert!(valid_tool_name("ops.deploy-v2_1"));
        assert!(valid_tool_name(&"a".repeat(128)));
        assert!(!valid_tool_name(""));
        assert!(!valid_tool_name(&"a".repeat(129)));
        assert!(!valid_tool_name("has space"));
        assert!(!valid_tool_name("café"));
        assert!(!valid_tool_name("a/b"));
    }

    #[test]
    fn name_messages_say_what_is_wrong() {
        assert!(invalid_name_message("").contains("it is empty"));
        assert!(invalid_name_message(&"a".repeat(130)).contains("130 bytes long"));
        assert!(invalid_name_message("a b").contains("a space is not allowed"));
        assert!(invalid_name_message("a/b").contains("`/` is not allowed"));
        assert!(invalid_name_message("a\tb").contains("`\\t` is not allowed"));
    }
}
