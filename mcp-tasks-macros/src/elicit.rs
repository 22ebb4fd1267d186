//! `#[derive(Elicit)]`: checks at compile time that a type is a form MCP's
//! elicitation can express, and implements the runtime's `Elicit`.
//!
//! A struct is a form: each named field must be a string, number, integer,
//! boolean, unit-only enum, `Vec` of unit-only enums (a multi-select), or an
//! `Option` of one of those. Each field gets its own
//! check, with a message naming the field, at the field's type. A unit-only
//! enum is a choice: it can be a field of a form, or be asked alone (a form
//! with one `value` field).
//!
//! The impls are emitted even when a check fails, so that `ask_user::<T>()`
//! does not add errors of its own to the ones reported.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::{Data, DeriveInput, Fields, Ident, spanned::Spanned};

use crate::{errors::Errors, paths};

pub(crate) fn derive(input: &DeriveInput) -> TokenStream {
    let mut errors = Errors::default();
    let krate = options(input, &mut errors);
    let rt = paths::runtime(krate.as_ref());
    // One `use` names the runtime, so that a wrong `crate = path` is
    // reported once.
    let m = Ident::new("__mcp_tasks", proc_macro2::Span::mixed_site());
    let ident = &input.ident;
    let generic = !input.generics.params.is_empty() || input.generics.where_clause.is_some();
    if generic {
        errors.spanned(
            &input.generics,
            "`#[derive(Elicit)]` types cannot be generic: a form has one fixed schema; use concrete types",
        );
    }
    let body = match &input.data {
        Data::Struct(s) => {
            let checks = match &s.fields {
                Fields::Named(fields) => fields
                    .named
                    .iter()
                    .filter(|f| !serde_skipped(&f.attrs))
                    .map(|f| field_check(&m, ident, f))
                    .collect(),
                other => {
                    errors.spanned(
                        other,
                        "`#[derive(Elicit)]` needs a struct with named fields: each field is one field of the form",
                    );
                    quote!()
                }
            };
            quote! {
                const __MCP_TASKS_FORM: #m::Form<#ident> = #m::form::<#ident>();
                #[automatically_derived]
                impl #m::Elicit for #ident {
                    fn requested_schema() -> #m::JsonObject {
                        (__MCP_TASKS_FORM.form_schema)()
                    }
                    fn from_content(
                        content: #m::serde_json::Value,
                    ) -> #m::core::result::Result<Self, #m::String> {
                        (__MCP_TASKS_FORM.decode_form)(content)
                    }
                }
                #checks
            }
        }
        Data::Enum(e) => {
            for v in &e.variants {
                if !matches!(v.fields, Fields::Unit) {
                    let name = &v.ident;
                    errors.spanned(
                        &v.fields,
                        format_args!(
                            "variant `{name}` carries data, which a form cannot ask for; `#[derive(Elicit)]` on an enum needs unit variants only (the user picks one name): make `{name}` a unit variant and ask for its data in another question"
                        ),
                    );
                }
            }
            if e.variants.is_empty() {
                errors.spanned(
                    ident,
                    "`#[derive(Elicit)]` on an enum needs at least one variant to choose from",
                );
            }
            quote! {
                const __MCP_TASKS_FORM: #m::Form<#ident> = #m::form::<#ident>();
                #[automatically_derived]
                impl #m::ElicitField for #ident {}
                #[automatically_derived]
                impl #m::ElicitChoice for #ident {}
                #[automatically_derived]
                impl #m::Elicit for #ident {
                    fn requested_schema() -> #m::JsonObject {
                        (__MCP_TASKS_FORM.choice_schema)()
                    }
                    fn from_content(
                        content: #m::serde_json::Value,
                    ) -> #m::core::result::Result<Self, #m::String> {
                        (__MCP_TASKS_FORM.decode_choice)(content)
                    }
                }
            }
        }
        Data::Union(u) => {
            errors.spanned(
                u.union_token,
                "`#[derive(Elicit)]` does not support unions: use a struct (a form) or a unit-only enum (a choice)",
            );
            quote!()
        }
    };
    let body = if generic { quote!() } else { body };
    let errors = errors.into_compile_errors();
    quote! {
        #[allow(unused_qualifications, non_upper_case_globals, clippy::all, clippy::pedantic)]
        const _: () = {
            use #rt as #m;
            #body
        };
        #errors
    }
}

/// `#[elicit(crate = path)]`.
fn options(input: &DeriveInput, errors: &mut Errors) -> Option<syn::Path> {
    let mut krate: Option<syn::Path> = None;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("elicit")) {
        let r = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                let value = meta.value()?;
                let p: syn::Path = if value.peek(syn::LitStr) {
                    value.parse::<syn::LitStr>()?.parse()?
                } else {
                    value.parse()?
                };
                if krate.is_some() {
                    errors.spanned(&meta.path, "duplicate `crate` option; give it once");
                } else {
                    krate = Some(p);
                }
                Ok(())
            } else {
                let key = paths::to_string(&meta.path);
                errors.spanned(
                    &meta.path,
                    format_args!("unknown `elicit` option `{key}`; expected `crate`"),
                );
                if meta.input.peek(syn::Token![=]) {
                    let _: syn::Expr = meta.value()?.parse()?;
                }
                Ok(())
            }
        });
        if let Err(e) = r {
            errors.push(e);
        }
    }
    krate
}

/// Whether serde never reads the field (`#[serde(skip)]` or
/// `#[serde(skip_deserializing)]`): it is not part of the form.
fn serde_skipped(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("serde"))
        .any(|a| {
            let mut skip = false;
            let _ = a.parse_nested_meta(|meta| {
                if meta.path.is_ident("skip") || meta.path.is_ident("skip_deserializing") {
                    skip = true;
                }
                if meta.input.peek(syn::Token![=]) {
                    let _: syn::Expr = meta.value()?.parse()?;
                } else if meta.input.peek(syn::token::Paren) {
                    let _: proc_macro2::TokenTree = meta.input.parse()?;
                }
                Ok(())
            });
            skip
        })
}

/// A check for one field whose message names the field, at its type: the
/// runtime's `FormField<Form, Field>` names both in its message, `Field` being
/// a marker type named after the field.
fn field_check(m: &Ident, form: &Ident, field: &syn::Field) -> TokenStream {
    let ty = &field.ty;
    let Some(name) = &field.ident else {
        return quote!();
    };
    quote_spanned! {ty.span()=>
        const _: () = {
            #[allow(non_camel_case_types, dead_code)]
            struct #name;
            #m::form_field::<#ty, #form, #name>()
        };
    }
}
