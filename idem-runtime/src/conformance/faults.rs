//! Rows S8–S11 and operation ids: dead holders, unreachable and corrupt stores, expiry, fencing.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{
    Counted, LEASE, Receipt, StoreUnderTest, TestError, charge, fingerprint_of, key_of, runtime,
};
use crate::store::{Claim, ClaimRequest, LeaseToken, RecordFilter, RecordState, Takeover, Written};
use crate::testing::Intercept;
use crate::{CallOutcome, Failure, StoreError, StoreErrorKind, observe};

/// S8: a holder that died leaves a lease that expires; the next call takes over with the same key.
pub async fn s8_a_dead_holders_lease_expires_and_is_taken_over(store: impl StoreUnderTest) {
    let idem = runtime(store);
    // The "dead process": it claimed and never came back.
    let dead = ClaimRequest::new(
        key_of(9),
        "charge",
        fingerprint_of(4200),
        LeaseToken::new(),
        LEASE,
        Duration::from_secs(60),
    );
    assert_eq!(
        idem.store().claim(&dead).await.unwrap(),
        Claim::Acquired { takeover: None }
    );
    let tool = Counted::new();
    let (result, outcome) = tool.call(charge(&idem), 9, 4200, &[], Duration::ZERO).await;
    assert_eq!(
        (result.unwrap().key, outcome),
        (key_of(9).to_string(), CallOutcome::Completed)
    );
    assert_eq!(tool.runs(), 1);
    assert_eq!(
        idem.store()
            .complete(
                key_of(9),
                dead.token,
                b"1".as_slice().into(),
                Duration::from_secs(60)
            )
            .await
            .unwrap(),
        Written::Fenced
    );
}

/// S9: an unreachable store fails the call closed: `Error::Store`, the body never runs.
pub async fn s9_unreachable_store_fails_closed(store: impl StoreUnderTest) {
    // The store under test, cut off: every transition fails as an unreachable store's would.
    let store = Arc::new(store);
    let unreachable = Intercept::new(store.clone(), |_, _| {
        Some(StoreError::unavailable("connection refused"))
    });
    let idem = runtime(unreachable);
    let tool = Counted::new();
    let (result, outcome) = tool
        .call(charge(&idem), 10, 4200, &[], Duration::ZERO)
        .await;
    assert_eq!(
        (result, outcome),
        (
            Err(TestError::Store(StoreErrorKind::Unavailable)),
            CallOutcome::Refused
        )
    );
    assert_eq!(tool.runs(), 0);
}

/// S9: a stored outcome that no longer deserializes fails closed: `Error::Store`, the body never runs.
pub async fn s9_corrupt_outcome_fails_closed(store: impl StoreUnderTest) {
    let idem = runtime(store);
    let req = ClaimRequest::new(
        key_of(11),
        "charge",
        fingerprint_of(4200),
        LeaseToken::new(),
        LEASE,
        Duration::from_secs(60),
    );
    assert_eq!(
        idem.store().claim(&req).await.unwrap(),
        Claim::Acquired { takeover: None }
    );
    let written = idem
        .store()
        .complete(
            req.key,
            req.token,
            br#"{"not":"a receipt"}"#.as_slice().into(),
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(written.unwrap(), Written::Applied);
    let tool = Counted::new();
    let (result, outcome) = tool
        .call(charge(&idem), 11, 4200, &[], Duration::ZERO)
        .await;
    assert_eq!(
        (result, outcome),
        (
            Err(TestError::Store(StoreErrorKind::Corrupt)),
            CallOutcome::Refused
        )
    );
    assert_eq!(tool.runs(), 0);
}

/// An outcome that serializes but does not read back: its skipped field has no `default`.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Order {
    id: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    items: Vec<u32>,
}

