//! Collects every error of one expansion, so a user sees all mistakes at once (serde_derive's
//! `Ctxt`): nothing stops at the first error.
//!
//! A context must be checked: [`Ctxt::check`] consumes it and hands back every error combined,
//! and one dropped unchecked panics (unless the thread is already panicking), so an expansion
//! cannot lose the errors it collected by forgetting to emit them.

use std::cell::RefCell;
use std::fmt::Display;
use std::thread;

use proc_macro2::Span;
use quote::ToTokens;

pub(crate) struct Ctxt {
    /// The errors so far; `None` once checked.
    errors: RefCell<Option<Vec<syn::Error>>>,
}

impl Ctxt {
    pub fn new() -> Self {
        Ctxt {
            errors: RefCell::new(Some(Vec::new())),
        }
    }

    /// An error at one span.
    pub fn error(&self, span: Span, msg: impl Display) {
        self.syn_error(syn::Error::new(span, msg));
    }

    /// An error spanning `tokens`, first to last (a range, even on stable Rust).
    pub fn error_spanned(&self, tokens: impl ToTokens, msg: impl Display) {
        self.syn_error(syn::Error::new_spanned(tokens, msg));
    }

    pub fn syn_error(&self, err: syn::Error) {
        self.errors
            .borrow_mut()
            .as_mut()
            .expect("a Ctxt is not used after it is checked")
            .push(err);
    }

    /// Consumes the context: every error combined into one, if any.
    pub fn check(self) -> syn::Result<()> {
        let errors = self
            .errors
            .borrow_mut()
            .take()
            .expect("a Ctxt is checked once");
        match errors.into_iter().reduce(|mut all, e| {
            all.combine(e);
            all
        }) {
            None => Ok(()),
            Some(all) => Err(all),
        }
    }
}

impl Drop for Ctxt {
    fn drop(&mut self) {
        if !thread::panicking() && self.errors.borrow().is_some() {
            panic!("idemkit's macros dropped a Ctxt without checking it for errors");
        }
    }
}
