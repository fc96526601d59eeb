//! The claim state machine's trait: one method per transition (the diagram is in the
//! [module docs](super)), what a claim asks and gets, the same trait for stores that always
//! wait ([`AsyncStore`]), and the name → id map ([`OperationIds`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use super::{LeaseToken, Outcome, StoreFuture};
use crate::error::StoreError;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;

/// The claim state machine: where claims and outcomes are kept. One method per transition; see
/// [`store`](crate::store)'s docs for the diagram every implementation obeys, and `idem_runtime::conformance`
/// for the suite that proves it.
///
/// Every method returns a [`StoreFuture`]: ready when the store answers at once (the executor
/// then neither allocates nor polls), boxed when it must wait; a boxed answer does nothing until
/// it is polled (the conformance row `unpolled_answers_change_nothing`). A store that always
/// waits implements [`AsyncStore`] instead, and is a `Store` through it. A write by a holder (`renew`,
/// `complete`, `release`, `mark_ambiguous`) is guarded by the holder's `token`: when the record
/// is no longer Running under that token (taken over, expired, gone) nothing changes and the
/// answer is [`Written::Fenced`]. An `Err` means the store could not answer (it may or may not
/// have applied the write: the executor retries under the same token, which is safe because
/// every write is idempotent for its token).
///
/// [`AsyncStore`]: super::AsyncStore
pub trait Store: Send + Sync + 'static {
    /// **absent / expired → Running**, or a **takeover** (same fingerprint, and the lease
    /// expired or the record is Ambiguous → Running under `req.token`), atomically; otherwise
    /// nothing changes and the answer is the live record ([`Claim::Existing`]). The new record
    /// expires `req.ttl` from now, its lease `req.lease` from now. The answer says which:
    /// `Claim::Acquired { takeover: None }` for a new record (a record released, or resolved or
    /// settled as not applied, counts as absent: the operation did not happen), `Some(`[`Takeover`]`)`
    /// for the kind of live record replaced. A completed record past its time-to-live never
    /// counts as absent (S33): it answers [`ExistingState::Tombstone`] (or key reuse, with other
    /// arguments) until the store's tombstone setting has passed and it is pruned, or an
    /// operator forgets it. A running or ambiguous one with no decision never expires (S34: it
    /// is taken over).
    /// A running or ambiguous record never expires by time: only its completion (or a decision)
    /// ends it; a store may keep `req.ttl` with it but must not let it pass.
    ///
    /// [`Takeover`]: super::Takeover
    fn claim<'a>(&'a self, req: &'a ClaimRequest<'_>) -> StoreFuture<'a, Claim>;

    /// **Running → Running** with a later lease end: the lease `token` holds now ends `lease`
    /// from now (by the store's clock); the record's expiry moves to the new lease end if it was
    /// sooner, so a running record never expires before its lease. Applied also when the lease
    /// ran out but nobody took it over (the token is still the record's, so nobody else runs).
    /// The executor renews while a body runs (S12); a refused renewal stops the holder (S13).
    fn renew(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> StoreFuture<'_, Written>;

    /// **Running → Completed**: keeps `outcome` (the store owns it from now; it is cheap to keep
    /// as it is) and the record for `ttl` from now. A later claim with the same fingerprint gets
    /// the outcome back, byte for byte. Sent again under the same token after it applied (its
    /// reply was lost), it answers [`Written::Applied`] again; under any other token, `Fenced`.
    fn complete(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        outcome: Outcome,
        ttl: Duration,
    ) -> StoreFuture<'_, Written>;

    /// **Running → absent**: the operation did not happen, so a later call may run it again.
    fn release(&self, key: IdempotencyKey, token: LeaseToken) -> StoreFuture<'_, Written>;

    /// **Running → Ambiguous**, with `note` (the last error, for operators), kept until a
    /// decision settles it however long that takes (S34: never expires by time, never pruned;
    /// `ttl` is the call's, which a store may keep but must not apply): the operation may have happened, so the next claim with the same fingerprint
    /// takes it over at once (`Takeover::Ambiguous`); the executor then verifies it, re-sends it
    /// with the same key where the provider deduplicates, or keeps it ambiguous (S19, S20).
    /// Sent again under the same token after it applied, it answers [`Written::Applied`] again.
    fn mark_ambiguous<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written>;

    /// **Running → what the claim found** (S27): the holder gives its claim back unused (its
    /// call was cancelled before anything ran under it), and the record becomes what it was
    /// before that claim: absent after a new record; Ambiguous again, as it was, after a
    /// takeover of an Ambiguous record; Running under the earlier holder's token and lease end
    /// after a takeover of an expired holder's. Never a new unknown outcome. Guarded by `token`
    /// like every holder's write (`Fenced`: the claim was not applied, or was taken over since).
    ///
    /// A store that does not keep what a claim replaced cannot tell a new record from a taken
    /// over one; the default keeps the record as ambiguous with `note`
    /// ([`mark_ambiguous`](Store::mark_ambiguous)), which never loses an unknown outcome but
    /// makes one where nothing ran. Every store of this crate keeps it.
    fn restore<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        self.mark_ambiguous(key, token, note, ttl)
    }

    /// **Running → Ambiguous** as [`mark_ambiguous`](Store::mark_ambiguous), after a verify
    /// function answered Unknown (a caller's, S19, or the settler's, S28), and counting that
    /// answer with the record (S32): [`Record::unknowns`](super::Record::unknowns) grows by one
    /// and [`Record::unknown_since`](super::Record::unknown_since) is set if it was not, in the
    /// same atomic step. Sent again under the same token after it applied, it answers
    /// [`Written::Applied`] again and counts nothing more.
    ///
    /// The default marks the record ambiguous without counting: a store that does not keep the
    /// count (one written before S32) gives the settler's `operator_after_unknowns` bound
    /// nothing to count. Every store of this crate counts.
    fn mark_unknown<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        self.mark_ambiguous(key, token, note, ttl)
    }
}

