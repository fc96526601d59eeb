//! Rows of the operator trait [`Records`]: lists newest first and filtered, a release refused
//! under a live lease and applied with force, forget, prune of expired records only, counts.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{Counted, Receipt, StoreUnderTest, charge, fingerprint_of, key_of, runtime};
use crate::store::{
    Claim, ClaimRequest, Count, Forgot, LeaseToken, Outcome, RecordFilter, RecordState, Records,
    Released, StateKind, Written,
};
use crate::{CallOutcome, IdempotencyKey, Store};

/// Generates one `#[test]` per row of [`Records`] for the store `make` returns (a fresh, empty
/// store each time), beside [`conformance_tests!`](crate::conformance_tests).
#[macro_export]
macro_rules! records_conformance_tests {
    ($make:path) => {
        $crate::conformance_tests!(@rows $make;
            records_list_newest_first_and_filtered,
            records_release_is_refused_under_a_live_lease_and_applied_with_force,
            records_forget_makes_the_next_call_run_again,
            records_prune_removes_only_expired_records,
            records_counts_by_tool_and_state,
            records_of_one_tenant_are_listed_apart,
            records_updated_is_the_time_of_the_last_transition,
            s24_forget_is_refused_under_a_live_lease_unless_forced,
            s24_resolve_applied_completes_the_record_and_repeats_replay_it,
            s24_resolve_not_applied_releases_the_record_and_keeps_the_decision,
            s24_resolve_is_refused_while_a_lease_is_live,
            s24_resolve_of_an_expired_holder_fences_it,
            s24_resolve_is_refused_on_a_completed_record,
            s24_resolve_of_no_record_is_not_found,
            s24_resolve_checks_the_outcome_fits_the_decision,
            s24_a_kept_decision_outlives_a_prune_until_its_ttl
        );
    };
}

/// A raw claim of `key_of(order)` by `tool`, held for `lease`, kept for `ttl`.
pub(super) async fn claim_raw(
    store: &impl Store,
    tool: &str,
    order: u64,
    lease: Duration,
    ttl: Duration,
) -> LeaseToken {
    let token = LeaseToken::new();
    let req = ClaimRequest::new(key_of(order), tool, fingerprint_of(4200), token, lease, ttl);
    assert_eq!(
        store.claim(&req).await.unwrap(),
        Claim::Acquired { takeover: None }
    );
    token
}

pub(super) const HOUR: Duration = Duration::from_secs(3600);

/// Records made at distinct instants of every store's clock (millisecond ones included).
async fn tick() {
    tokio::time::sleep(Duration::from_millis(15)).await;
}

fn keys(records: &[crate::store::Record]) -> Vec<IdempotencyKey> {
    records.iter().map(|r| r.key).collect()
}

