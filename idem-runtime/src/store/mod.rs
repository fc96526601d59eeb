//! The store traits: where claims and outcomes are kept, and what each transition must do.
//!
//! - [`Store`]: the claim state machine, one method per transition. The executor drives it.
//! - [`OperationIds`]: the name → UUID map behind [`OperationId`](crate::OperationId).
//!
//! Every [`Store`] obeys the same state machine, and proves it with the same conformance suite
//! (`idem_runtime::conformance`, feature `conformance`):
//!
//! ```text
//!              claim (absent or expired)                 complete (token matches)
//!   absent ───────────────────────────────▶ Running ─────────────────────────────▶ Completed
//!      ▲                                    │  ▲  │
//!      │         release (token matches)    │  │  │ mark_ambiguous (token matches)
//!      │                                    │  │  │ (renew, token matches: Running → Running,
//!      │                                    │  │  │  the lease end moved later)
//!      └────────────────────────────────────┘  │  ▼
//!                                              └─ Ambiguous
//!          claim, same fingerprint, and the lease expired or the record is Ambiguous: take over
//! ```
//!
//! A holder whose call was cancelled before anything ran under its claim gives the claim back
//! with [`Store::restore`] (S27): the record becomes what it was before that claim (absent,
//! Ambiguous, or the expired holder's Running), so a cancellation never makes an unknown
//! outcome of its own.
//!
//! A record whose time-to-live has passed is absent for every operation. A write by a holder
//! whose token is no longer the record's is refused ([`Written::Fenced`]); a write the holder
//! already made, sent again under its token (its reply was lost), is [`Written::Applied`] again.
//!
//! An operator (not the executor) may also settle an Ambiguous record, or a Running one whose
//! lease ran out, with [`Records::resolve`] (S24): applied → Completed with the operator's
//! outcome; not applied → absent.
//!
//! # Writing a store
//!
//! Implement the five transitions and the name → id map: [`Store`] when the store can answer
//! at once (each method returns [`StoreFuture::ready`]: no allocation, no poll), or
//! [`AsyncStore`] when it must wait (plain `async fn`s, boxed for you); and [`OperationIds`].
//! Add [`Records`] for operators (the `idemkit` command) and for the conformance suite, which
//! then proves the store in two lines of a test file (see `idem_runtime::conformance`, feature
//! `conformance`). `idem-runtime/tests/third_party_store.rs` is a complete store written with
//! the public API only: about 130 lines for the transitions and the map, 60 for the reads.
//!
//! An answer that is not ready must do nothing until it is polled (an `async` block never
//! does): the executor may drop one it cannot await where it asked, and ask again.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use uuid::Uuid;

use crate::error::StoreError;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;

pub(crate) mod memory;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
pub(crate) mod records;
#[cfg(feature = "redis")]
pub(crate) mod redis;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;

mod future;
mod intercept;
mod outcome;
mod redact;
mod token;
pub(crate) mod transitions;

