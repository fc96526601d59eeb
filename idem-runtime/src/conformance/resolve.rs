//! Rows of a holder's write sent again (issue 30 #8), mixed lease lengths (S23), and an
//! operator's decisions (S24): `resolve` and `forget` refused under a live lease.

use std::time::{Duration, SystemTime};

use super::lease::renew_req;
use super::records::{HOUR, claim_raw};
use super::{StoreUnderTest, fingerprint_of, key_of};
use crate::StoreErrorKind;
use crate::store::{
    Claim, ClaimRequest, Decision, Existing, ExistingState, Forgot, LeaseToken, Outcome,
    RecordFilter, RecordState, Records, Resolved, StateKind, Written,
};

/// What an operator's applied stores: the JSON a call of the tool returns.
const RESOLVED_OUTCOME: &[u8] = br#"{"run":0,"key":"settled by an operator"}"#;

/// A held record of `key_of(order)`, marked ambiguous by its holder: the holder's token.
async fn ambiguous(store: &impl StoreUnderTest, order: u64) -> LeaseToken {
    let holder = claim_raw(store, "charge", order, HOUR, HOUR).await;
    assert_eq!(
        store
            .mark_ambiguous(
                key_of(order),
                holder,
                "timed out; may have taken effect",
                HOUR
            )
            .await
            .unwrap(),
        Written::Applied
    );
    holder
}