/// `list`: live records newest first, each with its key, tool, state and times; filtered by
/// tool, state and age; at most `limit`.
pub async fn records_list_newest_first_and_filtered<S: StoreUnderTest>(store: S) {
    let store = Arc::new(store);
    let idem = runtime(Arc::clone(&store));
    let tool = Counted::new();
    let before = SystemTime::now() - Duration::from_secs(60);
    for order in 1..=3 {
        tool.call(charge(&idem), order, 4200, &[], Duration::ZERO)
            .await
            .0
            .unwrap();
        tick().await;
    }
    claim_raw(&*store, "refund", 4, HOUR, HOUR).await;

    let all = store.list(&RecordFilter::new()).await.unwrap();
    assert_eq!(keys(&all), [key_of(4), key_of(3), key_of(2), key_of(1)]);
    for record in &all {
        assert!(
            record.created > before && record.updated >= record.created,
            "times by the store's clock: {record:?}"
        );
    }
    let newest = &all[0];
    assert_eq!(newest.tool, "refund");
    assert!(
        matches!(newest.state, RecordState::Running { lease_remaining, .. } if lease_remaining > Duration::ZERO)
    );
    let RecordState::Completed { outcome } = &all[1].state else {
        panic!("order 3 completed: {:?}", all[1])
    };
    assert_eq!(
        serde_json::from_slice::<Receipt>(outcome).unwrap().key,
        key_of(3).to_string()
    );
    let got = Records::get(&*store, &key_of(3)).await.unwrap().unwrap();
    assert_eq!(
        (got.key, &got.tool, &got.state, got.created, got.updated),
        (
            all[1].key,
            &all[1].tool,
            &all[1].state,
            all[1].created,
            all[1].updated
        )
    );

    let charges = store
        .list(&RecordFilter::new().tool("charge"))
        .await
        .unwrap();
    assert_eq!(keys(&charges), [key_of(3), key_of(2), key_of(1)]);
    let two = store
        .list(&RecordFilter::new().tool("charge").limit(2))
        .await
        .unwrap();
    assert_eq!(keys(&two), [key_of(3), key_of(2)]);
    let running = store
        .list(&RecordFilter::new().state(StateKind::Running))
        .await
        .unwrap();
    assert_eq!(keys(&running), [key_of(4)]);
    let completed = store
        .list(
            &RecordFilter::new()
                .state(StateKind::Completed)
                .tool("refund"),
        )
        .await
        .unwrap();
    assert!(completed.is_empty());
    let recent = store
        .list(&RecordFilter::new().newer_than(HOUR))
        .await
        .unwrap();
    assert_eq!(recent.len(), 4);
    let old = store
        .list(&RecordFilter::new().older_than(HOUR))
        .await
        .unwrap();
    assert!(old.is_empty(), "nothing is an hour old: {old:?}");
    let none = store.list(&RecordFilter::new().limit(0)).await.unwrap();
    assert!(none.is_empty());
}

/// `release`: a live lease is not released unless forced; a forced release frees the key; a
/// lease that ran out is released without force; other states and absent keys say so.
pub async fn records_release_is_refused_under_a_live_lease_and_applied_with_force<
    S: StoreUnderTest,
>(
    store: S,
) {
    claim_raw(&store, "charge", 1, HOUR, HOUR).await;
    match store.release_key(&key_of(1), false).await.unwrap() {
        Released::LeaseLive { remaining } => {
            assert!(remaining > Duration::ZERO && remaining <= HOUR)
        }
        other => panic!("a live lease is not released without force: {other:?}"),
    }
    assert!(Records::get(&store, &key_of(1)).await.unwrap().is_some());
    assert_eq!(
        store.release_key(&key_of(1), true).await.unwrap(),
        Released::Released
    );
    assert!(Records::get(&store, &key_of(1)).await.unwrap().is_none());
    assert_eq!(
        store.release_key(&key_of(1), true).await.unwrap(),
        Released::NotFound
    );
    // The key is free: a claim takes it.
    claim_raw(&store, "charge", 1, HOUR, HOUR).await;

    // A lease that ran out (its holder died) needs no force.
    claim_raw(&store, "charge", 2, Duration::from_millis(20), HOUR).await;
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert_eq!(
        store.release_key(&key_of(2), false).await.unwrap(),
        Released::Released
    );

    // Not running: left alone, even with force.
    let token = claim_raw(&store, "charge", 3, HOUR, HOUR).await;
    assert_eq!(
        store
            .complete(key_of(3), token, Outcome::from(b"{}"), HOUR)
            .await
            .unwrap(),
        Written::Applied
    );
    assert_eq!(
        store.release_key(&key_of(3), true).await.unwrap(),
        Released::NotRunning(StateKind::Completed)
    );
    let token = claim_raw(&store, "charge", 4, HOUR, HOUR).await;
    assert_eq!(
        store
            .mark_ambiguous(key_of(4), token, "timed out", HOUR)
            .await
            .unwrap(),
        Written::Applied
    );
    assert_eq!(
        store.release_key(&key_of(4), false).await.unwrap(),
        Released::NotRunning(StateKind::Ambiguous)
    );
}

