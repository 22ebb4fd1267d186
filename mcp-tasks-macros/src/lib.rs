//! Implementation detail of [`mcp-tasks-runtime`](https://docs.rs/mcp-tasks-runtime):
//! the `#[task_tool]` attribute and `#[derive(Elicit)]`. Depend on the runtime,
//! which re-exports both; their documentation is here and shows through the
//! re-exports.
//!
//! Layout: `attr.rs` parses the attribute's options, `input.rs` reads and
//! checks the fn, `determinism.rs` checks its body against the list in
//! `refused.rs`, `crate_check.rs` is `determinism_check!` (the same check over
//! the whole crate), `expand.rs` generates code (and reports no user errors),
//! `elicit.rs` is the derive, `errors.rs` collects every error of one
//! expansion, `paths.rs` is the only place that spells the runtime's path.
//! Generated code reaches the runtime only through
//! `mcp_tasks_runtime::__private`, which the runtime pins to this exact
//! version.

mod attr;
mod crate_check;
mod determinism;
mod duration;
mod elicit;
mod errors;
mod expand;
mod input;
mod paths;
mod refused;

use proc_macro::TokenStream;

#[doc = include_str!("../docs/task_tool.md")]
#[proc_macro_attribute]
pub fn task_tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    entry::task_tool(attr.into(), item.into()).into()
}

#[doc = include_str!("../docs/determinism_check.md")]
#[proc_macro]
pub fn determinism_check(input: TokenStream) -> TokenStream {
    crate_check::expand(input.into()).into()
}

#[doc = include_str!("../docs/elicit.md")]
#[proc_macro_derive(Elicit, attributes(elicit))]
pub fn derive_elicit(input: TokenStream) -> TokenStream {
    match syn::parse::<syn::DeriveInput>(input) {
        Ok(input) => elicit::derive(&input).into(),
        Err(e) => e.to_compile_error().into(),
    }
}

mod entry {
    use proc_macro2::TokenStream;
    use quote::quote;
    use syn::{Item, meta};

    use crate::{attr, determinism, errors::Errors, expand, input};

    /// Parse the options, parse and check the fn, expand. Every problem is
    /// reported at its token; the fn is always emitted (with a stand-in
    /// `<fn>_tool` when its shape is wrong) so that one mistake does not turn
    /// into "cannot find function" errors wherever it is used.
    pub(crate) fn task_tool(attr: TokenStream, item: TokenStream) -> TokenStream {
        let mut errors = Errors::default();
        let mut args = attr::Args::new();
        let parser = meta::parser(|m| args.parse(&m, &mut errors));
        if let Err(e) = syn::parse::Parser::parse2(parser, attr) {
            errors.push(e);
        }
        args.check(&mut errors);
        let mut item = match syn::parse2::<Item>(item.clone()) {
            Ok(Item::Fn(f)) => f,
            Ok(other) => {
                errors.spanned(
                    other,
                    "`#[task_tool]` goes on an `async fn`: write `#[task_tool] async fn name(...) -> Output { ... }`",
                );
                return with_errors(item, errors);
            }
            Err(e) => {
                errors.push(e);
                return with_errors(item, errors);
            }
        };
        let allowed = args.allow_nondeterminism.value.unwrap_or(false);
        determinism::check(&mut item.block, allowed, &mut errors);
        let Some(task_fn) = input::TaskFn::from_syn(&item, &mut errors) else {
            let fallback = expand::fallback(&args, &input::emitted(&item));
            return with_errors(fallback, errors);
        };
        if !args.name.given() {
            let name = item.sig.ident.to_string();
            let name = name.trim_start_matches("r#");
            if !attr::valid_tool_name(name) {
                errors.spanned(
                    &item.sig.ident,
                    format_args!(
                        "{}; set a valid one with `#[task_tool(name = \"...\")]`",
                        attr::invalid_name_message(name)
                    ),
                );
            }
        }
        with_errors(expand::task_tool(&args, &task_fn), errors)
    }

    fn with_errors(tokens: TokenStream, errors: Errors) -> TokenStream {
        let errors = errors.into_compile_errors();
        quote!(#tokens #errors)
    }
}
