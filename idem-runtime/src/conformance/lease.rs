//! Rows S12–S13: `renew` on the store, and the executor renewing while a body runs or stopping
//! when it cannot.

use std::sync::Arc;
use std::time::Duration;

use super::{Counted, LEASE, StoreUnderTest, TestError, charge, fingerprint_of, key_of, runtime};
use crate::store::{
    Claim, ClaimRequest, Existing, ExistingState, LeaseToken, RecordState, Takeover, Written,
};
use crate::testing::{Intercept, Step};
use crate::{CallOutcome, StoreError};

pub(super) fn renew_req(
    order: u64,
    token: LeaseToken,
    lease: Duration,
    ttl: Duration,
) -> ClaimRequest<'static> {
    ClaimRequest::new(
        key_of(order),
        "charge",
        fingerprint_of(4200),
        token,
        lease,
        ttl,
    )
}

/// S12 (store): `renew` moves a held lease's end later, and the record's expiry with it, so a
/// holder that renews is neither taken over nor expired while it runs.
pub async fn s12_renew_extends_a_held_lease_past_its_end_and_its_ttl(store: impl StoreUnderTest) {
    let short = Duration::from_millis(300);
    let (holder, other) = (LeaseToken::new(), LeaseToken::new());
    assert_eq!(
        store
            .claim(&renew_req(15, holder, short, short))
            .await
            .unwrap(),
        Claim::Acquired { takeover: None }
    );
    assert_eq!(
        store
            .renew(key_of(15), holder, Duration::from_secs(5))
            .await
            .unwrap(),
        Written::Applied
    );
    // Past the claim's lease and its ttl: the renewed lease holds.
    tokio::time::sleep(Duration::from_millis(600)).await;
    // Claimed with the lease the holder renews with, as callers of one tool are.
    match store
        .claim(&renew_req(15, other, Duration::from_secs(5), short))
        .await
        .unwrap()
    {
        Claim::Existing(Existing {
            state: ExistingState::Running { lease_remaining },
            ..
        }) => assert!(
            lease_remaining > Duration::from_secs(2),
            "the renewed lease ends about 5 s after the renewal ({lease_remaining:?} left)"
        ),
        other => panic!("a renewed lease is neither taken over nor expired: {other:?}"),
    }
    let record = store.get(&key_of(15)).await.unwrap().expect("still live");
    assert!(matches!(record.state, RecordState::Running { token, .. } if token == holder));
}

/// S12 (store): a holder whose lease ran out, but that nobody took over, still holds the record
/// (its token is the record's: nobody else runs), so its renewal applies.
pub async fn s12_renew_after_the_lease_ran_out_untaken_still_holds(store: impl StoreUnderTest) {
    let (holder, other) = (LeaseToken::new(), LeaseToken::new());
    let ttl = Duration::from_secs(60);
    let req = |token| renew_req(16, token, Duration::from_millis(100), ttl);
    assert_eq!(
        store.claim(&req(holder)).await.unwrap(),
        Claim::Acquired { takeover: None }
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        store
            .renew(key_of(16), holder, Duration::from_secs(5))
            .await
            .unwrap(),
        Written::Applied
    );
    assert!(
        matches!(store.claim(&req(other)).await.unwrap(), Claim::Existing(_)),
        "a renewed lease is not taken over"
    );
}

/// S12/S13 (store): a renewal under a token that no longer holds the record is refused and
/// changes nothing: after a takeover, after the record ended, and for a key never claimed.
pub async fn s12_renew_is_refused_to_a_stale_token_and_to_ended_records(
    store: impl StoreUnderTest,
) {
    let (old, new) = (LeaseToken::new(), LeaseToken::new());
    let ttl = Duration::from_secs(60);
    let long = Duration::from_secs(5);
    let req = |token| renew_req(17, token, Duration::from_millis(200), ttl);
    assert_eq!(
        store.claim(&req(old)).await.unwrap(),
        Claim::Acquired { takeover: None }
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        store.claim(&req(new)).await.unwrap(),
        Claim::Acquired {
            takeover: Some(Takeover::ExpiredHolder)
        }
    );
    assert_eq!(
        store.renew(key_of(17), old, long).await.unwrap(),
        Written::Fenced,
        "the taken-over holder's renewal"
    );
    let record = store.get(&key_of(17)).await.unwrap().expect("live");
    assert!(
        matches!(record.state, RecordState::Running { token, .. } if token == new),
        "the new holder keeps the record"
    );
    assert_eq!(
        store
            .complete(key_of(17), new, b"\"done\"".as_slice().into(), ttl)
            .await
            .unwrap(),
        Written::Applied
    );
    assert_eq!(
        store.renew(key_of(17), new, long).await.unwrap(),
        Written::Fenced,
        "a completed record is not renewed"
    );
    assert!(matches!(
        store.get(&key_of(17)).await.unwrap().unwrap().state,
        RecordState::Completed { .. }
    ));
    assert_eq!(
        store.renew(key_of(18), new, long).await.unwrap(),
        Written::Fenced,
        "a key never claimed"
    );
    assert_eq!(store.get(&key_of(18)).await.unwrap(), None);
}