/// S16 and S9 told apart at replay, through the store: the outcome the executor sealed and
/// stored, kept byte for byte by the store, does not read back, so a repeat is told the
/// operation ran (`Error::Unreplayable`) and the body never runs again; the same bytes under
/// another key read the same; a byte of them changed is a damaged record, which fails closed
/// (`Error::Store { Corrupt }`).
pub async fn s16_an_outcome_that_does_not_read_back_is_unreplayable_and_a_damaged_one_corrupt(
    store: impl StoreUnderTest,
) {
    let store = Arc::new(store);
    let idem = runtime(store.clone());
    let runs = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let call = |order: u64| {
        let runs = runs.clone();
        observe(crate::Tool::new("order").idem(&idem).side_effect(
            &[("order", &order)],
            &(),
            move |_| {
                runs.fetch_add(1, Ordering::SeqCst);
                async {
                    Ok::<_, TestError>(Order {
                        id: 1,
                        items: Vec::new(),
                    })
                }
            },
        ))
    };
    let (first, info) = call(1).await;
    assert_eq!(
        first.unwrap().id,
        1,
        "the effect happened: its caller gets it"
    );
    assert_eq!(info.unwrap().outcome, CallOutcome::Completed);
    let (again, info) = call(1).await;
    assert!(
        matches!(&again, Err(TestError::Other(e)) if e.contains("already ran") && e.contains("does not read back")),
        "a repeat is told the operation ran and its outcome does not read back: {again:?}"
    );
    assert_eq!(info.unwrap().outcome, CallOutcome::Unreplayable);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "never run again");

    // The stored bytes, written under two other keys by hand: as they are, and damaged.
    let key = crate::IdempotencyKey::derive("order", &[("order", &1u64)]);
    let record = store.get(&key).await.unwrap().expect("the record");
    let RecordState::Completed { outcome } = record.state else {
        panic!("completed, got {:?}", record.state)
    };
    let mut damaged = outcome.clone();
    damaged[7] ^= 1;
    for (order, bytes) in [(2u64, outcome), (3, damaged)] {
        let req = ClaimRequest::new(
            crate::IdempotencyKey::derive("order", &[("order", &order)]),
            "order",
            record.fingerprint,
            LeaseToken::new(),
            LEASE,
            Duration::from_secs(60),
        );
        assert_eq!(
            idem.store().claim(&req).await.unwrap(),
            Claim::Acquired { takeover: None }
        );
        let written = idem
            .store()
            .complete(req.key, req.token, bytes.into(), Duration::from_secs(60))
            .await;
        assert_eq!(written.unwrap(), Written::Applied);
    }
    let (copied, info) = call(2).await;
    assert!(
        matches!(&copied, Err(TestError::Other(e)) if e.contains("does not read back")),
        "{copied:?}"
    );
    assert_eq!(info.unwrap().outcome, CallOutcome::Unreplayable);
    let (damaged, info) = call(3).await;
    assert_eq!(
        damaged.map(|o| o.id),
        Err(TestError::Store(StoreErrorKind::Corrupt))
    );
    assert_eq!(info.unwrap().outcome, CallOutcome::Refused);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "no body ran for a stored record"
    );
}

