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
use std::time::{Duration, SystemTime};

use uuid::Uuid;

use crate::error::StoreError;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;

pub mod memory;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
pub mod records;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub mod sqlite;

pub use self::records::{Count, RecordFilter, Records, Released, StateKind};

/// `url` with its password replaced by `***`, for `Debug` and messages: a store's URL is never
/// printed with its secret. Handles `scheme://user:password@host/...` and PostgreSQL's
/// `key=value` form (`password=...`).
///
/// Public for the operator command, which prints the store it opened.
pub fn redacted_url(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if let Some((credentials, host)) = authority.rsplit_once('@')
            && let Some((user, _password)) = credentials.split_once(':')
        {
            return format!("{scheme}://{user}:***@{host}{path}");
        }
        return url.to_owned();
    }
    url.split_whitespace()
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod redaction_tests {
    use super::redacted_url;

    #[test]
    fn passwords_never_survive_redaction() {
        assert_eq!(
            redacted_url("postgres://agent:s3cr@t-pw@db:5432/agents"),
            "postgres://agent:***@db:5432/agents"
        );
        assert_eq!(
            redacted_url("redis://:s3cret@127.0.0.1:6379/0"),
            "redis://:***@127.0.0.1:6379/0"
        );
        assert_eq!(
            redacted_url("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
        assert_eq!(
            redacted_url("host=db user=agent password=s3cret dbname=agents"),
            "host=db user=agent password=*** dbname=agents"
        );
    }
}

/// The token of one lease on a record: writes that carry a stale token are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseToken(pub Uuid);

impl LeaseToken {
    /// A fresh random token (a UUID v4), unique among every token of every process.
    pub fn new() -> Self {
        LeaseToken(fresh_token())
    }
}

impl Default for LeaseToken {
    fn default() -> Self {
        Self::new()
    }
}

/// A UUID v4 without a `getrandom` system call per token (a fifth of an in-memory call's time):
/// each thread draws 122 random bits once and makes its tokens by XOR-ing a counter into the low
/// 48 bits, so its tokens are distinct and other threads' and processes' bases differ at random.
/// A forked child inherits the thread's state, so a fork draws a new base: a child never repeats
/// its parent's tokens (a repeated token would pass the fence).
fn fresh_token() -> Uuid {
    use std::cell::Cell;
    const COUNTER_BITS: u32 = 48;
    thread_local! {
        /// (fork generation, random base, tokens made from it)
        static STATE: Cell<Option<(u64, u128, u64)>> = const { Cell::new(None) };
    }
    STATE.with(|state| {
        let generation = fork_generation();
        let (base, n) = match state.get() {
            Some((g, base, n)) if g == generation && n < 1 << COUNTER_BITS => (base, n),
            _ => (Uuid::new_v4().as_u128(), 0),
        };
        state.set(Some((generation, base, n + 1)));
        // The counter's bits are below the version (bits 76..80) and variant (bits 62..64) bits.
        let bytes = (base ^ u128::from(n)).to_be_bytes();
        uuid::Builder::from_random_bytes(bytes).into_uuid()
    })
}

/// How many times this process's ancestry forked since it started using tokens: a child sees
/// a new number. (Checking the process id instead costs a system call per token.)
#[cfg(unix)]
pub(crate) fn fork_generation() -> u64 {
    use std::sync::Once;
    use std::sync::atomic::{AtomicU64, Ordering};
    static GENERATION: AtomicU64 = AtomicU64::new(0);
    static WATCH: Once = Once::new();
    extern "C" fn in_child() {
        GENERATION.fetch_add(1, Ordering::Relaxed);
    }
    WATCH.call_once(|| {
        // SAFETY: registers a handler that only touches an atomic, as fork handlers must.
        let registered = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        assert_eq!(registered, 0, "idemkit: cannot watch for fork()");
    });
    GENERATION.load(Ordering::Relaxed)
}

#[cfg(not(unix))]
pub(crate) fn fork_generation() -> u64 {
    0
}

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
        }
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
