//! Row S33: past its time-to-live a done record's outcome may be dropped, but a tombstone
//! answers every repeat of its key, "done on DATE; its result is no longer kept", and the
//! operation never runs again because time passed. What did not happen (a release, a
//! not-applied decision) leaves no tombstone that blocks a run.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::records::claim_raw;
use super::{Counted, StoreUnderTest, TestError, charge, fingerprint_of, key_of, runtime};
use crate::store::{
    Claim, ClaimRequest, Decision, Existing, ExistingState, Forgot, LeaseToken, Outcome,
    RecordFilter, RecordState, Resolved, StateKind, Written,
};
use crate::{CallOutcome, Failure};

const TTL: Duration = Duration::from_millis(1000);
const PAST_TTL: Duration = Duration::from_millis(1500);

/// Whether `result` is S33's answer: done, its result no longer kept, not run.
fn is_tombstone_answer(result: &Result<super::Receipt, TestError>) -> bool {
    matches!(result, Err(TestError::Other(m))
        if m.contains("done on ") && m.contains("its result is no longer kept") && m.contains("not run again"))
}

/// S33: a completed record past its time-to-live is a tombstone. A repeat with the same
/// arguments runs nothing and is told when it was done; a repeat with other arguments is key
/// reuse; a raw claim answers [`ExistingState::Tombstone`] with the completion's time; prune
/// keeps it (the tombstone setting, 400 days by default, has not passed) and operators see it
/// (`get`, `list` with the `tombstone` filter); only an operator's `forget` lets the next call
/// run the operation again.
pub async fn s33_a_repeat_after_the_ttl_runs_nothing_and_is_told_when_it_was_done(
    store: impl StoreUnderTest,
) {
    let store = Arc::new(store);
    let idem = runtime(store.clone());
    let tool = Counted::new();
    let short = || charge(&idem).ttl(TTL);
    let before = SystemTime::now();
    let (first, outcome) = tool.call(short(), 33, 4200, &[], Duration::ZERO).await;
    assert_eq!((first.unwrap().run, outcome), (1, CallOutcome::Completed));
    let after = SystemTime::now();
    assert_eq!(
        tool.call(short(), 33, 4200, &[], Duration::ZERO).await.1,
        CallOutcome::Replayed,
        "within its time-to-live a repeat replays"
    );
    tokio::time::sleep(PAST_TTL).await;

    let (late, outcome) = tool.call(short(), 33, 4200, &[], Duration::ZERO).await;
    assert!(is_tombstone_answer(&late), "{late:?}");
    assert_eq!(outcome, CallOutcome::Refused);
    assert_eq!(tool.runs(), 1, "a repeat after the ttl runs nothing");
    let (other, _) = tool.call(short(), 33, 9900, &[], Duration::ZERO).await;
    assert_eq!(
        other,
        Err(TestError::KeyReuse),
        "other arguments: key reuse"
    );
    assert_eq!(tool.runs(), 1);

    // The store's own answer: the tombstone, with when it was done (the store's clock, within
    // a few seconds of this machine's for the server stores on it).
    let req = ClaimRequest::new(
        key_of(33),
        "charge",
        fingerprint_of(4200),
        LeaseToken::new(),
        Duration::from_secs(1),
        TTL,
    );
    match store.claim(&req).await.unwrap() {
        Claim::Existing(Existing {
            fingerprint,
            state: ExistingState::Tombstone { done, resolved },
        }) => {
            assert_eq!(fingerprint, fingerprint_of(4200));
            assert!(!resolved, "its own body completed it");
            let slack = Duration::from_secs(5);
            assert!(
                done + slack >= before && done <= after + slack,
                "{done:?} not within {before:?}..{after:?}"
            );
        }
        other => panic!("a completed record past its ttl answers a tombstone: {other:?}"),
    }

    // Pruning keeps it: the tombstone setting has not passed.
    store.prune(100).await.unwrap();
    let record = store
        .get(&key_of(33))
        .await
        .unwrap()
        .expect("a tombstone is shown");
    assert_eq!(record.state, RecordState::Tombstone);
    assert_eq!(
        (record.tool.as_str(), record.fingerprint),
        ("charge", fingerprint_of(4200))
    );
    assert_eq!(record.expires_in, Duration::ZERO);
    let listed = store
        .list(&RecordFilter::new().state(StateKind::Tombstone))
        .await
        .unwrap();
    assert_eq!(
        listed.iter().map(|r| r.key).collect::<Vec<_>>(),
        vec![key_of(33)]
    );
    let (still, _) = tool.call(short(), 33, 4200, &[], Duration::ZERO).await;
    assert!(is_tombstone_answer(&still), "after a prune too: {still:?}");
    assert_eq!(tool.runs(), 1);

    // An operator's decision: forgotten, the next call runs it.
    assert_eq!(
        store.forget(&key_of(33), false).await.unwrap(),
        Forgot::Forgotten
    );
    let (again, outcome) = tool.call(short(), 33, 4200, &[], Duration::ZERO).await;
    assert_eq!((again.unwrap().run, outcome), (2, CallOutcome::Completed));
}