/// S34: an ambiguous record older than its time-to-live stays ambiguous and listed until a
/// decision settles it: prune leaves it, and a repeat of its key (resend off, no verify) does
/// not run the body but ends with `Error::Ambiguous`. A running record whose holder died with
/// its lease lapsed, which reads as ambiguous (S31), likewise: the repeat takes it over as an
/// expired holder's, never as an absent key.
pub async fn s34_an_ambiguous_record_outlives_its_ttl_until_decided(store: impl StoreUnderTest) {
    let store = Arc::new(store);
    let idem = runtime(store.clone());
    let tool = Counted::new();
    let short = || {
        charge(&idem)
            .ttl(Duration::from_millis(1000))
            .max_attempts(1)
            .resend(false)
    };
    let (first, _) = tool
        .call(short(), 34, 4200, &[Failure::Ambiguous], Duration::ZERO)
        .await;
    assert!(
        matches!(&first, Err(TestError::Other(m)) if m.contains("kept as ambiguous")),
        "{first:?}"
    );
    // A holder that died: it claimed with a short lease and time-to-live and never came back.
    let dead = ClaimRequest::new(
        key_of(35),
        "charge",
        fingerprint_of(4200),
        LeaseToken::new(),
        Duration::from_millis(200),
        Duration::from_millis(1000),
    );
    assert_eq!(
        store.claim(&dead).await.unwrap(),
        Claim::Acquired { takeover: None }
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        store.prune(100).await.unwrap(),
        0,
        "an unknown outcome is never pruned by time"
    );
    let listed = store.list(&RecordFilter::new()).await.unwrap();
    for order in [34, 35] {
        let record = store.get(&key_of(order)).await.unwrap();
        let record = record.expect("an unknown outcome is kept past its time-to-live");
        // The dead holder's reads as ambiguous where the store reads lapsed leases so (S31, rows
        // of their own); as running with its lease over otherwise.
        assert!(
            matches!(record.state, RecordState::Ambiguous { .. })
                || matches!(record.state, RecordState::Running { lease_remaining, .. }
                    if order == 35 && lease_remaining.is_zero()),
            "{record:?}"
        );
        assert_eq!(record.expires_in, Duration::MAX, "it never expires by time");
        assert!(
            listed.iter().any(|r| r.key == key_of(order)),
            "listed: {listed:?}"
        );
    }
    for order in [34, 35] {
        let (again, outcome) = tool.call(short(), order, 4200, &[], Duration::ZERO).await;
        assert!(
            matches!(&again, Err(TestError::Other(m)) if m.contains("kept as ambiguous")),
            "a repeat of key {order} past the ttl: {again:?}, {outcome:?}"
        );
        let record = store.get(&key_of(order)).await.unwrap();
        assert!(
            matches!(record, Some(ref r) if matches!(r.state, RecordState::Ambiguous { .. })),
            "{record:?}"
        );
    }
    assert_eq!(tool.runs(), 1, "the body ran for the first call only");
}

/// S11: every write of a holder whose lease was taken over is refused; the new record stands.
pub async fn s11_late_writes_of_a_taken_over_lease_are_fenced(store: impl StoreUnderTest) {
    let req = |token| {
        ClaimRequest::new(
            key_of(13),
            "charge",
            fingerprint_of(4200),
            token,
            Duration::from_millis(200),
            Duration::from_secs(60),
        )
    };
    let (old, new) = (LeaseToken::new(), LeaseToken::new());
    assert_eq!(
        store.claim(&req(old)).await.unwrap(),
        Claim::Acquired { takeover: None }
    );
    assert!(
        matches!(store.claim(&req(new)).await.unwrap(), Claim::Existing(_)),
        "a live lease is not taken"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        store.claim(&req(new)).await.unwrap(),
        Claim::Acquired {
            takeover: Some(Takeover::ExpiredHolder)
        },
        "an expired lease is taken over"
    );
    let ttl = Duration::from_secs(60);
    assert_eq!(
        store
            .complete(key_of(13), old, b"\"old\"".as_slice().into(), ttl)
            .await
            .unwrap(),
        Written::Fenced
    );
    assert_eq!(
        store
            .mark_ambiguous(key_of(13), old, "late", ttl)
            .await
            .unwrap(),
        Written::Fenced
    );
    assert_eq!(
        store.release(key_of(13), old).await.unwrap(),
        Written::Fenced
    );
    assert_eq!(
        store
            .complete(key_of(13), new, b"\"new\"".as_slice().into(), ttl)
            .await
            .unwrap(),
        Written::Applied
    );
    let record = store.get(&key_of(13)).await.unwrap().unwrap();
    assert_eq!(
        record.state,
        RecordState::Completed {
            outcome: b"\"new\"".to_vec()
        }
    );
}

