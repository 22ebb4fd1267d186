//! Implementation detail of [`mcp-tasks-runtime`](https://docs.rs/mcp-tasks-runtime):
//! the `#[task_tool]` attribute and `#[derive(Elicit)]`. Depend on the runtime,
//! which re-exports both and documents them.

mod attr;
mod duration;
mod elicit;
mod errors;
mod expand;
mod input;
mod paths;

use proc_macro::TokenStream;

/// Turns an `async fn` into a registered MCP task tool. See the runtime crate's
/// documentation of `task_tool` for options and examples.
#[proc_macro_attribute]
pub fn task_tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    entry::task_tool(attr.into(), item.into()).into()
}

/// Checks at compile time that a type is a flat form MCP elicitation can express
/// and implements `Elicit` for it.
#[proc_macro_derive(Elicit, attributes(elicit))]
pub fn derive_elicit(input: TokenStream) -> TokenStream {
    match syn::parse::<syn::DeriveInput>(input) {
        Ok(input) => elicit::derive(input).into(),
        Err(e) => e.to_compile_error().into(),
    }
}

mod entry {
    use proc_macro2::TokenStream;
    use quote::quote;
    use syn::{ItemFn, meta};

    use crate::{attr::Args, errors::Errors, expand, input};

    pub(crate) fn task_tool(attr: TokenStream, item: TokenStream) -> TokenStream {
        let mut errors = Errors::default();
        let mut args = Args::new();
        let parser = meta::parser(|m| args.parse(&m, &mut errors));
        if let Err(e) = syn::parse::Parser::parse2(parser, attr) {
            errors.push(e);
        }
        let item: ItemFn = match syn::parse2(item.clone()) {
            Ok(f) => f,
            Err(e) => {
                errors.push(e);
                let errs = errors.to_compile_errors();
                return quote!(#item #errs);
            }
        };
        let mut fallback = item.clone();
        input::strip_param_attrs(&mut fallback);
        let Some(task_fn) = input::TaskFn::from_syn(item, &mut errors) else {
            // The fn's shape is wrong: emit it as written, plus the errors.
            let errs = errors.to_compile_errors();
            return quote!(#fallback #errs);
        };
        let expanded = expand::task_tool(&args, &task_fn);
        let errs = errors.to_compile_errors();
        quote!(#expanded #errs)
    }
}
