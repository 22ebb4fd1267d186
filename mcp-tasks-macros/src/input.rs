//! Reads the annotated fn into our own model, [`TaskFn`], checking its shape.
//! The only file that picks a `syn::Signature` apart.

use syn::{Attribute, FnArg, GenericArgument, Ident, ItemFn, Pat, PathArguments, ReturnType, Type};

use crate::errors::Errors;

/// One tool argument.
pub(crate) struct Param {
    pub(crate) ident: Ident,
    pub(crate) ty: Type,
    pub(crate) docs: Option<String>,
}

pub(crate) enum Params {
    /// One argument per parameter.
    Each(Vec<Param>),
    /// A single `#[args]` struct.
    Struct(Param),
}

/// What the fn returns.
pub(crate) enum Output {
    /// `Result<T, E>` (or an alias spelled `…::Result<T>`): `T` is the output.
    Result(Type),
    /// Any other type.
    Plain(Type),
}

pub(crate) struct TaskFn {
    /// The fn as the user wrote it, minus parameter docs and `#[args]`.
    pub(crate) item: ItemFn,
    pub(crate) docs: Option<String>,
    pub(crate) params: Params,
    pub(crate) output: Output,
}

/// Joins `///` lines the way rustdoc shows them.
pub(crate) fn docs(attrs: &[Attribute]) -> Option<String> {
    let lines: Vec<String> = attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        })
        .map(|l| l.strip_prefix(' ').map(str::to_owned).unwrap_or(l))
        .collect();
    let text = lines.join("\n").trim().to_owned();
    (!text.is_empty()).then_some(text)
}

impl TaskFn {
    pub(crate) fn from_syn(mut item: ItemFn, errors: &mut Errors) -> Option<Self> {
        let before = errors.is_empty();
        let sig = &item.sig;
        if sig.asyncness.is_none() {
            errors.spanned(
                sig.fn_token,
                "`#[task_tool]` needs an `async fn`: write `async fn` (the tool runs as a future)",
            );
        }
        if !sig.generics.params.is_empty() {
            errors.spanned(&sig.generics, "`#[task_tool]` fns cannot be generic: a tool has one concrete input and output schema");
        }
        if let Some(wc) = &sig.generics.where_clause {
            errors.spanned(wc, "`#[task_tool]` fns cannot have a `where` clause");
        }
        if let Some(c) = &sig.constness {
            errors.spanned(c, "`#[task_tool]` fns cannot be `const`");
        }
        if let Some(u) = &sig.unsafety {
            errors.spanned(u, "`#[task_tool]` fns cannot be `unsafe`");
        }
        if let Some(v) = &sig.variadic {
            errors.spanned(v, "`#[task_tool]` fns cannot be variadic");
        }
        let output = match &sig.output {
            ReturnType::Default => Output::Plain(syn::parse_quote!(())),
            ReturnType::Type(_, ty) => {
                if let Type::ImplTrait(_) = **ty {
                    errors.spanned(ty, "`#[task_tool]` fns cannot return `impl Trait`: name the output type so its schema can be derived");
                }
                split_result(ty)
            }
        };

        let mut each = Vec::new();
        let mut args_struct = None;
        let count = sig.inputs.len();
        for input in &mut item.sig.inputs {
            let pat_ty = match input {
                FnArg::Receiver(r) => {
                    errors.spanned(&*r, "`#[task_tool]` fns cannot take `self`: write a free `async fn` and keep shared state in a `static` or an argument");
                    continue;
                }
                FnArg::Typed(t) => t,
            };
            let param_docs = docs(&pat_ty.attrs);
            let mut is_args = false;
            pat_ty.attrs.retain(|a| {
                if a.path().is_ident("args") {
                    is_args = true;
                    false
                } else {
                    !a.path().is_ident("doc")
                }
            });
            let ident = match &*pat_ty.pat {
                Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => p.ident.clone(),
                other => {
                    errors.spanned(other, "`#[task_tool]` parameters must be plain names: the name is the argument's name in the input schema");
                    continue;
                }
            };
            if let Type::Reference(r) = &*pat_ty.ty {
                errors.spanned(r, "tool arguments are owned values decoded from JSON: take `String` or `T`, not a reference");
                continue;
            }
            if let Type::ImplTrait(i) = &*pat_ty.ty {
                errors.spanned(i, "`#[task_tool]` parameters cannot be `impl Trait`");
                continue;
            }
            let param = Param {
                ident,
                ty: (*pat_ty.ty).clone(),
                docs: param_docs,
            };
            if is_args {
                if count != 1 {
                    errors.spanned(&pat_ty.pat, "an `#[args]` parameter must be the fn's only parameter: its fields are the tool's arguments");
                }
                args_struct = Some(param);
            } else {
                each.push(param);
            }
        }
        let params = match args_struct {
            Some(p) => Params::Struct(p),
            None => Params::Each(each),
        };
        let docs = docs(&item.attrs);
        if before && !errors.is_empty() {
            return None;
        }
        Some(Self {
            item,
            docs,
            params,
            output,
        })
    }
}

/// Strips `#[args]` and parameter docs so the fn can be emitted as written
/// even when other checks failed.
pub(crate) fn strip_param_attrs(item: &mut ItemFn) {
    for input in &mut item.sig.inputs {
        if let FnArg::Typed(t) = input {
            t.attrs
                .retain(|a| !a.path().is_ident("args") && !a.path().is_ident("doc"));
        }
    }
}

fn split_result(ty: &Type) -> Output {
    if let Type::Path(p) = ty
        && p.qself.is_none()
        && let Some(last) = p.path.segments.last()
        && last.ident == "Result"
        && let PathArguments::AngleBracketed(args) = &last.arguments
        && let Some(GenericArgument::Type(ok)) = args.args.first()
    {
        return Output::Result(ok.clone());
    }
    Output::Plain(ty.clone())
}
