//! A store operation under the runtime's store timeout, timed for the `idemkit_store_seconds`
//! metric: what the claim and the end writes send the store through.

use std::future::Future;
use std::task::Poll;

use crate::error::StoreError;
use crate::idem::Settings;

/// Runs a store operation under the runtime's store timeout. An operation that answers on its
/// first poll (an in-memory store) never needed the timer, so the timer starts only after it.
pub(super) async fn timed<T>(
    s: &Settings,
    what: &'static str,
    op: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match timed_answer(s, what, op).await {
        Answered::Yes(result) => result,
        Answered::Late(e) => Err(e),
    }
}

/// Whether a store operation answered within the store timeout.
pub(super) enum Answered<T> {
    Yes(Result<T, StoreError>),
    /// No answer in time (or no runtime to wait on): the operation may still apply.
    Late(StoreError),
}

/// [`timed`], saying whether the store answered at all.
pub(super) async fn timed_answer<T>(
    s: &Settings,
    what: &'static str,
    op: impl Future<Output = Result<T, StoreError>>,
) -> Answered<T> {
    let clock = crate::meters::store_clock();
    let mut op = std::pin::pin!(op);
    let first = std::future::poll_fn(|cx| Poll::Ready(op.as_mut().poll(cx))).await;
    let result = match first {
        Poll::Ready(result) => Answered::Yes(result),
        // No tokio runtime (a dropped call ended after its runtime was gone): no timer can be
        // made, and nothing would wake this task; the write is given up (issue 30 #7).
        Poll::Pending if tokio::runtime::Handle::try_current().is_err() => Answered::Late(
            StoreError::unavailable("no tokio runtime to await the store's answer on"),
        ),
        Poll::Pending => match tokio::time::timeout(s.store_timeout, op).await {
            Ok(result) => Answered::Yes(result),
            Err(_) => Answered::Late(StoreError::unavailable(format!(
                "the store did not answer within {:?}",
                s.store_timeout
            ))),
        },
    };
    if let Some(started) = clock {
        crate::meters::store_took(what, started.elapsed());
    }
    result
}
