//! Reads the annotated fn into our own model, [`TaskFn`], and checks its shape.
//! The only file that picks a `syn::Signature` apart.

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::{Attribute, FnArg, GenericArgument, Ident, ItemFn, Pat, PathArguments, ReturnType, Type};

use crate::errors::Errors;

/// One parameter of the fn.
pub(crate) struct Param {
    pub(crate) ident: Ident,
    pub(crate) ty: Type,
    pub(crate) docs: Option<String>,
    pub(crate) role: Role,
}

/// What a parameter is to the tool.
pub(crate) enum Role {
    /// One argument, named after the parameter.
    Arg,
    /// The `#[args]` struct: its fields are the arguments.
    Args,
    /// `State<T>`: a value from the engine, not an argument; `T` is kept.
    State(Box<Type>),
}

/// The fn's parameters, in order.
pub(crate) struct Params(pub(crate) Vec<Param>);

impl Params {
    /// The `#[args]` parameter, if there is one.
    pub(crate) fn args_struct(&self) -> Option<&Param> {
        self.0.iter().find(|p| matches!(p.role, Role::Args))
    }

    /// The parameters that are arguments, one each.
    pub(crate) fn each(&self) -> impl Iterator<Item = &Param> {
        self.0.iter().filter(|p| matches!(p.role, Role::Arg))
    }
}

/// What the fn returns.
pub(crate) enum Output {
    /// `Result<T, E>`, or an alias spelled `…Result<T>`: `T` is the output and
    /// `E` (when written) the error type.
    Result {
        ret: Box<Type>,
        ok: Box<Type>,
        err: Option<Box<Type>>,
    },
    /// Any other type (`()` when the fn has no return type).
    Plain(Box<Type>),
}

/// The checked fn.
pub(crate) struct TaskFn {
    /// The fn to emit: as the user wrote it, minus parameter docs and `#[args]`.
    pub(crate) item: ItemFn,
    /// The fn's doc comment, rustdoc-style (one leading space per line removed).
    pub(crate) docs: Option<String>,
    pub(crate) params: Params,
    pub(crate) output: Output,
    /// The fn's `#[cfg]`s, repeated on every generated item.
    pub(crate) cfgs: Vec<Attribute>,
}

/// Joins `///` lines the way rustdoc shows them.
pub(crate) fn docs(attrs: &[Attribute]) -> Option<String> {
    let lines: Vec<String> = attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(syn::MetaNameValue {
                value:
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s),
                        ..
                    }),
                ..
            }) => Some(s.value()),
            _ => None,
        })
        .flat_map(|chunk| {
            // A `/** ... */` block holds several lines; an empty `///` one.
            chunk.split('\n').map(str::to_owned).collect::<Vec<_>>()
        })
        .map(|l| l.strip_prefix(' ').map(str::to_owned).unwrap_or(l))
        .collect();
    let text = lines.join("\n").trim().to_owned();
    (!text.is_empty()).then_some(text)
}

