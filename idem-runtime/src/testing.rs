//! Test hooks, apart from the production stores: [`Intercept`], a store wrapped with a hook
//! before each transition, for tests and fault injection (count what the executor asks, fail a
//! transition, answer later than at once), with [`Step`]. A module of its own above the store,
//! whose parts it imports: the store re-exports nothing of it.

use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

// The store's parts, not its facade (which re-exports this module's types).
use crate::error::StoreError;
use crate::key::IdempotencyKey;
use crate::store::future::StoreFuture;
use crate::store::outcome::Outcome;
use crate::store::record::Record;
use crate::store::records::{Count, Forgot, RecordFilter, Records, Released};
use crate::store::resolution::{Decision, Resolved};
use crate::store::token::LeaseToken;
use crate::store::transitions::{Claim, ClaimRequest, OperationIds, Store, Written};

/// A transition the executor asks of a store, as an [`Intercept`] hook sees it.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// [`Store::claim`].
    Claim,
    /// [`Store::renew`].
    Renew,
    /// [`Store::complete`].
    Complete,
    /// [`Store::release`].
    Release,
    /// [`Store::mark_ambiguous`].
    MarkAmbiguous,
    /// [`Store::restore`].
    Restore,
}

/// `inner` with `hook` called before each transition: the hook answers `Some(error)` to fail
/// the transition with it (the inner store is not asked), or `None` to forward it. Everything
/// else (reads, operation ids) is forwarded as it is.
///
/// The one way this crate's tests wrap a store; also a way to test an agent against a store
/// that fails:
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use idem_runtime::testing::{Intercept, Step};
/// use idem_runtime::{MemoryStore, StoreError};
///
/// // The first two completion writes fail, as with a database that is locked for a while.
/// let failures = AtomicU32::new(2);
/// let store = Intercept::new(MemoryStore::new(), move |step, _key| {
///     (step == Step::Complete && failures.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok())
///         .then(|| StoreError::unavailable("database is locked"))
/// });
/// # let _ = store;
/// ```
#[derive(Debug)]
pub struct Intercept<S, H> {
    inner: S,
    hook: H,
    later: bool,
}

impl<S, H> Intercept<S, H>
where
    S: Store,
    H: Fn(Step, &IdempotencyKey) -> Option<StoreError> + Send + Sync + 'static,
{
    /// `inner`, with `hook` before each transition.
    pub fn new(inner: S, hook: H) -> Self {
        Intercept {
            inner,
            hook,
            later: false,
        }
    }

    /// Every answer comes later (boxed), even where `inner` answers at once: the store then
    /// looks to the executor like one that does I/O.
    pub fn answer_later(mut self) -> Self {
        self.later = true;
        self
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The hook runs when the transition is asked (the method is called); with
    /// [`answer_later`](Self::answer_later), when the answer is first polled.
    fn forward<'a, T: Send + 'a>(
        &'a self,
        step: Step,
        key: IdempotencyKey,
        ask: impl FnOnce() -> StoreFuture<'a, T> + Send + 'a,
    ) -> StoreFuture<'a, T> {
        if self.later {
            return StoreFuture::boxed(async move {
                match (self.hook)(step, &key) {
                    Some(error) => Err(error),
                    None => ask().await,
                }
            });
        }
        match (self.hook)(step, &key) {
            Some(error) => StoreFuture::ready(Err(error)),
            None => ask(),
        }
    }
}

impl<S, H> Store for Intercept<S, H>
where
    S: Store,
    H: Fn(Step, &IdempotencyKey) -> Option<StoreError> + Send + Sync + 'static,
{
    fn claim<'a>(&'a self, req: &'a ClaimRequest<'_>) -> StoreFuture<'a, Claim> {
        self.forward(Step::Claim, req.key, move || self.inner.claim(req))
    }

    fn renew(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> StoreFuture<'_, Written> {
        self.forward(Step::Renew, key, move || {
            self.inner.renew(key, token, lease)
        })
    }

    fn complete(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        outcome: Outcome,
        ttl: Duration,
    ) -> StoreFuture<'_, Written> {
        self.forward(Step::Complete, key, move || {
            self.inner.complete(key, token, outcome, ttl)
        })
    }

    fn release(&self, key: IdempotencyKey, token: LeaseToken) -> StoreFuture<'_, Written> {
        self.forward(Step::Release, key, move || self.inner.release(key, token))
    }

    fn mark_ambiguous<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        self.forward(Step::MarkAmbiguous, key, move || {
            self.inner.mark_ambiguous(key, token, note, ttl)
        })
    }

    fn restore<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        self.forward(Step::Restore, key, move || {
            self.inner.restore(key, token, note, ttl)
        })
    }

    /// A mark after an Unknown answer of verify is a mark to the hook ([`Step::MarkAmbiguous`]).
    fn mark_unknown<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        self.forward(Step::MarkAmbiguous, key, move || {
            self.inner.mark_unknown(key, token, note, ttl)
        })
    }
}

#[async_trait]
impl<S, H> OperationIds for Intercept<S, H>
where
    S: Store + OperationIds,
    H: Send + Sync + 'static,
{
    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError> {
        self.inner.operation_id(name, fresh).await
    }
}

#[async_trait]
impl<S, H> Records for Intercept<S, H>
where
    S: Records,
    H: Send + Sync + 'static,
{
    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        Records::get(&self.inner, key).await
    }
    async fn list(&self, filter: &RecordFilter) -> Result<Vec<Record>, StoreError> {
        self.inner.list(filter).await
    }
    async fn release_key(&self, key: &IdempotencyKey, force: bool) -> Result<Released, StoreError> {
        self.inner.release_key(key, force).await
    }
    async fn forget(&self, key: &IdempotencyKey, force: bool) -> Result<Forgot, StoreError> {
        self.inner.forget(key, force).await
    }
    async fn forget_noted(
        &self,
        key: &IdempotencyKey,
        force: bool,
        note: Option<&str>,
    ) -> Result<Forgot, StoreError> {
        self.inner.forget_noted(key, force, note).await
    }
    async fn resolve(
        &self,
        key: &IdempotencyKey,
        decision: Decision,
        outcome: Option<&[u8]>,
        note: Option<&str>,
        ttl: Duration,
    ) -> Result<Resolved, StoreError> {
        self.inner.resolve(key, decision, outcome, note, ttl).await
    }
    async fn settle(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        decision: Decision,
        outcome: Option<&[u8]>,
        note: Option<&str>,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        self.inner
            .settle(key, token, decision, outcome, note, ttl)
            .await
    }
    async fn prune(&self, limit: usize) -> Result<usize, StoreError> {
        Records::prune(&self.inner, limit).await
    }
    async fn counts(&self) -> Result<Vec<Count>, StoreError> {
        self.inner.counts().await
    }
    async fn operation(&self, name: &str) -> Result<Option<Uuid>, StoreError> {
        self.inner.operation(name).await
    }
}