/// What a claim asks of the store.
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct ClaimRequest<'a> {
    /// The operation's key.
    pub key: IdempotencyKey,
    /// The tool's name, kept for operators.
    pub tool: &'a str,
    /// The fingerprint of the other arguments.
    pub fingerprint: Fingerprint,
    /// The token the new lease gets (the caller makes it, so a lost reply can be recognised).
    pub token: LeaseToken,
    /// How long the lease lasts: past it, another call may take over.
    pub lease: Duration,
    /// How long the record lasts from now: past it, it is treated as absent. Never shorter than
    /// `lease` (the executor refuses such settings).
    pub ttl: Duration,
    /// The scope (tenant) the call runs under, if any, kept with the record for operators
    /// ([`RecordFilter::tenant`](super::RecordFilter::tenant)). The key already holds it (S18): a store never compares it.
    pub tenant: Option<Arc<str>>,
    /// The call's arguments as its tool's `verify` takes them (JSON), kept with the record so a
    /// settler can ask that verify without the caller (S28); only tools with `verify` send them.
    /// `None` leaves what the record kept (a takeover's, the settler's claim): a store replaces
    /// them only with `Some`, and a new record without them keeps none.
    pub arguments: Option<&'a [u8]>,
    /// The moment the executor sent the claim, by its own clock (tokio's), when it read that
    /// clock just before: a store on the same clock (the memory store) takes it as the claim's
    /// "now" instead of reading the clock again (a clock read is about 20 ns, a tenth of a
    /// wrapped call's own cost). Private: a store of another crate reads its own clock.
    pub(crate) sent_at: Option<tokio::time::Instant>,
}

impl<'a> ClaimRequest<'a> {
    /// A claim of `key` for `tool` with these arguments' `fingerprint`, under a new lease
    /// `token` that lasts `lease`, for a record that lasts `ttl`.
    pub fn new(
        key: IdempotencyKey,
        tool: &'a str,
        fingerprint: Fingerprint,
        token: LeaseToken,
        lease: Duration,
        ttl: Duration,
    ) -> Self {
        ClaimRequest {
            key,
            tool,
            fingerprint,
            token,
            lease,
            ttl,
            tenant: None,
            arguments: None,
            sent_at: None,
        }
    }

    /// The same claim, made under `tenant`.
    pub fn with_tenant(mut self, tenant: Option<Arc<str>>) -> Self {
        self.tenant = tenant;
        self
    }

    /// The same claim, keeping the call's `arguments` (see [`ClaimRequest::arguments`]).
    pub fn with_arguments(mut self, arguments: Option<&'a [u8]>) -> Self {
        self.arguments = arguments;
        self
    }
}

/// What a claim got.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The caller holds the lease and must run the operation: a new record
    /// (`takeover: None`; also in place of one past its time-to-live, which is absent), or a
    /// takeover of a live record of the same operation (`Some`: which kind, for operators).
    Acquired {
        /// What the claim took over, if it replaced a live record.
        takeover: Option<Takeover>,
    },
    /// A live record exists and the caller may not run: see its state.
    Existing(Existing),
}

