//! S20's default: whether the tool passes its key on, so that the provider can deduplicate an
//! attempt sent again (issue 51 #4). It does when it takes the `&IdempotencyKey` parameter
//! (`ast::Tool::injected_key`), and when its body gets the call's key the other ways the
//! runtime's HTTP client hands it out, found among the calls its tokens make (`calls`):
//!
//! - `.send_idempotent()`, the reqwest extension (`idemkit::http::IdempotentRequest`), which
//!   sends the current call's key as the request's `Idempotency-Key`;
//! - `current_key()` (`idemkit::http::current_key`), the current call's key itself: what the
//!   parameter would have handed the body.
//!
//! Not `.idempotency_key(..)`: its argument is a key the body got one of those ways, or another
//! one (and a client of another provider may have a method of that name that deduplicates
//! nothing). As for C4, only the body's own code is seen, not a helper function it calls.

use proc_macro2::TokenStream;

use crate::calls::Site;

/// The calls through which a body hands the call's key on.
const HANDS_ON: &[&str] = &["send_idempotent", "current_key"];

/// Whether `body` hands the call's key on through one of [`HANDS_ON`].
pub(crate) fn hands_key_on(body: &TokenStream) -> bool {
    let found = crate::calls::find(body.clone(), &mut |site, _| match site {
        Site::Call([.., f]) if HANDS_ON.iter().any(|h| f == h) => Some(()),
        Site::Call(_) | Site::Macro(_) => None,
    });
    !found.is_empty()
}

#[cfg(test)]
mod tests {
    use super::hands_key_on;
    use quote::quote;

    #[test]
    fn s20_a_body_that_sends_its_key_or_reads_it_hands_it_on() {
        for body in [
            quote! { self.http.post(url).json(&req).send_idempotent().await? },
            quote! { let sent = http.post(url).send_idempotent::<>(); sent.await },
            quote! { IdempotentRequest::send_idempotent(http.post(url)).await },
            quote! { let key = idemkit::http::current_key().unwrap(); provider.charge(key).await },
            quote! { tokio::join!(a.send_idempotent(), b.send_idempotent()) },
            quote! { let f = || async { http.get(url).send_idempotent().await }; f().await },
        ] {
            assert!(hands_key_on(&body), "{body}");
        }
    }

    #[test]
    fn s20_a_body_that_only_names_them_does_not() {
        for body in [
            quote! { http.post(url).send().await },
            quote! { let f = IdempotentRequest::send_idempotent; },
            quote! { tracing::info!(key = ?current_key(), "sending"); },
            quote! { let s = "send_idempotent()"; },
            quote! { sms.send(Message::new(to, text).idempotency_key(id)).await },
            quote! { #[doc = "x.send_idempotent()"] struct S; },
        ] {
            assert!(!hands_key_on(&body), "{body}");
        }
    }
}
