//! The claim state machine's trait: one method per transition (the diagram is in the
//! [module docs](super)).

use std::time::Duration;

use super::{Claim, ClaimRequest, LeaseToken, Outcome, StoreFuture, Written};
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
    /// `Claim::Acquired { takeover: None }` for a new record (a record past its time-to-live
    /// counts as absent), `Some(`[`Takeover`]`)` for the kind of live record replaced.
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

    /// **Running → Ambiguous**, kept for `ttl` from now with `note` (the last error, for
    /// operators): the operation may have happened, so the next claim with the same fingerprint
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
}