/// The live record a claim took over (see [`Claim::Acquired`]): the same operation, whose
/// holder is gone or gave up.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Takeover {
    /// A Running record whose lease had ended: its holder died or stalled (S8, S13).
    ExpiredHolder,
    /// A record kept as Ambiguous: an earlier call ran out of attempts after a failure that may
    /// have taken effect (S6, S14).
    Ambiguous,
}

impl Takeover {
    /// Its name in metrics and logs: `expired_holder`, `ambiguous`.
    pub fn as_str(self) -> &'static str {
        match self {
            Takeover::ExpiredHolder => "expired_holder",
            Takeover::Ambiguous => "ambiguous",
        }
    }
}

/// A live record that a claim did not take: only what the claimant acts on (an operator's view of
/// a record is [`Record`](super::Record)).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Existing {
    /// The fingerprint the record was made with: if it is not the caller's, the key was reused.
    pub fingerprint: Fingerprint,
    /// Where the record stands.
    pub state: ExistingState,
}

impl Existing {
    /// A live record made with `fingerprint`, standing at `state`.
    pub fn new(fingerprint: Fingerprint, state: ExistingState) -> Self {
        Existing { fingerprint, state }
    }
}

impl From<Existing> for Claim {
    fn from(existing: Existing) -> Self {
        Claim::Existing(existing)
    }
}

/// Where a record that was not taken stands.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExistingState {
    /// Another holder's lease is live for this much longer.
    Running {
        /// Time until the lease expires.
        lease_remaining: Duration,
    },
    /// The operation completed with this serialized outcome.
    Completed {
        /// The outcome as the executor stored it.
        outcome: Outcome,
    },
    /// The operation ran out of attempts and may have happened (only reported when the
    /// fingerprint differs; with the same fingerprint the claim takes it over).
    Ambiguous,
    /// S33: the operation was done (completed, or resolved or settled as applied) and the
    /// record's time-to-live has passed: its outcome is no longer kept (or no longer answered),
    /// but the operation is never run again because time passed. What stays is a tombstone,
    /// until the store's tombstone setting passes or an operator forgets it.
    Tombstone {
        /// When it was done (its completion or the decision), by the store's clock;
        /// [`SystemTime::UNIX_EPOCH`](std::time::SystemTime::UNIX_EPOCH) when the store does not know (a record written before
        /// stores kept it).
        done: std::time::SystemTime,
        /// Whether a decision ended it (an operator's `idemkit resolve … applied`, or the
        /// settler's verify), rather than its own body's completion.
        resolved: bool,
    },
}

/// Whether a holder's write was applied.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The record changed as asked.
    Applied,
    /// The caller's token is no longer the record's (its lease was taken over, or the record
    /// expired): nothing changed.
    Fenced,
}

impl Written {
    /// What a token-guarded write that changed `records` records means: exactly one is
    /// `Applied`, none is `Fenced` (the guard did not match).
    pub fn from_changed(records: impl TryInto<u64>) -> Self {
        match records.try_into() {
            Ok(1) => Written::Applied,
            _ => Written::Fenced,
        }
    }
}

