//! S19: what a tool's verify function answers, and [`Tool::verify`]'s runner.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{SideEffectCall, Tool};
use crate::error::Error;
use crate::failure::Classify;
use crate::fingerprint::Fingerprint;
use crate::key::{IdempotencyKey, KeyField};

/// What a tool's verify function found at the provider about an operation whose outcome is
/// unknown (S19): an attempt failed [`Failure::Ambiguous`](crate::Failure::Ambiguous) or was cut
/// off (cancelled, panicked, its lease lost, its process gone), and the provider cannot
/// deduplicate a re-send.
///
/// The verify function is asked before anything is sent again: when an attempt's outcome is
/// unknown, when a call meets a record kept as ambiguous, and when it takes over a running record
/// whose holder's lease ran out. It looks the operation up by what identifies it (the key it was
/// sent with, a message id derived from it, the order it was for).
///
/// ```
/// use idem_runtime::Verified;
///
/// // "Did the message with this key go out?" answered from the provider's log:
/// fn from_log(found: Option<&str>, log_reachable: bool) -> Verified<String> {
///     match (log_reachable, found) {
///         (true, Some(id)) => Verified::Applied(id.to_owned()), // it went out: that is the result
///         (true, None) => Verified::NotApplied,                 // it did not: safe to send
///         (false, _) => Verified::Unknown,                      // cannot tell: ask an operator
///     }
/// }
/// assert_eq!(from_log(Some("msg_1"), true), Verified::Applied("msg_1".to_owned()));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Verified<T> {
    /// The effect happened, with this result: the record completes with it (repeats replay it)
    /// and the caller gets `Ok` of it.
    Applied(T),
    /// The effect did not happen, and cannot still happen: the unknown attempt counts as not
    /// having happened, and the call goes on under its retry policy (it may send again).
    ///
    /// Answer it only when no request of the operation can still land: a request still on the
    /// wire, or accepted but not yet committed, is not seen by a look-up, and a send after a
    /// `NotApplied` then makes two (the simulation counts such cases). Until the provider's own
    /// time-out for a request has passed, answer [`Verified::Unknown`].
    NotApplied,
    /// The provider cannot tell (yet): the record stays ambiguous and the caller gets
    /// [`Error::Ambiguous`]; a later call asks again, or an operator settles it
    /// (`idemkit resolve`). An error from the verify function counts the same.
    Unknown,
}

/// A [`Tool`] with a verify function ([`Tool::verify`]): its calls ask `verify` before anything
/// whose outcome is unknown is sent again (S19).
#[must_use]
#[derive(Debug, Clone, Copy)]
pub struct Verifying<'a, V> {
    tool: Tool<'a>,
    verify: V,
}

impl<'a, V> Verifying<'a, V> {
    pub(super) fn new(tool: Tool<'a>, verify: V) -> Self {
        Verifying { tool, verify }
    }

    /// [`Tool::side_effect`], with this verify function: it is given the call's key.
    pub fn side_effect<T, E, A, F, Fut, VFut>(
        self,
        key_fields: &[KeyField<'_>],
        args: &A,
        attempt: F,
    ) -> impl Future<Output = Result<T, E>> + use<'a, T, E, A, F, Fut, V, VFut>
    where
        A: Serialize + ?Sized,
        T: Serialize + DeserializeOwned,
        E: Classify + From<Error>,
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        V: FnMut(IdempotencyKey) -> VFut,
        VFut: Future<Output = Result<Verified<T>, E>>,
    {
        let key = IdempotencyKey::derive(self.tool.name(), key_fields);
        self.run_prepared(key, Fingerprint::of(args), attempt)
    }

    /// [`Tool::run_keyed`], with this verify function: it is given the call's key.
    pub fn run_keyed<T, E, F, Fut, VFut>(
        self,
        key: IdempotencyKey,
        fingerprint: Fingerprint,
        attempt: F,
    ) -> impl Future<Output = Result<T, E>> + use<'a, T, E, F, Fut, V, VFut>
    where
        T: Serialize + DeserializeOwned,
        E: Classify + From<Error>,
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        V: FnMut(IdempotencyKey) -> VFut,
        VFut: Future<Output = Result<Verified<T>, E>>,
    {
        self.run_prepared(key, Ok(fingerprint), attempt)
    }

    fn run_prepared<T, E, F, Fut, VFut>(
        self,
        key: IdempotencyKey,
        fingerprint: Result<Fingerprint, serde_json::Error>,
        attempt: F,
    ) -> impl Future<Output = Result<T, E>> + use<'a, T, E, F, Fut, V, VFut>
    where
        T: Serialize + DeserializeOwned,
        E: Classify + From<Error>,
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        V: FnMut(IdempotencyKey) -> VFut,
        VFut: Future<Output = Result<Verified<T>, E>>,
    {
        drive(
            SideEffectCall::new(self.tool, key, fingerprint),
            attempt,
            self.verify,
        )
    }
}

/// The one loop of [`Tool`]'s entry points (with [`Tool::verify`] or without): each step, an
/// attempt or a verification, made under the call's key ([`made_under`]) and run by the
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

/// The verify function of a [`Tool`] without one: never asked, since its call hands out no
/// verification (only a tool made [`Tool::with_verify`] does); were it asked, it could not tell.
pub(super) fn unverified<T, E>(_: IdempotencyKey) -> std::future::Ready<Result<Verified<T>, E>> {
    std::future::ready(Ok(Verified::Unknown))
}
