//! What a claim says it took over (`Claim::Acquired { takeover }`): nothing for a new record,
//! the kind of live record otherwise (S6, S8, S10). Operators count takeovers by it.

use std::time::Duration;

use super::{LEASE, StoreUnderTest, fingerprint_of, key_of};
use crate::store::{
    Claim, ClaimRequest, Existing, ExistingState, LeaseToken, Outcome, Takeover, Written,
};

fn req(
    order: u64,
    token: LeaseToken,
    amount: u64,
    lease: Duration,
    ttl: Duration,
) -> ClaimRequest<'static> {
    ClaimRequest::new(
        key_of(order),
        "charge",
        fingerprint_of(amount),
        token,
        lease,
        ttl,
    )
}

const NEW: Claim = Claim::Acquired { takeover: None };

/// S10: a claim that makes a new record took nothing over: the key was never claimed, its
/// record was released. A completed record past its time-to-live is not absent (S33: a
/// tombstone, answered, never run again). A dead
/// holder's record past its time-to-live is not absent (S34: it reads as ambiguous and never
/// expires by time): the claim takes it over from an expired holder.
pub async fn s10_claims_of_absent_or_expired_records_are_not_takeovers(store: impl StoreUnderTest) {
    let (lease, ttl) = (Duration::from_millis(100), Duration::from_millis(200));
    let long = Duration::from_secs(60);
    let first = LeaseToken::new();
    assert_eq!(
        store
            .claim(&req(30, first, 4200, LEASE, long))
            .await
            .unwrap(),
        NEW,
        "never claimed"
    );
    assert_eq!(
        store.release(key_of(30), first).await.unwrap(),
        Written::Applied
    );
    let second = LeaseToken::new();
    assert_eq!(
        store
            .claim(&req(30, second, 4200, lease, ttl))
            .await
            .unwrap(),
        NEW,
        "released"
    );
    let done = Outcome::from(b"\"done\"");
    assert_eq!(
        store.complete(key_of(30), second, done, ttl).await.unwrap(),
        Written::Applied
    );
    // A dead holder's record past its time-to-live, beside the completed one past its own.
    assert_eq!(
        store
            .claim(&req(31, LeaseToken::new(), 4200, lease, ttl))
            .await
            .unwrap(),
        NEW
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        matches!(
            store
                .claim(&req(30, LeaseToken::new(), 4200, LEASE, long))
                .await
                .unwrap(),
            Claim::Existing(Existing {
                state: ExistingState::Tombstone { .. },
                ..
            })
        ),
        "S33: a completed record past its time-to-live is a tombstone, neither absent nor taken over"
    );
    assert_eq!(
        store
            .claim(&req(31, LeaseToken::new(), 4200, LEASE, long))
            .await
            .unwrap(),
        Claim::Acquired {
            takeover: Some(Takeover::ExpiredHolder)
        },
        "S34: a dead holder's record past its time-to-live is taken over, not absent"
    );
}

/// S8: a claim of a running record whose lease has ended (its holder died or stalled) takes it
/// over, and says so: from an expired holder. While the lease is live it is not taken.
pub async fn s8_a_claim_past_a_holders_lease_is_a_takeover_from_an_expired_holder(
    store: impl StoreUnderTest,
) {
    let (lease, ttl) = (Duration::from_millis(200), Duration::from_secs(60));
    let (dead, next) = (LeaseToken::new(), LeaseToken::new());
    assert_eq!(
        store.claim(&req(32, dead, 4200, lease, ttl)).await.unwrap(),
        NEW
    );
    assert!(
        matches!(
            store.claim(&req(32, next, 4200, lease, ttl)).await.unwrap(),
            Claim::Existing(_)
        ),
        "a live lease is not taken"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        store.claim(&req(32, next, 4200, lease, ttl)).await.unwrap(),
        Claim::Acquired {
            takeover: Some(Takeover::ExpiredHolder)
        }
    );
}

/// S6: a claim of a record kept as ambiguous, with the same arguments, takes it over at once,
/// and says so: from ambiguity. With other arguments it is not taken (key reuse).
pub async fn s6_a_claim_of_an_ambiguous_record_is_a_takeover_from_ambiguity(
    store: impl StoreUnderTest,
) {
    let ttl = Duration::from_secs(60);
    let gave_up = LeaseToken::new();
    assert_eq!(
        store
            .claim(&req(33, gave_up, 4200, LEASE, ttl))
            .await
            .unwrap(),
        NEW
    );
    assert_eq!(
        store
            .mark_ambiguous(key_of(33), gave_up, "timed out", ttl)
            .await
            .unwrap(),
        Written::Applied
    );
    assert!(matches!(
        store
            .claim(&req(33, LeaseToken::new(), 9900, LEASE, ttl))
            .await
            .unwrap(),
        Claim::Existing(Existing {
            state: ExistingState::Ambiguous,
            ..
        })
    ));
    assert_eq!(
        store
            .claim(&req(33, LeaseToken::new(), 4200, LEASE, ttl))
            .await
            .unwrap(),
        Claim::Acquired {
            takeover: Some(Takeover::Ambiguous)
        }
    );
}