/// [`Store`] for a store that always waits for its answers (a server, a connection thread):
/// the same five transitions, written as plain `async fn`s. Every type that implements it is a
/// [`Store`] whose answers are boxed futures; a store that can answer at once implements
/// [`Store`] itself instead, with [`StoreFuture::ready`].
///
/// The transitions and their rules are [`Store`]'s: see each method there.
///
/// ```
/// use std::time::Duration;
/// use idem_runtime::store::{AsyncStore, Claim, ClaimRequest, LeaseToken, Outcome, Written};
/// use idem_runtime::{IdempotencyKey, StoreError};
///
/// struct Remote; // a client of some service that keeps records
///
/// impl AsyncStore for Remote {
///     async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
///         # let _ = req;
///         Err(StoreError::unavailable("not connected")) // one request to the service, here
///     }
///     async fn renew(&self, key: IdempotencyKey, token: LeaseToken, lease: Duration) -> Result<Written, StoreError> {
///         # let _ = (key, token, lease);
///         Err(StoreError::unavailable("not connected"))
///     }
///     async fn complete(&self, key: IdempotencyKey, token: LeaseToken, outcome: Outcome, ttl: Duration) -> Result<Written, StoreError> {
///         # let _ = (key, token, outcome, ttl);
///         Err(StoreError::unavailable("not connected"))
///     }
///     async fn release(&self, key: IdempotencyKey, token: LeaseToken) -> Result<Written, StoreError> {
///         # let _ = (key, token);
///         Err(StoreError::unavailable("not connected"))
///     }
///     async fn mark_ambiguous(&self, key: IdempotencyKey, token: LeaseToken, note: &str, ttl: Duration) -> Result<Written, StoreError> {
///         # let _ = (key, token, note, ttl);
///         Err(StoreError::unavailable("not connected"))
///     }
/// }
///
/// fn is_a_store(_: &impl idem_runtime::Store) {}
/// is_a_store(&Remote);
/// ```
pub trait AsyncStore: Send + Sync + 'static {
    /// [`Store::claim`].
    fn claim(
        &self,
        req: &ClaimRequest<'_>,
    ) -> impl Future<Output = Result<Claim, StoreError>> + Send;

    /// [`Store::renew`].
    fn renew(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send;

    /// [`Store::complete`].
    fn complete(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        outcome: Outcome,
        ttl: Duration,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send;

    /// [`Store::release`].
    fn release(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send;

    /// [`Store::mark_ambiguous`].
    fn mark_ambiguous(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send;

    /// [`Store::restore`]; the default, like [`Store::restore`]'s, keeps the record as
    /// ambiguous with `note`.
    fn restore(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send {
        AsyncStore::mark_ambiguous(self, key, token, note, ttl)
    }

    /// [`Store::mark_unknown`]; the default, like [`Store::mark_unknown`]'s, marks the record
    /// ambiguous without counting.
    fn mark_unknown(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send {
        AsyncStore::mark_ambiguous(self, key, token, note, ttl)
    }
}

impl<S: AsyncStore> Store for S {
    fn claim<'a>(&'a self, req: &'a ClaimRequest<'_>) -> StoreFuture<'a, Claim> {
        StoreFuture::boxed(AsyncStore::claim(self, req))
    }
    fn renew(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> StoreFuture<'_, Written> {
        StoreFuture::boxed(AsyncStore::renew(self, key, token, lease))
    }
    fn complete(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        outcome: Outcome,
        ttl: Duration,
    ) -> StoreFuture<'_, Written> {
        StoreFuture::boxed(AsyncStore::complete(self, key, token, outcome, ttl))
    }
    fn release(&self, key: IdempotencyKey, token: LeaseToken) -> StoreFuture<'_, Written> {
        StoreFuture::boxed(AsyncStore::release(self, key, token))
    }
    fn mark_ambiguous<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        StoreFuture::boxed(AsyncStore::mark_ambiguous(self, key, token, note, ttl))
    }
    fn restore<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        StoreFuture::boxed(AsyncStore::restore(self, key, token, note, ttl))
    }
    fn mark_unknown<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        StoreFuture::boxed(AsyncStore::mark_unknown(self, key, token, note, ttl))
    }
}

/// The name → UUID map behind [`OperationId`](crate::OperationId): the id a named operation
/// (a plan step, a conversation turn) got the first time, kept so that a restart gets the same.
/// Apart from [`Store`] because it is not part of the claim state machine; every store of this
/// crate implements both.
#[async_trait]
pub trait OperationIds: Send + Sync + 'static {
    /// The id stored under `name`, storing `fresh` first if there is none, atomically: two
    /// callers racing on one name get the same id.
    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError>;
}

impl<S: Store + ?Sized> Store for Arc<S> {
    #[inline]
    fn claim<'a>(&'a self, req: &'a ClaimRequest<'_>) -> StoreFuture<'a, Claim> {
        (**self).claim(req)
    }
    fn renew(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> StoreFuture<'_, Written> {
        (**self).renew(key, token, lease)
    }
    #[inline]
    fn complete(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        outcome: Outcome,
        ttl: Duration,
    ) -> StoreFuture<'_, Written> {
        (**self).complete(key, token, outcome, ttl)
    }
    fn release(&self, key: IdempotencyKey, token: LeaseToken) -> StoreFuture<'_, Written> {
        (**self).release(key, token)
    }
    fn mark_ambiguous<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        (**self).mark_ambiguous(key, token, note, ttl)
    }
    fn restore<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        (**self).restore(key, token, note, ttl)
    }
    fn mark_unknown<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        (**self).mark_unknown(key, token, note, ttl)
    }
}

#[async_trait]
impl<S: OperationIds + ?Sized> OperationIds for Arc<S> {
    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError> {
        (**self).operation_id(name, fresh).await
    }
}
