//! The store trait: where claims and outcomes are kept, and what each operation must do.
//!
//! Every implementation obeys the same state machine (and the same conformance suite):
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
//! A record whose time-to-live has passed is absent for every operation. A write by a holder
//! whose token is no longer the record's is refused ([`Written::Fenced`]).

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use crate::error::StoreError;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;

pub mod memory;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub mod sqlite;

mod redact;
mod token;

#[cfg_attr(
    not(any(feature = "postgres", feature = "redis")),
    allow(unused_imports)
)]
pub(crate) use self::redact::redacted_url;
pub use self::token::LeaseToken;
#[cfg_attr(not(feature = "sqlite"), allow(unused_imports))]
pub(crate) use self::token::fork_generation;

/// What a claim asks of the store.
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
    /// How long the record lasts from now: past it, it is treated as absent.
    pub ttl: Duration,
}

/// What a claim got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The caller holds the lease (a new record, or a takeover) and must run the operation.
    Acquired,
    /// A live record exists and the caller may not run: see its state.
    Existing(Existing),
}

/// A live record that a claim did not take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Existing {
    /// The fingerprint the record was made with: if it is not the caller's, the key was reused.
    pub fingerprint: Fingerprint,
    /// Where the record stands.
    pub state: ExistingState,
}

/// Where a record that was not taken stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExistingState {
    /// Another holder's lease is live for this much longer.
    Running {
        /// Time until the lease expires.
        lease_remaining: Duration,
    },
    /// The operation completed with this serialized outcome.
    Completed {
        /// The outcome as the executor stored it (JSON).
        outcome: Vec<u8>,
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

/// A record as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The tool that made it.
    pub tool: String,
    /// The fingerprint it was made with.
    pub fingerprint: Fingerprint,
    /// Where it stands.
    pub state: RecordState,
    /// Time until it expires.
    pub expires_in: Duration,
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

/// Where claims and outcomes are kept. See the module docs for the state machine every
/// implementation obeys; `idem_runtime::conformance` tests it.
#[async_trait::async_trait]
pub trait Store: Send + Sync + 'static {
    /// Atomically: takes the record (absent, expired, or same fingerprint with an expired lease
    /// or ambiguous) for `req.token`, or reports the live record.
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim, StoreError>;

    /// Records the outcome and keeps it for `ttl`, if `token` still holds the lease.
    async fn complete(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        outcome: &[u8],
        ttl: Duration,
    ) -> Result<Written, StoreError>;

    /// Extends the lease that `token` holds to `lease` from now (by the store's clock), if
    /// `token` still holds the record: Running → Running, with a later lease end; the record's
    /// expiry moves to the new lease end if it was sooner, so a running record never expires
    /// before its lease. Applied also when the lease ran out but nobody took it over (the token
    /// is still the record's, so nobody else runs); [`Written::Fenced`] when the record is gone,
    /// expired, no longer Running, or held under another token. The executor renews while a
    /// body runs (S12); a refused renewal stops the holder (S13).
    async fn renew(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> Result<Written, StoreError>;

    /// Deletes the record, if `token` still holds the lease: the operation did not happen, so a
    /// later call may run it again.
    async fn release(&self, key: &IdempotencyKey, token: LeaseToken)
    -> Result<Written, StoreError>;

    /// Keeps the record as ambiguous (it may have happened) for `ttl`, if `token` still holds
    /// the lease: the next call with the same arguments takes it over at once, with the same key.
    async fn mark_ambiguous(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> Result<Written, StoreError>;

    /// The live record of `key`, if any.
    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError>;

    /// Deletes up to `limit` expired records; returns how many.
    async fn prune(&self, limit: usize) -> Result<usize, StoreError>;

    /// The operation id stored under `name`, storing `fresh` first if there is none.
    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError>;

    /// [`Store::claim`], answered without waiting, or `None` when this store cannot answer
    /// without waiting (the executor then awaits [`Store::claim`]).
    ///
    /// Optional: the default is `None`. A store that keeps its records in memory overrides it,
    /// so that the executor's hot path needs no boxed future for the claim. An answer must be
    /// exactly what [`Store::claim`] would have answered, and must not block (no I/O, no lock
    /// held across I/O by others).
    fn claim_now(&self, req: &ClaimRequest<'_>) -> Option<Result<Claim, StoreError>> {
        let _ = req;
        None
    }

    /// [`Store::complete`], answered without waiting, or `None` (the default) when this store
    /// cannot: the same rules as [`Store::claim_now`]. A store that keeps the outcome may take
    /// its bytes out of `outcome` (`std::mem::take`) instead of copying them; one that answers
    /// `None` must leave them.
    fn complete_now(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        outcome: &mut Vec<u8>,
        ttl: Duration,
    ) -> Option<Result<Written, StoreError>> {
        let _ = (key, token, outcome, ttl);
        None
    }
}

#[async_trait::async_trait]
impl<S: Store + ?Sized> Store for Arc<S> {
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
        (**self).claim(req).await
    }
    async fn complete(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        outcome: &[u8],
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        (**self).complete(key, token, outcome, ttl).await
    }
    async fn renew(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> Result<Written, StoreError> {
        (**self).renew(key, token, lease).await
    }
    async fn release(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
    ) -> Result<Written, StoreError> {
        (**self).release(key, token).await
    }
    async fn mark_ambiguous(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        (**self).mark_ambiguous(key, token, note, ttl).await
    }
    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        (**self).get(key).await
    }
    async fn prune(&self, limit: usize) -> Result<usize, StoreError> {
        (**self).prune(limit).await
    }
    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError> {
        (**self).operation_id(name, fresh).await
    }
    fn claim_now(&self, req: &ClaimRequest<'_>) -> Option<Result<Claim, StoreError>> {
        (**self).claim_now(req)
    }
    fn complete_now(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        outcome: &mut Vec<u8>,
        ttl: Duration,
    ) -> Option<Result<Written, StoreError>> {
        (**self).complete_now(key, token, outcome, ttl)
    }
}
