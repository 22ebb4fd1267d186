//! The only place that spells the runtime's path.

use proc_macro2::TokenStream;
use quote::quote;

use crate::attr::Args;

/// `::mcp_tasks_runtime::__private`, or `<crate = path>::__private`.
pub(crate) fn runtime(args: &Args) -> TokenStream {
    match &args.krate.value {
        Some(path) => quote!(#path::__private),
        None => quote!(::mcp_tasks_runtime::__private),
    }
}

/// The same for derives, which take `#[elicit(crate = path)]`.
pub(crate) fn runtime_of(krate: Option<&syn::Path>) -> TokenStream {
    match krate {
        Some(path) => quote!(#path::__private),
        None => quote!(::mcp_tasks_runtime::__private),
    }
}
