//! Store v2's rule for answers: one that is not ready does nothing until it is polled.

use std::time::Duration;

use super::{LEASE, StoreUnderTest, fingerprint_of, key_of};
use crate::store::{Claim, ClaimRequest, LeaseToken, Outcome, RecordState, Written};

/// An answer that is not ready (a boxed [`StoreFuture`](crate::store::StoreFuture)) does
/// nothing until it is first polled: the executor drops one that it cannot await where it asked
/// (it asks again where it can), as any caller may drop a future it no longer needs. A ready
/// answer has done its work when it is returned. Each transition is asked once and dropped
/// unpolled; when the answer was not ready, the record must be as it was.
pub async fn unpolled_answers_change_nothing(store: impl StoreUnderTest) {
    let key = key_of(22);
    let ttl = Duration::from_secs(60);
    let token = LeaseToken::new();
    let req = ClaimRequest::new(key, "charge", fingerprint_of(4200), token, LEASE, ttl);
    let claim = store.claim(&req);
    if claim.is_ready() {
        assert_eq!(claim.await.unwrap(), Claim::Acquired { takeover: None });
    } else {
        drop(claim);
        assert_eq!(
            store.get(&key).await.unwrap(),
            None,
            "an unpolled claim took the key"
        );
        assert_eq!(
            store.claim(&req).await.unwrap(),
            Claim::Acquired { takeover: None }
        );
    }
    let running = |what: &'static str| {
        let store = &store;
        async move {
            let record = store.get(&key).await.unwrap().expect("still live");
            match record.state {
                RecordState::Running {
                    token: t,
                    lease_remaining,
                } => {
                    assert_eq!(t, token, "{what}: the holder changed");
                    assert!(lease_remaining <= LEASE, "{what}: the lease was extended");
                }
                other => panic!("an unpolled {what} changed the record to {other:?}"),
            }
        }
    };
    let unpolled = [
        ("renew", store.renew(key, token, Duration::from_secs(3600))),
        (
            "complete",
            store.complete(key, token, Outcome::from(b"1"), ttl),
        ),
        (
            "mark_ambiguous",
            store.mark_ambiguous(key, token, "note", ttl),
        ),
        ("release", store.release(key, token)),
    ];
    for (what, answer) in unpolled {
        if answer.is_ready() {
            // Done already: this store answers at once, so the rest of the row has nothing to
            // check (its later writes are fenced or applied by the ready rules, S11).
            return;
        }
        drop(answer);
        running(what).await;
    }
    // Polled, the same write applies.
    assert_eq!(
        store
            .complete(key, token, Outcome::from(b"1"), ttl)
            .await
            .unwrap(),
        Written::Applied
    );
}