/// Issue 30 #8: a completion applied whose reply was lost is sent again by the executor under
/// the same token, and is applied again (the record is completed by that holder); under any
/// other token it is fenced.
pub async fn complete_retried_under_its_token_is_applied(store: impl StoreUnderTest) {
    let holder = claim_raw(&store, "charge", 1, HOUR, HOUR).await;
    let outcome = Outcome::from(br#"{"run":1}"#);
    for _ in 0..2 {
        assert_eq!(
            store
                .complete(key_of(1), holder, outcome.clone(), HOUR)
                .await
                .unwrap(),
            Written::Applied,
            "the holder's completion, sent again, is applied again"
        );
    }
    assert_eq!(
        store
            .complete(key_of(1), LeaseToken::new(), Outcome::from(b"{}"), HOUR)
            .await
            .unwrap(),
        Written::Fenced,
        "another token's completion is fenced"
    );
    assert_eq!(
        store
            .mark_ambiguous(key_of(1), holder, "late", HOUR)
            .await
            .unwrap(),
        Written::Fenced,
        "a completed record is not marked ambiguous"
    );
    let again = ClaimRequest::new(
        key_of(1),
        "charge",
        fingerprint_of(4200),
        LeaseToken::new(),
        HOUR,
        HOUR,
    );
    assert_eq!(
        store.claim(&again).await.unwrap(),
        Claim::Existing(Existing::new(
            fingerprint_of(4200),
            ExistingState::Completed { outcome }
        )),
        "the outcome replays as first written"
    );
}

/// Issue 30 #8: a mark sent again under its token is applied again; a completion under that
/// token is then fenced, and after a takeover the old holder's mark is fenced too.
pub async fn mark_ambiguous_retried_under_its_token_is_applied(store: impl StoreUnderTest) {
    let holder = ambiguous(&store, 2).await;
    assert_eq!(
        store
            .mark_ambiguous(key_of(2), holder, "timed out; may have taken effect", HOUR)
            .await
            .unwrap(),
        Written::Applied,
        "the holder's mark, sent again, is applied again"
    );
    assert_eq!(
        store
            .mark_ambiguous(key_of(2), LeaseToken::new(), "other", HOUR)
            .await
            .unwrap(),
        Written::Fenced
    );
    assert_eq!(
        store
            .complete(key_of(2), holder, Outcome::from(b"{}"), HOUR)
            .await
            .unwrap(),
        Written::Fenced,
        "an ambiguous record is not completed by its old holder"
    );
    let record = store.get(&key_of(2)).await.unwrap().expect("live");
    assert!(
        matches!(record.state, RecordState::Ambiguous { .. }),
        "{record:?}"
    );
    // Taken over: the old holder's mark is no longer its own.
    let next = LeaseToken::new();
    assert!(matches!(
        store.claim(&renew_req(2, next, HOUR, HOUR)).await.unwrap(),
        Claim::Acquired { .. }
    ));
    assert_eq!(
        store
            .mark_ambiguous(key_of(2), holder, "late", HOUR)
            .await
            .unwrap(),
        Written::Fenced
    );
}

/// S23: a claimer whose lease is shorter than the holder's never takes over the holder's key
/// while the holder's lease is live: a lease end further ahead than the claimer's lease is not
/// clock skew. The holder renews throughout.
pub async fn s23_a_claimer_with_a_shorter_lease_never_takes_a_renewing_holders_key(
    store: impl StoreUnderTest,
) {
    let (long, short) = (Duration::from_secs(60), Duration::from_millis(50));
    let (holder, claimer) = (LeaseToken::new(), LeaseToken::new());
    assert_eq!(
        store
            .claim(&renew_req(23, holder, long, HOUR))
            .await
            .unwrap(),
        Claim::Acquired { takeover: None }
    );
    for _ in 0..3 {
        match store
            .claim(&renew_req(23, claimer, short, HOUR))
            .await
            .unwrap()
        {
            Claim::Existing(Existing {
                state: ExistingState::Running { lease_remaining },
                ..
            }) => assert!(
                lease_remaining > Duration::from_secs(30),
                "the holder's 60 s lease, not the claimer's 50 ms: {lease_remaining:?} left"
            ),
            other => panic!("the holder's lease is live, yet the claim got {other:?}"),
        }
        // Longer than the claimer's lease: a cap by it would have ended the holder's lease.
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(
            store.renew(key_of(23), holder, long).await.unwrap(),
            Written::Applied,
            "the holder still holds its key"
        );
    }
}

/// S24 (`idemkit forget`): refused while a holder's lease on the record is live, unless forced;
/// a record whose lease ran out, or in another state, is forgotten without force.
pub async fn s24_forget_is_refused_under_a_live_lease_unless_forced(store: impl StoreUnderTest) {
    let holder = claim_raw(&store, "charge", 1, HOUR, HOUR).await;
    match store.forget(&key_of(1), false).await.unwrap() {
        Forgot::LeaseLive { remaining } => assert!(remaining > Duration::from_secs(60)),
        other => panic!("a live lease refuses a forget: {other:?}"),
    }
    let record = store
        .get(&key_of(1))
        .await
        .unwrap()
        .expect("nothing changed");
    assert!(matches!(record.state, RecordState::Running { token, .. } if token == holder));
    assert_eq!(
        store.forget(&key_of(1), true).await.unwrap(),
        Forgot::Forgotten
    );
    assert!(store.get(&key_of(1)).await.unwrap().is_none());
    assert_eq!(
        store.renew(key_of(1), holder, HOUR).await.unwrap(),
        Written::Fenced,
        "the forgotten holder is fenced"
    );

    // A lease that ran out, and an ambiguous record: no force needed.
    let short = Duration::from_millis(50);
    claim_raw(&store, "charge", 2, short, HOUR).await;
    ambiguous(&store, 3).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    for order in [2, 3] {
        assert_eq!(
            store.forget(&key_of(order), false).await.unwrap(),
            Forgot::Forgotten
        );
    }
    assert_eq!(
        store.forget(&key_of(2), false).await.unwrap(),
        Forgot::NotFound
    );
}

/// Whether `at` is now by a store's clock, give or take a minute (PostgreSQL's and Redis's
/// clocks are the server's).
fn about_now(at: SystemTime) -> bool {
    let now = SystemTime::now();
    let minute = Duration::from_secs(60);
    at > now - minute && at < now + minute
}

/// S24 (`idemkit resolve KEY applied --outcome JSON`): an ambiguous record completes with the
/// operator's outcome, which repeats replay byte for byte; the decision, its time and note are
/// kept with it; the holder that lost it is fenced.
pub async fn s24_resolve_applied_completes_the_record_and_repeats_replay_it(
    store: impl StoreUnderTest,
) {
    let holder = ambiguous(&store, 1).await;
    assert_eq!(
        store
            .resolve(
                &key_of(1),
                Decision::Applied,
                Some(RESOLVED_OUTCOME),
                Some("the provider's dashboard shows the charge"),
                HOUR,
            )
            .await
            .unwrap(),
        Resolved::Resolved
    );
    // Sent again (its reply was lost): it stands; another outcome is refused.
    assert_eq!(
        store
            .resolve(
                &key_of(1),
                Decision::Applied,
                Some(RESOLVED_OUTCOME),
                Some("the provider's dashboard shows the charge"),
                HOUR,
            )
            .await
            .unwrap(),
        Resolved::Resolved
    );
    assert_eq!(
        store
            .resolve(&key_of(1), Decision::Applied, Some(b"{}"), None, HOUR)
            .await
            .unwrap(),
        Resolved::Completed
    );
    let repeat = ClaimRequest::new(
        key_of(1),
        "charge",
        fingerprint_of(4200),
        LeaseToken::new(),
        HOUR,
        HOUR,
    );
    assert_eq!(
        store.claim(&repeat).await.unwrap(),
        Claim::Existing(Existing::new(
            fingerprint_of(4200),
            ExistingState::Completed {
                outcome: Outcome::from(RESOLVED_OUTCOME)
            }
        )),
        "a repeat replays the operator's outcome"
    );
    let record = store.get(&key_of(1)).await.unwrap().expect("live");
    assert!(record.is_live());
    assert_eq!(
        record.state,
        RecordState::Completed {
            outcome: RESOLVED_OUTCOME.to_vec()
        }
    );
    assert!(record.expires_in > Duration::from_secs(60));
    let resolution = record.resolution.expect("the decision is kept");
    assert_eq!(resolution.decision, Decision::Applied);
    assert_eq!(
        resolution.note.as_deref(),
        Some("the provider's dashboard shows the charge")
    );
    assert!(about_now(resolution.at), "{resolution:?}");
    let listed = store
        .list(&RecordFilter::new().state(StateKind::Completed))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].resolution.as_ref().map(|r| r.decision),
        Some(Decision::Applied),
        "list shows it too"
    );
    for written in [
        store
            .complete(key_of(1), holder, Outcome::from(b"{}"), HOUR)
            .await
            .unwrap(),
        store
            .mark_ambiguous(key_of(1), holder, "late", HOUR)
            .await
            .unwrap(),
    ] {
        assert_eq!(written, Written::Fenced, "the old holder is fenced");
    }
}

