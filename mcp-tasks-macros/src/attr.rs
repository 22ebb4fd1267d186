//! Parses `#[task_tool(...)]` options. Every option is set once through
//! [`Set::set`], which reports duplicates.

use syn::{LitBool, LitStr, Path, meta::ParseNestedMeta};

use crate::{duration, errors::Errors};

pub(crate) const OPTIONS: &str = "`name`, `description`, `title`, `task`, `ttl`, `poll_interval`, `read_only`, `destructive`, `idempotent`, `open_world`, `crate`";

/// A value set at most once, remembering where.
pub(crate) struct Set<T> {
    pub(crate) value: Option<T>,
    name: &'static str,
}

impl<T> Set<T> {
    const fn new(name: &'static str) -> Self {
        Self { value: None, name }
    }

    fn set(&mut self, errors: &mut Errors, at: &Path, value: T) {
        if self.value.is_some() {
            errors.spanned(at, format_args!("duplicate `{}` option", self.name));
        } else {
            self.value = Some(value);
        }
    }
}

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
    pub(crate) read_only: Set<bool>,
    pub(crate) destructive: Set<bool>,
    pub(crate) idempotent: Set<bool>,
    pub(crate) open_world: Set<bool>,
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
            read_only: Set::new("read_only"),
            destructive: Set::new("destructive"),
            idempotent: Set::new("idempotent"),
            open_world: Set::new("open_world"),
            krate: Set::new("crate"),
        }
    }

    /// Parses one option; problems with its value go to `errors`, and only
    /// malformed syntax is returned as `Err`.
    pub(crate) fn parse(
        &mut self,
        meta: &ParseNestedMeta<'_>,
        errors: &mut Errors,
    ) -> syn::Result<()> {
        let path = &meta.path;
        let Some(ident) = path.get_ident() else {
            errors.spanned(
                path,
                format_args!("unknown `task_tool` option; expected one of {OPTIONS}"),
            );
            return skip_value(meta);
        };
        match ident.to_string().as_str() {
            "name" => {
                let lit: LitStr = meta.value()?.parse()?;
                if !valid_tool_name(&lit.value()) {
                    errors.spanned(&lit, "invalid tool name: use 1 to 128 characters of `A-Z`, `a-z`, `0-9`, `_`, `-` and `.`");
                }
                self.name.set(errors, path, lit);
            }
            "description" => {
                let lit: LitStr = meta.value()?.parse()?;
                self.description.set(errors, path, lit);
            }
            "title" => {
                let lit: LitStr = meta.value()?.parse()?;
                self.title.set(errors, path, lit);
            }
            "task" => {
                let value = meta.value()?;
                let (text, span) = if value.peek(LitStr) {
                    let lit: LitStr = value.parse()?;
                    (lit.value(), lit.span())
                } else {
                    let id: syn::Ident = value.parse()?;
                    (id.to_string(), id.span())
                };
                let policy = match text.as_str() {
                    "forbidden" => Policy::Forbidden,
                    "optional" => Policy::Optional,
                    "required" => Policy::Required,
                    _ => {
                        errors.push(syn::Error::new(span, format_args!(
                            "unknown task policy `{text}`; expected `required`, `optional` or `forbidden`"
                        )));
                        return Ok(());
                    }
                };
                self.task.set(errors, path, policy);
            }
            "ttl" | "poll_interval" => {
                let lit: LitStr = meta.value()?.parse()?;
                match duration::parse_millis(&lit.value()) {
                    Ok(ms) if ident == "ttl" => self.ttl.set(errors, path, ms),
                    Ok(ms) => self.poll_interval.set(errors, path, ms),
                    Err(e) => errors.spanned(&lit, format_args!("invalid duration: {e}")),
                }
            }
            flag @ ("read_only" | "destructive" | "idempotent" | "open_world") => {
                let value = if meta.input.peek(syn::Token![=]) {
                    let lit: LitBool = meta.value()?.parse()?;
                    lit.value
                } else {
                    true
                };
                let slot = match flag {
                    "read_only" => &mut self.read_only,
                    "destructive" => &mut self.destructive,
                    "idempotent" => &mut self.idempotent,
                    _ => &mut self.open_world,
                };
                slot.set(errors, path, value);
            }
            "crate" => {
                let value = meta.value()?;
                let p: Path = if value.peek(LitStr) {
                    value.parse::<LitStr>()?.parse()?
                } else {
                    value.parse()?
                };
                self.krate.set(errors, path, p);
            }
            other => {
                let hint = match other {
                    "ttl_ms" | "timeout" => " (durations are written `ttl = \"30m\"`)",
                    "poll_interval_ms" | "poll" => " (write `poll_interval = \"2s\"`)",
                    "readonly" | "read_only_hint" => " (write `read_only`)",
                    "policy" | "task_support" => " (write `task = required`)",
                    _ => "",
                };
                errors.spanned(
                    path,
                    format_args!(
                        "unknown `task_tool` option `{other}`; expected one of {OPTIONS}{hint}"
                    ),
                );
                return skip_value(meta);
            }
        }
        Ok(())
    }
}

/// Consumes `= value` after an unknown option so parsing can go on.
fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(syn::Token![=]) {
        let _: syn::Expr = meta.value()?.parse()?;
    } else if meta.input.peek(syn::token::Paren) {
        let _ = meta.parse_nested_meta(|m| skip_value(&m));
    }
    Ok(())
}

pub(crate) fn valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}