/// `forget`: any record goes, and the next call with its key runs the body again.
pub async fn records_forget_makes_the_next_call_run_again<S: StoreUnderTest>(store: S) {
    let store = Arc::new(store);
    let idem = runtime(Arc::clone(&store));
    let tool = Counted::new();
    let first = tool
        .call(charge(&idem), 1, 4200, &[], Duration::ZERO)
        .await
        .0
        .unwrap();
    assert_eq!(
        store.forget(&key_of(1), false).await.unwrap(),
        Forgot::Forgotten
    );
    assert!(Records::get(&*store, &key_of(1)).await.unwrap().is_none());
    let (again, outcome) = tool.call(charge(&idem), 1, 4200, &[], Duration::ZERO).await;
    assert_eq!(
        (tool.runs(), again.unwrap().run, outcome),
        (2, first.run + 1, CallOutcome::Completed)
    );
    assert_eq!(
        store.forget(&key_of(9), false).await.unwrap(),
        Forgot::NotFound,
        "nothing to forget"
    );
}

/// `prune`: expired records go, live ones stay, at most `limit` (`usize::MAX` among them).
pub async fn records_prune_removes_only_expired_records<S: StoreUnderTest>(store: S) {
    let short = Duration::from_millis(50);
    // Expired: released by a not-applied decision kept a short while (S24).
    for order in [1, 2] {
        let token = claim_raw(&store, "charge", order, short, short).await;
        assert_eq!(
            store
                .mark_ambiguous(key_of(order), token, "timed out", short)
                .await
                .unwrap(),
            Written::Applied
        );
        assert_eq!(
            store
                .resolve(
                    &key_of(order),
                    crate::store::Decision::NotApplied,
                    None,
                    None,
                    short
                )
                .await
                .unwrap(),
            crate::store::Resolved::Resolved
        );
    }
    // S33: completed, past its time-to-live: a tombstone, kept past a prune.
    let token = claim_raw(&store, "charge", 5, short, short).await;
    assert_eq!(
        store
            .complete(key_of(5), token, Outcome::from(b"{}"), short)
            .await
            .unwrap(),
        Written::Applied
    );
    let token = claim_raw(&store, "charge", 3, HOUR, HOUR).await;
    assert_eq!(
        store
            .complete(key_of(3), token, Outcome::from(b"{}"), HOUR)
            .await
            .unwrap(),
        Written::Applied
    );
    claim_raw(&store, "charge", 4, HOUR, HOUR).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    assert_eq!(Records::prune(&store, 0).await.unwrap(), 0);
    assert_eq!(Records::prune(&store, 1).await.unwrap(), 1);
    // No limit at all (a limit past any count): the rest.
    assert_eq!(Records::prune(&store, usize::MAX).await.unwrap(), 1);
    assert_eq!(Records::prune(&store, 100).await.unwrap(), 0);
    let left = store.list(&RecordFilter::new()).await.unwrap();
    let mut left = keys(&left);
    left.sort();
    let mut live = vec![key_of(3), key_of(4), key_of(5)];
    live.sort();
    assert_eq!(left, live);
}