/// S24 (`idemkit resolve KEY not-applied`): an ambiguous record is released (the next claim
/// finds its key absent), and `get` still shows it, with the decision, until a new claim of the
/// key replaces it.
pub async fn s24_resolve_not_applied_releases_the_record_and_keeps_the_decision(
    store: impl StoreUnderTest,
) {
    let holder = ambiguous(&store, 1).await;
    assert_eq!(
        store
            .resolve(
                &key_of(1),
                Decision::NotApplied,
                None,
                Some("no such charge at the provider"),
                HOUR
            )
            .await
            .unwrap(),
        Resolved::Resolved
    );
    let record = store
        .get(&key_of(1))
        .await
        .unwrap()
        .expect("shown with its decision");
    assert!(!record.is_live(), "{record:?}");
    assert_eq!(record.expires_in, Duration::ZERO);
    assert!(matches!(record.state, RecordState::Ambiguous { .. }));
    let resolution = record.resolution.expect("the decision is kept");
    assert_eq!(resolution.decision, Decision::NotApplied);
    assert_eq!(
        resolution.note.as_deref(),
        Some("no such charge at the provider")
    );
    assert!(about_now(resolution.at), "{resolution:?}");
    assert!(
        store.list(&RecordFilter::new()).await.unwrap().is_empty(),
        "not live: not listed"
    );
    assert!(store.counts().await.unwrap().is_empty(), "nor counted");
    assert_eq!(
        store
            .mark_ambiguous(key_of(1), holder, "late", HOUR)
            .await
            .unwrap(),
        Written::Fenced,
        "the old holder is fenced"
    );
    assert_eq!(
        store
            .resolve(
                &key_of(1),
                Decision::NotApplied,
                None,
                Some("no such charge at the provider"),
                HOUR
            )
            .await
            .unwrap(),
        Resolved::Resolved,
        "sent again (its reply was lost): it stands"
    );
    assert_eq!(
        store
            .resolve(&key_of(1), Decision::NotApplied, None, None, HOUR)
            .await
            .unwrap(),
        Resolved::NotFound,
        "another decision: settled already, nothing to resolve"
    );
    assert_eq!(
        store
            .resolve(
                &key_of(1),
                Decision::Applied,
                Some(RESOLVED_OUTCOME),
                None,
                HOUR
            )
            .await
            .unwrap(),
        Resolved::NotFound
    );
    // The next call runs: a new record, which has no decision.
    assert_eq!(
        store
            .claim(&renew_req(1, LeaseToken::new(), HOUR, HOUR))
            .await
            .unwrap(),
        Claim::Acquired { takeover: None }
    );
    let record = store.get(&key_of(1)).await.unwrap().expect("live");
    assert!(
        record.is_live() && record.resolution.is_none(),
        "{record:?}"
    );
}

