//! Collects every error of one expansion so the user sees them all in one build.

use proc_macro2::TokenStream;

#[derive(Default)]
pub(crate) struct Errors {
    inner: Option<syn::Error>,
}

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.inner {
            Some(e) => e.combine(error),
            None => self.inner = Some(error),
        }
    }

    pub(crate) fn spanned(
        &mut self,
        tokens: impl quote::ToTokens,
        message: impl std::fmt::Display,
    ) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.inner.is_none()
    }

    pub(crate) fn to_compile_errors(&self) -> TokenStream {
        self.inner
            .as_ref()
            .map(syn::Error::to_compile_error)
            .unwrap_or_default()
    }
}