/// `counts`: live records by tool and state, sorted by tool, then state.
pub async fn records_counts_by_tool_and_state<S: StoreUnderTest>(store: S) {
    assert!(store.counts().await.unwrap().is_empty());
    for order in [1, 2] {
        let token = claim_raw(&store, "charge", order, HOUR, HOUR).await;
        let _ = store
            .complete(key_of(order), token, Outcome::from(b"{}"), HOUR)
            .await;
    }
    claim_raw(&store, "charge", 3, HOUR, HOUR).await;
    let token = claim_raw(&store, "refund", 4, HOUR, HOUR).await;
    let _ = store
        .mark_ambiguous(key_of(4), token, "timed out", HOUR)
        .await;
    // A dead holder's, past its time-to-live: counted as ambiguous (S31), never expired (S34).
    claim_raw(
        &store,
        "refund",
        5,
        Duration::from_millis(20),
        Duration::from_millis(20),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert_eq!(
        store.counts().await.unwrap(),
        [
            Count::new("charge", StateKind::Running, 1),
            Count::new("charge", StateKind::Completed, 2),
            Count::new("refund", StateKind::Ambiguous, 2),
        ]
    );
}

/// S18 for operators: a record keeps the scope (tenant) it was made under, and a list filtered
/// by one tenant shows only that tenant's records (equal key fields under two tenants are two
/// records); an unscoped record has no tenant and is listed only unfiltered.
pub async fn records_of_one_tenant_are_listed_apart<S: StoreUnderTest>(store: S) {
    use crate::as_tenant;
    let store = Arc::new(store);
    let idem = runtime(Arc::clone(&store));
    let tool = Counted::new();
    for tenant in ["acme", "globex"] {
        as_tenant(
            tenant,
            tool.call(charge(&idem), 23, 4200, &[], Duration::ZERO),
        )
        .await
        .0
        .unwrap();
    }
    tool.call(charge(&idem), 23, 4200, &[], Duration::ZERO)
        .await
        .0
        .unwrap();
    for tenant in ["acme", "globex"] {
        let listed = store
            .list(&RecordFilter::new().tenant(tenant))
            .await
            .unwrap();
        assert_eq!(keys(&listed), [key_of(23).for_tenant(tenant)], "{tenant}");
        assert_eq!(listed[0].tenant.as_deref(), Some(tenant));
        let got = store.get(&key_of(23).for_tenant(tenant)).await.unwrap();
        assert_eq!(got.and_then(|r| r.tenant).as_deref(), Some(tenant));
    }
    let unscoped = store.get(&key_of(23)).await.unwrap().expect("live");
    assert_eq!(unscoped.tenant, None);
    assert_eq!(store.list(&RecordFilter::new()).await.unwrap().len(), 3);
    assert!(
        store
            .list(&RecordFilter::new().tenant("initech"))
            .await
            .unwrap()
            .is_empty()
    );
}

/// A record's `created` is the time of its claim and `updated` that of its last transition:
/// the claim, then each renewal, completion or mark of ambiguity.
pub async fn records_updated_is_the_time_of_the_last_transition<S: StoreUnderTest>(store: S) {
    let get = |order| {
        let store = &store;
        async move { Records::get(store, &key_of(order)).await.unwrap().unwrap() }
    };
    let token = claim_raw(&store, "charge", 1, HOUR, HOUR).await;
    let claimed = get(1).await;
    assert_eq!(claimed.updated, claimed.created, "a claim: {claimed:?}");
    tick().await;
    let renewed = store.renew(key_of(1), token, HOUR).await.unwrap();
    assert_eq!(renewed, Written::Applied);
    let renewed = get(1).await;
    assert!(
        renewed.updated > claimed.updated && renewed.created == claimed.created,
        "a renewal moves `updated` only: {claimed:?} then {renewed:?}"
    );
    tick().await;
    let completed = store
        .complete(key_of(1), token, Outcome::from(b"1"), HOUR)
        .await
        .unwrap();
    assert_eq!(completed, Written::Applied);
    let completed = get(1).await;
    assert!(
        completed.updated > renewed.updated && completed.created == claimed.created,
        "a completion moves `updated`: {renewed:?} then {completed:?}"
    );

    let token = claim_raw(&store, "charge", 2, HOUR, HOUR).await;
    let claimed = get(2).await;
    tick().await;
    let marked = store
        .mark_ambiguous(key_of(2), token, "timed out", HOUR)
        .await
        .unwrap();
    assert_eq!(marked, Written::Applied);
    let marked = get(2).await;
    assert!(
        marked.updated > claimed.updated && marked.created == claimed.created,
        "a mark of ambiguity moves `updated`: {claimed:?} then {marked:?}"
    );
}
