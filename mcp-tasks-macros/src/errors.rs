//! Collects every error of one expansion so the user sees them all in one build.

use proc_macro2::TokenStream;

/// The errors found so far, merged with `syn::Error::combine`.
#[derive(Default)]
pub(crate) struct Errors {
    inner: Option<syn::Error>,
    count: usize,
}

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        self.count += 1;
        match &mut self.inner {
            Some(e) => e.combine(error),
            None => self.inner = Some(error),
        }
    }

    /// An error at `tokens` (its whole span, first to last token).
    pub(crate) fn spanned(
        &mut self,
        tokens: impl quote::ToTokens,
        message: impl std::fmt::Display,
    ) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// How many errors were pushed: compare before and after a step to know
    /// whether that step found a problem.
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// One `compile_error!` per error, each at its own span.
    pub(crate) fn into_compile_errors(self) -> TokenStream {
        self.inner
            .as_ref()
            .map(syn::Error::to_compile_error)
            .unwrap_or_default()
    }
}
