//! Collects every error of one expansion, so a user sees all mistakes at once (serde_derive's
//! `Ctxt`): nothing stops at the first error.

use std::cell::RefCell;
use std::fmt::Display;

use proc_macro2::Span;
use quote::ToTokens;

#[derive(Default)]
pub(crate) struct Ctxt {
    errors: RefCell<Vec<syn::Error>>,
}

impl Ctxt {
    /// An error at one span.
    pub fn error(&self, span: Span, msg: impl Display) {
        self.errors.borrow_mut().push(syn::Error::new(span, msg));
    }

    /// An error spanning `tokens`, first to last (a range, even on stable Rust).
    pub fn error_spanned(&self, tokens: impl ToTokens, msg: impl Display) {
        self.errors
            .borrow_mut()
            .push(syn::Error::new_spanned(tokens, msg));
    }

    pub fn syn_error(&self, err: syn::Error) {
        self.errors.borrow_mut().push(err);
    }

    /// All errors combined into one, if any.
    pub fn finish(self) -> Option<syn::Error> {
        self.errors.into_inner().into_iter().reduce(|mut all, e| {
            all.combine(e);
            all
        })
    }
}