/// S33: what did not happen leaves nothing that blocks a run. A record released because the
/// body failed before acting (S5) and one an operator resolved as not applied (S24) are absent
/// for the next call past their time-to-live, which runs the operation (the first time it
/// happens). One resolved as applied is a tombstone past its time-to-live, and says a decision
/// ended it.
pub async fn s33_what_did_not_happen_leaves_no_tombstone_and_a_decision_applied_does(
    store: impl StoreUnderTest,
) {
    let store = Arc::new(store);
    let idem = runtime(store.clone());
    let tool = Counted::new();
    let short = || charge(&idem).ttl(TTL).max_attempts(1).resend(false);
    // Released: the body failed before acting.
    let (declined, _) = tool
        .call(short(), 40, 4200, &[Failure::Permanent], Duration::ZERO)
        .await;
    assert_eq!(declined, Err(TestError::Body(Failure::Permanent)));
    // Resolved: one not applied, one applied.
    for order in [41, 42] {
        let token = claim_raw(&*store, "charge", order, TTL, TTL).await;
        assert_eq!(
            store
                .mark_ambiguous(key_of(order), token, "timed out", TTL)
                .await
                .unwrap(),
            Written::Applied
        );
    }
    assert_eq!(
        store
            .resolve(
                &key_of(41),
                Decision::NotApplied,
                None,
                Some("not in the ledger"),
                TTL
            )
            .await
            .unwrap(),
        Resolved::Resolved
    );
    let receipt = br#"{"run":0,"key":"seen at the provider"}"#;
    assert_eq!(
        store
            .resolve(
                &key_of(42),
                Decision::Applied,
                Some(receipt),
                Some("in the ledger"),
                TTL
            )
            .await
            .unwrap(),
        Resolved::Resolved
    );
    tokio::time::sleep(PAST_TTL).await;
    store.prune(100).await.unwrap();
    let runs = tool.runs();
    for order in [40, 41] {
        let (ran, outcome) = tool.call(short(), order, 4200, &[], Duration::ZERO).await;
        assert!(ran.is_ok(), "order {order}: {ran:?}");
        assert_eq!(outcome, CallOutcome::Completed, "order {order} runs");
    }
    assert_eq!(tool.runs(), runs + 2);
    let (late, _) = tool.call(short(), 42, 4200, &[], Duration::ZERO).await;
    assert!(is_tombstone_answer(&late), "{late:?}");
    assert!(
        matches!(&late, Err(TestError::Other(m)) if m.contains("settled it as applied")),
        "{late:?}"
    );
    assert_eq!(
        tool.runs(),
        runs + 2,
        "the applied decision's operation is not run"
    );
    let record = store
        .get(&key_of(42))
        .await
        .unwrap()
        .expect("its tombstone");
    assert_eq!(record.state, RecordState::Tombstone);
    assert_eq!(
        record.resolution.map(|r| r.decision),
        Some(Decision::Applied),
        "how it ended is kept"
    );
}

