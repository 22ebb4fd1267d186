//! `#[derive(Elicit)]`: checks at compile time that a type is a form MCP's
//! elicitation can express, and implements the runtime's `Elicit`.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::{Data, DeriveInput, Fields, spanned::Spanned};

use crate::errors::Errors;

pub(crate) fn derive(input: DeriveInput) -> TokenStream {
    let mut errors = Errors::default();
    let mut krate = None;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("elicit")) {
        let r = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                let value = meta.value()?;
                let p: syn::Path = if value.peek(syn::LitStr) {
                    value.parse::<syn::LitStr>()?.parse()?
                } else {
                    value.parse()?
                };
                if krate.replace(p).is_some() {
                    errors.spanned(&meta.path, "duplicate `crate` option");
                }
                Ok(())
            } else {
                Err(meta.error("unknown `elicit` option; expected `crate`"))
            }
        });
        if let Err(e) = r {
            errors.push(e);
        }
    }
    let rt = crate::paths::runtime_of(krate.as_ref());
    let ident = &input.ident;
    if !input.generics.params.is_empty() {
        errors.spanned(
            &input.generics,
            "`#[derive(Elicit)]` types cannot be generic: a form has one fixed schema",
        );
    }
    let body = match &input.data {
        Data::Struct(s) => {
            match &s.fields {
                Fields::Named(fields) => {
                    let checks = fields.named.iter().map(|f| {
                        let ty = &f.ty;
                        let name = f
                            .ident
                            .as_ref()
                            .map(ToString::to_string)
                            .unwrap_or_default();
                        let check = format_ident!(
                            "field_{}_must_be_a_form_field",
                            name.trim_start_matches("r#")
                        );
                        quote_spanned! {ty.span()=>
                            #[allow(non_snake_case, dead_code)]
                            const fn #check<T: #rt::ElicitField>() {}
                            const _: () = #check::<#ty>();
                        }
                    });
                    quote! {
                        const _: () = { #(#checks)* };
                        impl #rt::Elicit for #ident {
                            fn requested_schema() -> #rt::JsonObject {
                                #rt::form_schema::<Self>()
                            }
                            fn from_content(
                                content: #rt::serde_json::Value,
                            ) -> #rt::core::result::Result<Self, #rt::String> {
                                #rt::decode_content(content)
                            }
                        }
                    }
                }
                other => {
                    errors.spanned(other, "`#[derive(Elicit)]` needs named fields: each field is one field of the form");
                    quote!()
                }
            }
        }
        Data::Enum(e) => {
            for v in &e.variants {
                if !matches!(v.fields, Fields::Unit) {
                    errors.spanned(v, format_args!(
                        "variant `{}` carries data; `#[derive(Elicit)]` on an enum needs unit variants only (a form field picks one name)",
                        v.ident
                    ));
                }
            }
            quote! {
                impl #rt::ElicitField for #ident {}
                impl #rt::Elicit for #ident {
                    fn requested_schema() -> #rt::JsonObject {
                        #rt::choice_schema::<Self>()
                    }
                    fn from_content(
                        content: #rt::serde_json::Value,
                    ) -> #rt::core::result::Result<Self, #rt::String> {
                        #rt::decode_choice(content)
                    }
                }
            }
        }
        Data::Union(u) => {
            errors.spanned(u.union_token, "`#[derive(Elicit)]` does not support unions");
            quote!()
        }
    };
    if errors.is_empty() {
        body
    } else {
        errors.to_compile_errors()
    }
}