/// The fn as it is emitted in every case: parameter doc comments and
/// `#[args]` are not valid on a fn, so they are taken off. The macro requires
/// `async`, so clippy's `unused_async` is allowed on it.
pub(crate) fn emitted(item: &ItemFn) -> ItemFn {
    let mut item = item.clone();
    for input in &mut item.sig.inputs {
        if let FnArg::Typed(t) = input {
            t.attrs.retain(|a| {
                !a.path().is_ident("args")
                    && !a.path().is_ident("doc")
                    && !a.path().is_ident("serde")
            });
        }
    }
    item.attrs
        .push(syn::parse_quote!(#[allow(clippy::unused_async)]));
    item
}

impl TaskFn {
    /// Checks the fn, reporting every problem; `None` when any was found.
    pub(crate) fn from_syn(item: &ItemFn, errors: &mut Errors) -> Option<Self> {
        let before = errors.count();
        let sig = &item.sig;
        if sig.asyncness.is_none() {
            errors.spanned(
                sig.fn_token,
                "`#[task_tool]` requires an `async fn`: write `async fn` (a tool runs as a future)",
            );
        }
        if let Some(c) = &sig.constness {
            errors.spanned(c, "`#[task_tool]` fns cannot be `const`: remove `const`");
        }
        if let Some(u) = &sig.unsafety {
            errors.spanned(
                u,
                "`#[task_tool]` fns cannot be `unsafe`: the tool is called with JSON arguments, which cannot uphold a safety contract; remove `unsafe`",
            );
        }
        if let Some(abi) = &sig.abi {
            errors.spanned(abi, "`#[task_tool]` fns cannot have an ABI: remove it");
        }
        if !sig.generics.params.is_empty() {
            errors.spanned(
                &sig.generics,
                "`#[task_tool]` fns cannot be generic: a tool has one concrete input and output schema; use concrete types",
            );
        }
        if let Some(wc) = &sig.generics.where_clause {
            errors.spanned(
                wc,
                "`#[task_tool]` fns cannot have a `where` clause: use concrete types",
            );
        }
        if let Some(v) = &sig.variadic {
            errors.spanned(v, "`#[task_tool]` fns cannot be variadic");
        }
        let output = output(&sig.output, errors);
        let params = params(item, errors);
        if errors.count() > before {
            return None;
        }
        Some(Self {
            item: emitted(item),
            docs: docs(&item.attrs),
            params,
            output: output?,
            cfgs: item
                .attrs
                .iter()
                .filter(|a| a.path().is_ident("cfg"))
                .cloned()
                .collect(),
        })
    }
}

fn params(item: &ItemFn, errors: &mut Errors) -> Params {
    let inputs = &item.sig.inputs;
    let mut params = Vec::new();
    for input in inputs {
        let pat_ty = match input {
            FnArg::Receiver(r) => {
                errors.spanned(
                    r,
                    "`#[task_tool]` fns cannot take `self`: write a free `async fn` (outside any `impl`) and hand it shared values with a `State<T>` parameter",
                );
                continue;
            }
            FnArg::Typed(t) => t,
        };
        for serde in pat_ty.attrs.iter().filter(|a| a.path().is_ident("serde")) {
            errors.spanned(
                serde,
                "`#[serde(...)]` is not supported on a `#[task_tool]` parameter: put the arguments in a struct that derives `Deserialize` and `JsonSchema`, with `#[serde(...)]` on its fields, and take it as the fn's one `#[args]` parameter (for an optional argument, an `Option<T>` parameter may simply be left out)",
            );
        }
        let args_attr = pat_ty.attrs.iter().find(|a| a.path().is_ident("args"));
        let ident = match &*pat_ty.pat {
            Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => p.ident.clone(),
            other => {
                errors.spanned(
                    other,
                    "`#[task_tool]` parameters must be plain names: the name is the argument's name in the input schema; bind the value to a name and destructure it in the body",
                );
                continue;
            }
        };
        if !check_type(&pat_ty.ty, errors) {
            continue;
        }
        let role = match (state_type(&pat_ty.ty), args_attr) {
            (Some(_), Some(attr)) => {
                errors.spanned(
                    attr,
                    "a `State<T>` parameter cannot be `#[args]`: state comes from the engine, not from the call's arguments; remove `#[args]`",
                );
                continue;
            }
            (Some(inner), None) => Role::State(Box::new(inner)),
            (None, Some(_)) => Role::Args,
            (None, None) => Role::Arg,
        };
        params.push(Param {
            ident,
            ty: (*pat_ty.ty).clone(),
            docs: docs(&pat_ty.attrs),
            role,
        });
    }
    let args_structs = params
        .iter()
        .filter(|p| matches!(p.role, Role::Args))
        .count();
    let each = params
        .iter()
        .filter(|p| matches!(p.role, Role::Arg))
        .count();
    if args_structs > 1 || (args_structs == 1 && each > 0) {
        for input in inputs {
            if let FnArg::Typed(t) = input
                && let Some(attr) = t.attrs.iter().find(|a| a.path().is_ident("args"))
            {
                errors.spanned(
                    attr,
                    "an `#[args]` parameter must be the fn's only argument: its fields are the tool's arguments; move the other arguments into the struct or remove `#[args]` (`State<T>` parameters may sit beside it)",
                );
            }
        }
    }
    Params(params)
}

/// `T` when `ty` is `State<T>` (under any path: `State<T>`,
/// `mcp_tasks_runtime::State<T>`).
fn state_type(ty: &Type) -> Option<Type> {
    let Type::Path(p) = ty else { return None };
    if p.qself.is_some() {
        return None;
    }
    let last = p.path.segments.last()?;
    if last.ident != "State" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    let mut types = args.args.iter().filter_map(|a| match a {
        GenericArgument::Type(t) => Some(t),
        _ => None,
    });
    match (types.next(), types.next()) {
        (Some(t), None) => Some(t.clone()),
        _ => None,
    }
}

/// Rejects parameter types that cannot be decoded from JSON into an owned value.
fn check_type(ty: &Type, errors: &mut Errors) -> bool {
    match ty {
        Type::Reference(r) => {
            let elem = &r.elem;
            let owned = if is_str(elem) {
                "String".to_owned()
            } else if let Type::Slice(s) = &**elem {
                format!("Vec<{}>", tokens(&s.elem))
            } else {
                tokens(elem)
            };
            errors.spanned(
                r,
                format_args!(
                    "tool arguments are decoded from JSON into owned values: take `{owned}` instead of a reference"
                ),
            );
            false
        }
        Type::ImplTrait(i) => {
            errors.spanned(
                i,
                "`#[task_tool]` parameters cannot be `impl Trait`: name a concrete type so it has a schema",
            );
            false
        }
        Type::Infer(i) => {
            errors.spanned(i, "`#[task_tool]` parameters need a concrete type");
            false
        }
        Type::Path(p)
            if p.qself.is_none()
                && p.path
                    .segments
                    .last()
                    .is_some_and(|s| s.ident == "Arc" || s.ident == "Rc") =>
        {
            let inner = match &p.path.segments.last().map(|s| &s.arguments) {
                Some(PathArguments::AngleBracketed(a)) => tokens(&a.args),
                _ => "T".to_owned(),
            };
            errors.spanned(
                p,
                format_args!(
                    "`{}` cannot be a tool argument: arguments are decoded from each call's JSON, so nothing would be shared; for a shared value (a database pool, an HTTP client, a config) take `State<{inner}>` and give the value with `EngineBuilder::state`",
                    tokens(p)
                ),
            );
            false
        }
        _ => match borrowed_lifetime(ty.to_token_stream()) {
            Some(lt) => {
                errors.spanned(
                    &lt,
                    format_args!(
                        "tool arguments are decoded from JSON into owned values: use a type without the lifetime `{lt}` (or with `'static`)"
                    ),
                );
                false
            }
            None => true,
        },
    }
}

fn is_str(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none() && p.path.is_ident("str"))
}

fn tokens(t: &impl ToTokens) -> String {
    t.to_token_stream()
        .to_string()
        .replace(" < ", "<")
        .replace(" >", ">")
        .replace("< ", "<")
}

/// The first lifetime other than `'static` in `tokens`.
fn borrowed_lifetime(tokens: TokenStream) -> Option<syn::Lifetime> {
    let mut iter = tokens.into_iter().peekable();
    while let Some(tt) = iter.next() {
        match tt {
            TokenTree::Punct(p) if p.as_char() == '\'' => {
                if let Some(TokenTree::Ident(id)) = iter.peek()
                    && id != "static"
                {
                    return syn::parse2(quote::quote!(#p #id)).ok();
                }
            }
            TokenTree::Group(g) => {
                if let Some(lt) = borrowed_lifetime(g.stream()) {
                    return Some(lt);
                }
            }
            _ => {}
        }
    }
    None
}

fn output(ret: &ReturnType, errors: &mut Errors) -> Option<Output> {
    let ty = match ret {
        ReturnType::Default => return Some(Output::Plain(Box::new(syn::parse_quote!(())))),
        ReturnType::Type(_, ty) => &**ty,
    };
    match ty {
        Type::ImplTrait(_) => {
            errors.spanned(
                ty,
                "`#[task_tool]` fns cannot return `impl Trait`: name the output type so its schema can be derived",
            );
            None
        }
        Type::Never(_) => {
            errors.spanned(
                ty,
                "a `#[task_tool]` fn must return a value: return `()`, `String`, or a `Serialize + JsonSchema` type",
            );
            None
        }
        _ => Some(split_result(ty)),
    }
}

/// `…Result<T, E>` or `…Result<T>`: the output is `T`.
fn split_result(ty: &Type) -> Output {
    if let Type::Path(p) = ty
        && p.qself.is_none()
        && let Some(last) = p.path.segments.last()
        && last.ident == "Result"
        && let PathArguments::AngleBracketed(args) = &last.arguments
    {
        let mut types = args.args.iter().filter_map(|a| match a {
            GenericArgument::Type(t) => Some(t),
            _ => None,
        });
        if let Some(ok) = types.next() {
            return Output::Result {
                ret: Box::new(ty.clone()),
                ok: Box::new(ok.clone()),
                err: types.next().cloned().map(Box::new),
            };
        }
    }
    Output::Plain(Box::new(ty.clone()))
}