/// S24: refused while a holder's lease is live (it may still finish); nothing changes.
pub async fn s24_resolve_is_refused_while_a_lease_is_live(store: impl StoreUnderTest) {
    let holder = claim_raw(&store, "charge", 1, HOUR, HOUR).await;
    for (decision, outcome) in [
        (Decision::Applied, Some(RESOLVED_OUTCOME)),
        (Decision::NotApplied, None),
    ] {
        match store
            .resolve(&key_of(1), decision, outcome, None, HOUR)
            .await
            .unwrap()
        {
            Resolved::LeaseLive { remaining } => assert!(remaining > Duration::from_secs(60)),
            other => panic!("a live lease refuses a resolve: {other:?}"),
        }
    }
    let record = store.get(&key_of(1)).await.unwrap().expect("unchanged");
    assert!(matches!(record.state, RecordState::Running { token, .. } if token == holder));
    assert!(record.resolution.is_none());
    assert_eq!(
        store
            .complete(key_of(1), holder, Outcome::from(b"{}"), HOUR)
            .await
            .unwrap(),
        Written::Applied,
        "the holder still holds it"
    );
}

/// S24: a running record whose holder's lease ran out (a crashed holder) may be resolved; the
/// holder, should it come back, is fenced.
pub async fn s24_resolve_of_an_expired_holder_fences_it(store: impl StoreUnderTest) {
    let short = Duration::from_millis(50);
    let holder = claim_raw(&store, "charge", 1, short, HOUR).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        store
            .resolve(
                &key_of(1),
                Decision::Applied,
                Some(RESOLVED_OUTCOME),
                None,
                HOUR
            )
            .await
            .unwrap(),
        Resolved::Resolved
    );
    assert_eq!(
        store.renew(key_of(1), holder, HOUR).await.unwrap(),
        Written::Fenced
    );
    assert_eq!(
        store
            .complete(key_of(1), holder, Outcome::from(b"{}"), HOUR)
            .await
            .unwrap(),
        Written::Fenced
    );
    let record = store.get(&key_of(1)).await.unwrap().expect("live");
    assert_eq!(
        record.state,
        RecordState::Completed {
            outcome: RESOLVED_OUTCOME.to_vec()
        }
    );
    assert_eq!(record.resolution.map(|r| r.note), Some(None));

    let holder = claim_raw(&store, "charge", 2, short, HOUR).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        store
            .resolve(&key_of(2), Decision::NotApplied, None, None, HOUR)
            .await
            .unwrap(),
        Resolved::Resolved
    );
    assert_eq!(
        store.release(key_of(2), holder).await.unwrap(),
        Written::Fenced
    );
    assert_eq!(
        store
            .claim(&renew_req(2, LeaseToken::new(), HOUR, HOUR))
            .await
            .unwrap(),
        Claim::Acquired { takeover: None },
        "released: the next call runs"
    );
}