/// S11 through the executor: a holder that cannot notice its lease ending (its attempt blocks
/// its thread before it returns its future, so nothing polls the lease; S22's gate is passed
/// before the attempt starts) finishes after the lease was taken over and the new holder
/// completed; its write is refused, the new record stands, and its caller is told.
/// (A holder that awaits notices and stops: S13, S22.)
pub async fn s11_a_slow_holder_cannot_overwrite_the_new_record(store: impl StoreUnderTest) {
    let idem = runtime(store);
    let tool = Arc::new(Counted::new());
    let slow = {
        let (idem, tool) = (idem.clone(), tool.clone());
        tokio::spawn(async move {
            let tool_settings = charge(&idem).lease(Duration::from_millis(200));
            let mut attempt = 0;
            observe(
                tool_settings.side_effect(&[("order", &14u64)], &4200u64, |key| {
                    attempt += 1;
                    let n = tool.runs.fetch_add(1, Ordering::SeqCst) + 1;
                    tool.keys.lock().unwrap().push(key);
                    // Blocks without yielding: the executor cannot renew or stop it meanwhile.
                    // (The worker's other tasks, a store's connection among them, move on.)
                    tokio::task::block_in_place(|| std::thread::sleep(Duration::from_millis(900)));
                    async move {
                        Ok::<_, TestError>(Receipt {
                            run: n,
                            key: key.to_string(),
                        })
                    }
                }),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (fast, outcome) = tool
        .call(charge(&idem), 14, 4200, &[], Duration::ZERO)
        .await;
    assert_eq!(
        (fast.clone().unwrap().run, outcome),
        (2, CallOutcome::Completed)
    );
    let (late, info) = slow.await.unwrap();
    assert_eq!(
        (late.unwrap().run, info.unwrap().outcome),
        (1, CallOutcome::Unrecorded)
    );
    let (replayed, outcome) = tool
        .call(charge(&idem), 14, 4200, &[], Duration::ZERO)
        .await;
    assert_eq!(
        (replayed, outcome),
        (fast, CallOutcome::Replayed),
        "the new holder's record stands"
    );
    assert_eq!(
        tool.keys.lock().unwrap().clone(),
        vec![key_of(14); 2],
        "both ran with the same key"
    );
}

/// `Idem::operation` mints an id once per name and returns it unchanged afterwards.
pub async fn operation_ids_are_minted_once(store: impl StoreUnderTest) {
    let idem = runtime(store);
    let first = idem.operation("plan-42/step-3").await.unwrap();
    assert_eq!(idem.operation("plan-42/step-3").await.unwrap(), first);
    assert_ne!(idem.operation("plan-42/step-4").await.unwrap(), first);
    assert_eq!(first.as_uuid().get_version_num(), 4);
}

/// S18: operation ids are scoped to tenants as keys are: two tenants (by [`crate::as_tenant`] or
/// the runtime's own [`crate::IdemBuilder::tenant`]) naming one operation get two ids, each
/// theirs for ever after, and neither is the id the name has without a tenant, which is kept
/// under the name itself (as before tenants had their own) and read back by
/// [`Records::operation`](crate::store::Records::operation).
pub async fn s18_operation_ids_are_scoped_to_tenants_like_keys(store: impl StoreUnderTest) {
    use crate::{Idem, OperationId, as_tenant};
    let store = Arc::new(store);
    let idem = runtime(store.clone());
    let name = "plan-42/step-3";
    let acme = as_tenant("acme", idem.operation(name)).await.unwrap();
    let globex = as_tenant("globex", idem.operation(name)).await.unwrap();
    let unscoped = idem.operation(name).await.unwrap();
    assert_ne!(acme, globex, "two tenants, one operation name: two ids");
    assert_ne!(acme, unscoped);
    assert_ne!(globex, unscoped);
    assert_eq!(as_tenant("acme", idem.operation(name)).await.unwrap(), acme);
    assert_eq!(idem.operation(name).await.unwrap(), unscoped);
    // The runtime's tenant is the task's when none is set, as for keys.
    let acme_runtime = Idem::builder()
        .store(store.clone())
        .tenant("acme")
        .build()
        .unwrap();
    assert_eq!(acme_runtime.operation(name).await.unwrap(), acme);
    // Kept where `idemkit key --operation NAME [--tenant T]` reads them.
    assert_eq!(
        store.operation(name).await.unwrap(),
        Some(unscoped.as_uuid())
    );
    let stored = OperationId::stored_name(name, Some("acme"));
    assert_eq!(
        store.operation(&stored).await.unwrap(),
        Some(acme.as_uuid())
    );
    // A name without a tenant cannot take a tenant's stored name.
    let err = idem.operation(&stored).await.unwrap_err();
    assert!(
        err.to_string().contains(OperationId::TENANT_PREFIX),
        "{err}"
    );
}