/// S12 through the executor: a body that runs 2.5 leases is not taken over: its holder renews
/// the lease while it runs, so a second caller waits for it and replays its outcome. (Before
/// renewals, the second caller took the key over at the lease's end and ran the body again.)
pub async fn s12_a_body_longer_than_its_lease_runs_once(store: impl StoreUnderTest) {
    let idem = runtime(store);
    let tool = Arc::new(Counted::new());
    let first = {
        let (idem, tool) = (idem.clone(), tool.clone());
        tokio::spawn(async move { tool.call(charge(&idem), 19, 4200, &[], LEASE * 5 / 2).await })
    };
    tokio::time::sleep(LEASE / 4).await;
    let (second, outcome) = tool
        .call(charge(&idem), 19, 4200, &[], Duration::ZERO)
        .await;
    let (first, first_outcome) = first.await.unwrap();
    assert_eq!(first_outcome, CallOutcome::Completed);
    assert_eq!(outcome, CallOutcome::Replayed, "the second caller waited");
    assert_eq!(second, first);
    assert_eq!(tool.runs(), 1, "the body ran once");
}

/// S13 through the executor: a holder whose renewals fail until its lease ends stops its body
/// at the next await (the body never finishes), starts no further attempt, and its caller is
/// told the outcome is unknown; the record is kept as ambiguous, so the next call takes it over
/// with the same key.
pub async fn s13_a_holder_whose_renewals_fail_stops_and_is_taken_over(store: impl StoreUnderTest) {
    let store = Arc::new(store);
    let cut_off = runtime(Intercept::new(store.clone(), |step, _| {
        // Renewals fail, as when the holder cannot reach the store; everything else passes.
        (step == Step::Renew).then(|| StoreError::unavailable("connection refused"))
    }));
    let store = Arc::new(store);
    let idem = runtime(store.clone());
    let tool = Counted::new();
    let (stopped, outcome) = tool
        .call(
            charge(&cut_off).lease(Duration::from_millis(300)),
            20,
            4200,
            &[],
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(
        (stopped, outcome),
        (Err(TestError::LeaseLost), CallOutcome::LeaseLost),
        "stopped at its await, long before the 30 s body would end"
    );
    assert_eq!(tool.runs(), 1, "no further attempt");
    let record = store.get(&key_of(20)).await.unwrap().expect("kept");
    assert!(
        matches!(record.state, RecordState::Ambiguous { .. }),
        "an attempt was running: kept as ambiguous, {:?}",
        record.state
    );
    let (next, outcome) = tool
        .call(charge(&idem), 20, 4200, &[], Duration::ZERO)
        .await;
    assert_eq!((next.unwrap().run, outcome), (2, CallOutcome::Completed));
    assert_eq!(tool.keys.lock().unwrap().clone(), vec![key_of(20); 2]);
}

/// S18: equal key fields under two tenants are two records: each tenant's call runs once, each
/// replays only its own outcome, and neither record is found under the other's key or the
/// unscoped one.
pub async fn s18_equal_key_fields_under_two_tenants_are_two_operations(store: impl StoreUnderTest) {
    use crate::as_tenant;
    let store = Arc::new(store);
    let idem = runtime(store.clone());
    let tool = Counted::new();
    let call = |tenant: &'static str| {
        as_tenant(
            tenant,
            tool.call(charge(&idem), 21, 4200, &[], Duration::ZERO),
        )
    };
    let (acme, outcome) = call("acme").await;
    assert_eq!(
        (acme.clone().unwrap().run, outcome),
        (1, CallOutcome::Completed)
    );
    let (globex, outcome) = call("globex").await;
    assert_eq!(
        (globex.clone().unwrap().run, outcome),
        (2, CallOutcome::Completed)
    );
    assert_eq!(call("acme").await, (acme.clone(), CallOutcome::Replayed));
    assert_eq!(
        call("globex").await,
        (globex.clone(), CallOutcome::Replayed)
    );
    let (acme, globex) = (acme.unwrap(), globex.unwrap());
    assert_eq!(acme.key, key_of(21).for_tenant("acme").to_string());
    assert_eq!(globex.key, key_of(21).for_tenant("globex").to_string());
    assert_eq!(
        store.get(&key_of(21)).await.unwrap(),
        None,
        "nothing under the unscoped key"
    );
    let (unscoped, _) = tool
        .call(charge(&idem), 21, 4200, &[], Duration::ZERO)
        .await;
    assert_eq!(
        unscoped.unwrap().run,
        3,
        "an unscoped call is a third operation"
    );
}
