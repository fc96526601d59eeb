//! The one loop every entry point of [`Tool`](crate::Tool) runs, with a verify function or
//! without.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{SideEffectCall, Verified};
use crate::error::Error;
use crate::failure::Classify;
use crate::key::IdempotencyKey;

/// The one loop of [`Tool`](crate::Tool)'s entry points (with
/// [`Tool::verify`](crate::Tool::verify) or without): each step, an attempt or a verification,
/// made under the call's key ([`made_under`]) and run by the
/// [`SideEffectCall`] that claims, leases, polls it under the key and ends the call.
///
/// [`made_under`]: crate::scope::current::made_under
pub(super) fn drive<'a, T, E, F, Fut, V, VFut>(
    call: SideEffectCall<'a, T, E>,
    attempt: F,
    verify: V,
) -> impl Future<Output = Result<T, E>> + use<'a, T, E, F, Fut, V, VFut>
where
    T: Serialize + DeserializeOwned,
    E: Classify + From<Error>,
    F: FnMut(IdempotencyKey) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    V: FnMut(IdempotencyKey) -> VFut,
    VFut: Future<Output = Result<Verified<T>, E>>,
{
    let (mut call, mut attempt, mut verify) = (call, attempt, verify);
    async move {
        while let Some(key) = call.attempt().await {
            if call.verifying() {
                let made = crate::scope::current::made_under(key, || verify(key));
                call.verify(made).await;
            } else {
                let made = crate::scope::current::made_under(key, || attempt(key));
                call.run(made).await;
            }
        }
        call.end()
    }
}

/// The verify function of a [`Tool`](crate::Tool) without one: never asked, since its call hands
/// out no verification (only a tool made [`Tool::with_verify`](crate::Tool::with_verify) does);
/// were it asked, it could not tell.
pub(super) fn unverified<T, E>(_: IdempotencyKey) -> std::future::Ready<Result<Verified<T>, E>> {
    std::future::ready(Ok(Verified::Unknown))
}