// The types of the store implementer's API have their one public path here; `Store`,
// `Records` and the stores themselves have theirs at the crate's top level.
pub use self::future::StoreFuture;
pub use self::intercept::{Intercept, Step};
pub use self::outcome::Outcome;
pub(crate) use self::records::Records;
pub use self::records::{
    Count, Decision, Forgot, RecordFilter, Released, Resolution, Resolved, StateKind, UnknownState,
    check_resolution, count_records,
};
pub use self::redact::redacted_url;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use self::sqlite::{DEFAULT_PATH_ENV, default_path};
pub use self::token::LeaseToken;
#[cfg_attr(not(feature = "sqlite"), allow(unused_imports))]
pub(crate) use self::token::fork_generation;
pub(crate) use self::transitions::Store;

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
    /// ([`RecordFilter::tenant`]). The key already holds it (S18): a store never compares it.
    pub tenant: Option<Arc<str>>,
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
            sent_at: None,
        }
    }

    /// The same claim, made under `tenant`.
    pub fn with_tenant(mut self, tenant: Option<Arc<str>>) -> Self {
        self.tenant = tenant;
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
/// a record is [`Record`]).
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

/// A record as an operator sees it (see [`Records`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Record {
    /// Its key.
    pub key: IdempotencyKey,
    /// The tool that made it.
    pub tool: String,
    /// The fingerprint it was made with.
    pub fingerprint: Fingerprint,
    /// Where it stands.
    pub state: RecordState,
    /// Time until it expires.
    pub expires_in: Duration,
    /// When it was made (its first claim, or the takeover that restarted it), by the store's
    /// clock: SQLite's the machine's, PostgreSQL's `now()`, Redis's `TIME`, the memory store's
    /// tokio's. [`SystemTime::UNIX_EPOCH`] when the store does not know: a record written before
    /// stores kept this (schema version 1).
    pub created: SystemTime,
    /// When it last changed (a claim, a renewal, completion, marked ambiguous), by the same
    /// clock; [`SystemTime::UNIX_EPOCH`] when unknown, as for `created`.
    pub updated: SystemTime,
    /// The scope (tenant) it was made under, if any (`None` also for a record written before
    /// stores kept it: schema version 2).
    pub tenant: Option<String>,
    /// What an operator decided about it ([`Records::resolve`], S24), if anything.
    ///
    /// [`Decision::Applied`]: the record is Completed with the operator's outcome.
    /// [`Decision::NotApplied`]: the record no longer counts (a claim finds its key absent and
    /// runs the operation); [`Records::get`] still returns it as it stood when resolved, with
    /// [`Record::expires_in`] zero and this resolution, until the time-to-live given to
    /// `resolve` passes or a new claim of the key replaces it ([`Record::is_live`] tells them
    /// apart). `None` also for a record written before stores kept decisions.
    pub resolution: Option<Resolution>,
}

impl Record {
    /// A record, made and changed at an unknown time (set [`Record::created`] and
    /// [`Record::updated`] where the store knows them): for stores written outside this crate.
    pub fn new(
        key: IdempotencyKey,
        tool: impl Into<String>,
        fingerprint: Fingerprint,
        state: RecordState,
        expires_in: Duration,
    ) -> Self {
        Record {
            key,
            tool: tool.into(),
            fingerprint,
            state,
            expires_in,
            created: SystemTime::UNIX_EPOCH,
            updated: SystemTime::UNIX_EPOCH,
            tenant: None,
            resolution: None,
        }
    }

    /// The same, with an operator's `resolution`.
    pub fn with_resolution(mut self, resolution: Option<Resolution>) -> Self {
        self.resolution = resolution;
        self
    }

    /// Whether it still counts: `false` only for a record an operator resolved as not applied
    /// (see [`Record::resolution`]), which [`Records::get`] returns for a while though a claim
    /// finds its key absent.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use idem_runtime::store::{Decision, Record, RecordState, Resolution};
    /// use idem_runtime::{Fingerprint, IdempotencyKey};
    ///
    /// let key = IdempotencyKey::derive("charge", &[("order", &1)]);
    /// let ambiguous = RecordState::Ambiguous { note: "timed out".into() };
    /// let record = Record::new(key, "charge", Fingerprint::of(&1).unwrap(), ambiguous, Duration::ZERO)
    ///     .with_resolution(Some(Resolution::new(Decision::NotApplied, SystemTime::now(), None)));
    /// assert!(!record.is_live());
    /// ```
    pub fn is_live(&self) -> bool {
        !matches!(
            self.resolution,
            Some(Resolution {
                decision: Decision::NotApplied,
                ..
            })
        )
    }

    /// The same, made under `tenant`.
    pub fn with_tenant(mut self, tenant: Option<String>) -> Self {
        self.tenant = tenant;
        self
    }

    /// The same, made at `created` and last changed at `updated`.
    pub fn with_times(mut self, created: SystemTime, updated: SystemTime) -> Self {
        self.created = created;
        self.updated = updated;
        self
    }
}

/// Where a record stands, as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordState {
    /// A holder is running it.
    Running {
        /// The holder's token.
        token: LeaseToken,
        /// Time until its lease expires (zero when it already has).
        lease_remaining: Duration,
    },
    /// Completed with this serialized outcome.
    Completed {
        /// The outcome (JSON).
        outcome: Vec<u8>,
    },
    /// Ran out of attempts after a failure that may have taken effect.
    Ambiguous {
        /// The last error, as the executor wrote it.
        note: String,
    },
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
}

#[async_trait]
impl<S: OperationIds + ?Sized> OperationIds for Arc<S> {
    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError> {
        (**self).operation_id(name, fresh).await
    }
}
