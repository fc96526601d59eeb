//! [`StoreFuture`]: a store's answer, either ready at once or still to come.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::StoreError;

/// What a [`Store`](super::Store) method returns: an answer that is either **ready** (the store
/// answered at once: memory, SQLite on its caller's thread) or a **boxed** future (the store
/// must wait: a server's reply, a connection thread).
///
/// One type for both, so that a store that answers at once costs its caller no allocation and
/// no poll (the executor takes a ready answer with [`StoreFuture::into_ready`]), while a store
/// that waits writes an ordinary `async` block. It is a [`Future`] either way, so `.await`
/// works on every answer.
///
/// ```
/// use idem_runtime::store::StoreFuture;
/// use idem_runtime::StoreError;
///
/// // A store that answers at once:
/// let ready: StoreFuture<'_, u32> = StoreFuture::ready(Ok(7));
/// assert_eq!(ready.into_ready().ok().map(|answer| answer.ok()), Some(Some(7)));
///
/// // A store that waits:
/// let later = StoreFuture::boxed(async { Ok::<_, StoreError>(7) });
/// let later = later.into_ready().err().expect("a boxed answer is not ready");
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// assert_eq!(rt.block_on(later).ok(), Some(7));
/// ```
#[must_use = "a store's answer does nothing unless awaited or taken with `into_ready`"]
pub struct StoreFuture<'a, T> {
    inner: Inner<'a, T>,
}

enum Inner<'a, T> {
    /// `None` once polled to its end.
    Ready(Option<Result<T, StoreError>>),
    Boxed(Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>),
}

impl<'a, T> StoreFuture<'a, T> {
    /// An answer the store has already: no allocation, and the caller need not poll.
    #[inline]
    pub fn ready(answer: Result<T, StoreError>) -> Self {
        StoreFuture {
            inner: Inner::Ready(Some(answer)),
        }
    }

    /// An answer that comes later: `fut` is boxed (once per call).
    pub fn boxed(fut: impl Future<Output = Result<T, StoreError>> + Send + 'a) -> Self {
        StoreFuture {
            inner: Inner::Boxed(Box::pin(fut)),
        }
    }

    /// The answer, if the store gave it at once (`Ok`); otherwise the future itself (`Err`), to
    /// be awaited.
    ///
    /// # Panics
    ///
    /// If a ready answer was already taken by polling this future to its end.
    #[inline]
    pub fn into_ready(self) -> Result<Result<T, StoreError>, Self> {
        match self.inner {
            Inner::Ready(answer) => {
                Ok(answer.expect("idemkit: a StoreFuture's answer was already taken"))
            }
            boxed @ Inner::Boxed(_) => Err(StoreFuture { inner: boxed }),
        }
    }

    /// Whether the answer is ready (the store answered at once).
    pub fn is_ready(&self) -> bool {
        matches!(self.inner, Inner::Ready(_))
    }
}

// The answer is never pinned in place (it is moved out when ready), and the boxed future is
// pinned in its box: a `StoreFuture` may move between polls whatever `T` is.
impl<T> Unpin for StoreFuture<'_, T> {}

impl<T> Future for StoreFuture<'_, T> {
    type Output = Result<T, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // `StoreFuture` is `Unpin`: the boxed future is pinned in its box.
        match &mut self.get_mut().inner {
            Inner::Ready(answer) => Poll::Ready(
                answer
                    .take()
                    .expect("idemkit: a StoreFuture polled after it completed"),
            ),
            Inner::Boxed(fut) => fut.as_mut().poll(cx),
        }
    }
}

impl<T> fmt::Debug for StoreFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.inner {
            Inner::Ready(_) => "StoreFuture::Ready",
            Inner::Boxed(_) => "StoreFuture::Boxed",
        })
    }
}

impl<'a, T> From<Result<T, StoreError>> for StoreFuture<'a, T> {
    fn from(answer: Result<T, StoreError>) -> Self {
        StoreFuture::ready(answer)
    }
}