/// S33, the store's transitions: a completed record past its time-to-live is never taken by a
/// claim (same or other fingerprint), never resolved (it is done), and its holder's completion
/// sent again is still recognised; a tombstone's outcome is not replayed.
pub async fn s33_a_tombstone_is_never_claimed_and_never_replayed(store: impl StoreUnderTest) {
    let token = claim_raw(&store, "charge", 43, TTL, TTL).await;
    let outcome = Outcome::from(br#"{"run":1,"key":"k"}"#);
    assert_eq!(
        store
            .complete(key_of(43), token, outcome.clone(), TTL)
            .await
            .unwrap(),
        Written::Applied
    );
    tokio::time::sleep(PAST_TTL).await;
    for amount in [4200, 9900] {
        let req = ClaimRequest::new(
            key_of(43),
            "charge",
            fingerprint_of(amount),
            LeaseToken::new(),
            TTL,
            TTL,
        );
        match store.claim(&req).await.unwrap() {
            Claim::Existing(Existing {
                fingerprint,
                state: ExistingState::Tombstone { .. },
            }) => assert_eq!(fingerprint, fingerprint_of(4200)),
            other => panic!("amount {amount}: {other:?}"),
        }
    }
    assert_eq!(
        store
            .resolve(&key_of(43), Decision::NotApplied, None, None, TTL)
            .await
            .unwrap(),
        Resolved::Completed,
        "a tombstone is done: no decision changes it"
    );
    assert_eq!(
        store.list(&RecordFilter::new()).await.unwrap().len(),
        1,
        "listed"
    );
    let counts = store.counts().await.unwrap();
    assert_eq!(
        counts
            .iter()
            .map(|c| (c.tool.as_str(), c.state, c.records))
            .collect::<Vec<_>>(),
        vec![("charge", StateKind::Tombstone, 1)]
    );
}

/// S33: forgetting a tombstone is an operator's decision, kept as a not-applied one is: the
/// record no longer blocks (a claim of its key runs the operation again), and until the store's
/// tombstone setting has passed, `get` still shows the tombstone with the decision
/// [`Decision::Forgotten`], when it was made and the operator's note
/// ([`Records::forget_noted`](crate::Records::forget_noted)); `list` and `counts` no longer
/// count it. The
/// next claim replaces it, decision and all. Forgetting a record that is not a tombstone keeps
/// nothing.
pub async fn s33_forgetting_a_tombstone_is_kept_as_an_operators_decision(
    store: impl StoreUnderTest,
) {
    for n in [53, 54] {
        let token = claim_raw(&store, "charge", n, TTL, TTL).await;
        let outcome = Outcome::from(br#"{"run":1}"#);
        assert_eq!(
            store
                .complete(key_of(n), token, outcome, TTL)
                .await
                .unwrap(),
            Written::Applied
        );
    }
    tokio::time::sleep(PAST_TTL).await;
    let before = SystemTime::now();
    assert_eq!(
        store
            .forget_noted(&key_of(53), false, Some("ops: re-run for ticket 53"))
            .await
            .unwrap(),
        Forgot::Forgotten
    );
    let after = SystemTime::now();

    let record = store
        .get(&key_of(53))
        .await
        .unwrap()
        .expect("a forgotten tombstone is shown with the operator's decision");
    assert_eq!(record.state, RecordState::Tombstone);
    assert!(!record.is_live(), "it no longer counts: {record:?}");
    let resolution = record.resolution.expect("the decision is kept");
    assert_eq!(resolution.decision, Decision::Forgotten);
    assert_eq!(
        resolution.note.as_deref(),
        Some("ops: re-run for ticket 53")
    );
    let slack = Duration::from_secs(5);
    assert!(
        resolution.at + slack >= before && resolution.at <= after + slack,
        "{:?} not within {before:?}..{after:?}",
        resolution.at
    );
    // Not listed nor counted: only the other tombstone is.
    let listed = store.list(&RecordFilter::new()).await.unwrap();
    assert_eq!(
        listed.iter().map(|r| r.key).collect::<Vec<_>>(),
        vec![key_of(54)]
    );
    let counts = store.counts().await.unwrap();
    assert_eq!(
        counts
            .iter()
            .map(|c| (c.tool.as_str(), c.state, c.records))
            .collect::<Vec<_>>(),
        vec![("charge", StateKind::Tombstone, 1)]
    );
    // A prune keeps the decision (the tombstone setting has not passed since).
    store.prune(100).await.unwrap();
    assert_eq!(
        store
            .get(&key_of(53))
            .await
            .unwrap()
            .and_then(|r| r.resolution)
            .map(|r| r.decision),
        Some(Decision::Forgotten)
    );
    // The next call runs: a claim of its key is a new record, with no decision on it.
    let req = ClaimRequest::new(
        key_of(53),
        "charge",
        fingerprint_of(4200),
        LeaseToken::new(),
        TTL,
        TTL,
    );
    assert_eq!(
        store.claim(&req).await.unwrap(),
        Claim::Acquired { takeover: None }
    );
    let record = store.get(&key_of(53)).await.unwrap().expect("running");
    assert!(
        matches!(record.state, RecordState::Running { .. }),
        "{record:?}"
    );
    assert_eq!(record.resolution, None);
    assert!(record.is_live());

    // Forget of a record that is not a tombstone keeps nothing (as before S33's tombstones).
    let token = claim_raw(&store, "charge", 55, TTL, Duration::from_secs(60)).await;
    assert_eq!(
        store
            .complete(
                key_of(55),
                token,
                Outcome::from(br#"{"run":1}"#),
                Duration::from_secs(60)
            )
            .await
            .unwrap(),
        Written::Applied
    );
    assert_eq!(
        store.forget(&key_of(55), false).await.unwrap(),
        Forgot::Forgotten
    );
    assert_eq!(store.get(&key_of(55)).await.unwrap(), None);
}
