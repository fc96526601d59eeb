//! The key of the step (an attempt or a verification) being polled on this thread: published by
//! the executor, read by whatever sends requests on a step's behalf (`http::IdempotentRequest`).
//! It lives here, below the executor that sets it, so the executor reaches nothing of `http`.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::key::IdempotencyKey;

thread_local! {
    /// The key of the step whose future is being polled (or made) on this thread, if any.
    static CURRENT: Cell<Option<IdempotencyKey>> = const { Cell::new(None) };
}

/// Makes a step's key the current one while its future is made and polled (the executor's one
/// hook), and puts back the one before (a step of a tool called inside another's body) when
/// dropped, also when the body panics.
pub(crate) struct CurrentKey(Option<IdempotencyKey>);

impl CurrentKey {
    pub(crate) fn enter(key: Option<IdempotencyKey>) -> CurrentKey {
        CurrentKey(CURRENT.with(|current| current.replace(key)))
    }
}

impl Drop for CurrentKey {
    fn drop(&mut self) {
        CURRENT.with(|current| current.set(self.0));
    }
}

/// The key of the side-effect attempt whose body is running here, or `None` outside any: what a
/// client of a provider that deduplicates by key sends (`http::IdempotentRequest` does), for a
/// client idemkit has no extension for (gRPC, a queue's message id).
///
/// Set by the executor while it polls an attempt's body, on that thread: a task the body spawns
/// does not see it (pass the key on, or send from the body itself).
pub fn current_key() -> Option<IdempotencyKey> {
    CURRENT.with(Cell::get)
}

/// Makes a step's future with its key current (S26): a closure that builds its request before
/// its future is polled (`|key| client.post(..).send_idempotent()`) sends under this call's key,
/// never an outer call's. The one place every entry path (`Tool::side_effect`, `Tool::verify`)
/// makes a step; the future is then polled under the key by `Step` (an attempt or a verification).
pub(crate) fn made_under<R>(key: IdempotencyKey, make: impl FnOnce() -> R) -> R {
    let _current = CurrentKey::enter(Some(key));
    make()
}

pin_project_lite::pin_project! {
    /// A step run outside any call (the settler's verification, S28), polled with its key
    /// current, as [`Attempt`](crate::Attempt) and [`VerifyStep`](crate::VerifyStep) poll a
    /// call's steps.
    pub(crate) struct Under<F> {
        key: IdempotencyKey,
        #[pin]
        step: F,
    }
}

impl<F: Future> Future for Under<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _current = CurrentKey::enter(Some(*this.key));
        this.step.poll(cx)
    }
}

/// Makes a step outside any call under `key`, and polls it under `key` (S26: a verify function
/// sees its record's key wherever it is asked).
pub(crate) fn under<F: Future>(key: IdempotencyKey, make: impl FnOnce() -> F) -> Under<F> {
    Under {
        key,
        step: made_under(key, make),
    }
}