/// S24: a completed record's outcome is known: refused, nothing changes.
pub async fn s24_resolve_is_refused_on_a_completed_record(store: impl StoreUnderTest) {
    let holder = claim_raw(&store, "charge", 1, HOUR, HOUR).await;
    let _ = store
        .complete(key_of(1), holder, Outcome::from(br#"{"run":1}"#), HOUR)
        .await
        .unwrap();
    for (decision, outcome) in [
        (Decision::Applied, Some(RESOLVED_OUTCOME)),
        (Decision::NotApplied, None),
    ] {
        assert_eq!(
            store
                .resolve(&key_of(1), decision, outcome, None, HOUR)
                .await
                .unwrap(),
            Resolved::Completed
        );
    }
    let record = store.get(&key_of(1)).await.unwrap().expect("live");
    assert_eq!(
        record.state,
        RecordState::Completed {
            outcome: br#"{"run":1}"#.to_vec()
        }
    );
    assert!(record.resolution.is_none());
}

/// S24: no record, nothing to resolve.
pub async fn s24_resolve_of_no_record_is_not_found(store: impl StoreUnderTest) {
    assert_eq!(
        store
            .resolve(&key_of(9), Decision::NotApplied, None, None, HOUR)
            .await
            .unwrap(),
        Resolved::NotFound
    );
    assert!(store.get(&key_of(9)).await.unwrap().is_none());
}

/// S24: applied needs the outcome, not-applied takes none; a misfit changes nothing.
pub async fn s24_resolve_checks_the_outcome_fits_the_decision(store: impl StoreUnderTest) {
    ambiguous(&store, 1).await;
    for (decision, outcome) in [
        (Decision::Applied, None),
        (Decision::NotApplied, Some(RESOLVED_OUTCOME)),
    ] {
        let e = store
            .resolve(&key_of(1), decision, outcome, None, HOUR)
            .await
            .expect_err("refused");
        assert_eq!(e.kind(), StoreErrorKind::Other, "{e}");
    }
    let record = store.get(&key_of(1)).await.unwrap().expect("live");
    assert!(matches!(record.state, RecordState::Ambiguous { .. }));
    assert!(record.resolution.is_none());
}

/// S24: a not-applied decision is kept for the time-to-live given to `resolve`, through
/// prunes; then it goes like any expired record.
pub async fn s24_a_kept_decision_outlives_a_prune_until_its_ttl(store: impl StoreUnderTest) {
    ambiguous(&store, 1).await;
    ambiguous(&store, 2).await;
    let short = Duration::from_millis(50);
    for (order, ttl) in [(1, HOUR), (2, short)] {
        assert_eq!(
            store
                .resolve(&key_of(order), Decision::NotApplied, None, None, ttl)
                .await
                .unwrap(),
            Resolved::Resolved
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    Records::prune(&store, 100).await.unwrap();
    assert!(
        store
            .get(&key_of(1))
            .await
            .unwrap()
            .is_some_and(|r| r.resolution.is_some()),
        "kept for its ttl"
    );
    assert!(
        store.get(&key_of(2)).await.unwrap().is_none(),
        "gone after its ttl"
    );
}
