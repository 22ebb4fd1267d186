//! The only place that spells the runtime's path, and path printing.

use proc_macro2::TokenStream;
use quote::quote;

/// `::mcp_tasks_runtime::__private`, or `<crate = path>::__private`.
pub(crate) fn runtime(krate: Option<&syn::Path>) -> TokenStream {
    match krate {
        Some(path) => quote!(#path::__private),
        None => quote!(::mcp_tasks_runtime::__private),
    }
}

/// `a::b::c`, as written (without spaces).
pub(crate) fn to_string(path: &syn::Path) -> String {
    let mut out = String::new();
    if path.leading_colon.is_some() {
        out.push_str("::");
    }
    for (i, seg) in path.segments.iter().enumerate() {
        if i > 0 {
            out.push_str("::");
        }
        out.push_str(&seg.ident.to_string());
    }
    out
}
