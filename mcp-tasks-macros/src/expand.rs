//! `TaskFn` + `Args` -> tokens. Reports no user errors: everything was checked.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use crate::{
    attr::{Args, Policy},
    input::{Output, Params, TaskFn},
};

pub(crate) fn task_tool(args: &Args, f: &TaskFn) -> TokenStream {
    let rt = crate::paths::runtime(args);
    let item = &f.item;
    let vis = &item.vis;
    let fn_ident = &item.sig.ident;
    let tool_fn = format_ident!("{}_tool", fn_ident);
    let name = match &args.name.value {
        Some(lit) => lit.value(),
        None => fn_ident.to_string().trim_start_matches("r#").to_owned(),
    };
    let description = args
        .description
        .value
        .as_ref()
        .map(syn::LitStr::value)
        .or_else(|| f.docs.clone());

    // Arguments: schema, decoding, and compile-time checks at each type.
    let (schema_body, decode, call_args, asserts) = match &f.params {
        Params::Each(params) if params.is_empty() => (
            quote!(#rt::empty_args_schema()),
            quote!(let _ = __mcp_tasks_args;),
            quote!(),
            quote!(),
        ),
        Params::Each(params) => {
            let idents: Vec<_> = params.iter().map(|p| &p.ident).collect();
            let names: Vec<String> = idents
                .iter()
                .map(|i| i.to_string().trim_start_matches("r#").to_owned())
                .collect();
            let tys: Vec<_> = params.iter().map(|p| &p.ty).collect();
            let docs: Vec<TokenStream> = params
                .iter()
                .map(|p| match &p.docs {
                    Some(d) => quote!(#rt::core::option::Option::Some(#d)),
                    None => quote!(#rt::core::option::Option::None),
                })
                .collect();
            let asserts = tys.iter().map(|ty| {
                quote_spanned! {ty.span()=> const _: () = #rt::assert_arg::<#ty>(); }
            });
            (
                quote! {
                    #rt::ArgsSchema::new()
                        #(.arg::<#tys>(#names, #docs))*
                        .finish()
                },
                quote! {
                    let mut __mcp_tasks_args = __mcp_tasks_args;
                    #(let #idents: #tys = #rt::arg(&mut __mcp_tasks_args, #names)?;)*
                },
                quote!(#(#idents),*),
                quote!(#(#asserts)*),
            )
        }
        Params::Struct(p) => {
            let ty = &p.ty;
            let ident = &p.ident;
            (
                quote!(#rt::args_schema::<#ty>()),
                quote!(let #ident: #ty = #rt::decode_args(__mcp_tasks_args)?;),
                quote!(#ident),
                quote_spanned! {ty.span()=> const _: () = #rt::assert_arg::<#ty>(); },
            )
        }
    };

    let (ok_ty, run) = match &f.output {
        Output::Result(ok) => (
            ok,
            quote! {
                match #fn_ident(#call_args).await {
                    #rt::core::result::Result::Ok(__v) => {
                        #[allow(unused_imports)]
                        use #rt::{RawOutput as _, StructuredOutput as _, TextOutput as _};
                        (&&&#rt::OutputTag::<#ok>::NEW).output_kind().into_outcome(__v)
                    }
                    #rt::core::result::Result::Err(__e) => {
                        #[allow(unused_imports)]
                        use #rt::{DisplayErrorOutcome as _, ToolErrorOutcome as _};
                        (&&#rt::ErrTag(__e)).error_outcome()
                    }
                }
            },
        ),
        Output::Plain(ty) => (
            ty,
            quote! {
                let __v: #ty = #fn_ident(#call_args).await;
                #[allow(unused_imports)]
                use #rt::{RawOutput as _, StructuredOutput as _, TextOutput as _};
                (&&&#rt::OutputTag::<#ty>::NEW).output_kind().into_outcome(__v)
            },
        ),
    };

    let mut builder = quote!();
    if let Some(d) = &description {
        builder.extend(quote!(.with_description(#d)));
    }
    if let Some(t) = &args.title.value {
        builder.extend(quote!(.with_title(#t)));
    }
    if let Some(p) = args.task.value {
        let p = match p {
            Policy::Forbidden => quote!(Forbidden),
            Policy::Optional => quote!(Optional),
            Policy::Required => quote!(Required),
        };
        builder.extend(quote!(.with_policy(#rt::TaskPolicy::#p)));
    }
    if let Some(ms) = args.ttl.value {
        builder.extend(quote!(.with_ttl(#rt::Duration::from_millis(#ms))));
    }
    if let Some(ms) = args.poll_interval.value {
        builder.extend(quote!(.with_poll_interval(#rt::Duration::from_millis(#ms))));
    }
    let hint = |v: Option<bool>| match v {
        Some(b) => quote!(#rt::core::option::Option::Some(#b)),
        None => quote!(#rt::core::option::Option::None),
    };
    if [
        args.read_only.value,
        args.destructive.value,
        args.idempotent.value,
        args.open_world.value,
    ]
    .iter()
    .any(Option::is_some)
    {
        let (r, d, i, o) = (
            hint(args.read_only.value),
            hint(args.destructive.value),
            hint(args.idempotent.value),
            hint(args.open_world.value),
        );
        builder.extend(quote! {
            .with_annotations(#rt::Annotations { read_only: #r, destructive: #d, idempotent: #i, open_world: #o })
        });
    }

    let doc = format!(
        "The [`ToolDescriptor`](::mcp_tasks_runtime::ToolDescriptor) of the `{name}` task tool \
         defined by [`{fn_ident}`]. Generated by `#[task_tool]`; use it to build a \
         [`Registry`](::mcp_tasks_runtime::Registry) by hand."
    );
    let ok_span = ok_ty.span();
    let output_schema = quote_spanned! {ok_span=>
        {
            #[allow(unused_imports)]
            use #rt::{RawOutput as _, StructuredOutput as _, TextOutput as _};
            (&&&#rt::OutputTag::<#ok_ty>::NEW).output_kind().output_schema()
        }
    };

    quote! {
        #item

        #[doc = #doc]
        #[allow(clippy::all, clippy::pedantic)]
        #vis fn #tool_fn() -> &'static #rt::ToolDescriptor {
            #asserts
            fn __mcp_tasks_input_schema() -> #rt::JsonObject {
                #schema_body
            }
            fn __mcp_tasks_output_schema() -> #rt::core::option::Option<#rt::JsonObject> {
                #output_schema
            }
            fn __mcp_tasks_prepare(
                __mcp_tasks_args: #rt::JsonObject,
            ) -> #rt::core::result::Result<#rt::ToolFuture, #rt::String> {
                #decode
                #rt::core::result::Result::Ok(#rt::boxed(async move { #run }))
            }
            static __MCP_TASKS_DESCRIPTOR: #rt::ToolDescriptor = #rt::ToolDescriptor::new(
                #name,
                __mcp_tasks_input_schema,
                __mcp_tasks_prepare,
                #rt::Location {
                    path: #rt::core::concat!(#rt::core::module_path!(), "::", #name),
                    file: #rt::core::file!(),
                    line: #rt::core::line!(),
                },
            )
            .with_output_schema(__mcp_tasks_output_schema)
            #builder;
            &__MCP_TASKS_DESCRIPTOR
        }

        const _: () = {
            #rt::inventory::submit! {
                #rt::Registration(#tool_fn)
            }
        };
    }
}
