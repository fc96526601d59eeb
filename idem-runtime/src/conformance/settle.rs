//! S28: a settler asks verify about records kept as ambiguous, without waiting for a caller, and
//! takes each over as a caller does ([`Records::settle`] writes its decision under its lease).
//! The rows of what verify answers, of callers racing the settler and of the host's task; the
//! other settler rows are in `settle_cut_off` (S30, S31) and `settle_bounds` (S32, S34), which
//! share this file's helpers.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::records::{HOUR, claim_raw};
use super::{Receipt, StoreUnderTest, TestError, fingerprint_of, key_of};
use crate::settle::{Pass, Settled, Settler};
use crate::store::{
    Claim, ClaimRequest, Count, Decision, Forgot, LeaseToken, OperationIds, Outcome, Record,
    RecordFilter, RecordState, Records, Released, Resolved, StoreFuture, Written,
};
use crate::{Idem, IdempotencyKey, RetryPolicy, StoreError, Tool, Verified};

/// The note the call left with its ambiguous record.
pub(super) const NOTE: &str = "timed out; may have taken effect";

/// A record of `charge` (order `order`, amount 4200) kept as ambiguous by a holder that gave up.
pub(super) async fn ambiguous(store: &impl StoreUnderTest, tool: &str, order: u64) {
    let holder = claim_raw(store, tool, order, HOUR, HOUR).await;
    let marked = store
        .mark_ambiguous(key_of(order), holder, NOTE, HOUR)
        .await
        .unwrap();
    assert_eq!(marked, Written::Applied);
}

pub(super) fn receipt() -> Receipt {
    Receipt {
        run: 7,
        key: "found at the provider".to_owned(),
    }
}

pub(super) fn runtime(store: Arc<impl StoreUnderTest>) -> Idem {
    Idem::builder()
        .shared_store(store)
        .retry(
            RetryPolicy::default()
                .with_initial_delay(Duration::from_millis(2))
                .with_max_delay(Duration::from_millis(10))
                .with_max_elapsed(Duration::from_secs(5)),
        )
        .lease(Duration::from_secs(5))
        .in_flight_wait(Duration::from_secs(60))
        .build()
        .expect("consistent settings")
}

/// A call of `charge` (order, amount 4200) whose body and verify count their runs.
pub(super) async fn call(idem: &Idem, order: u64, runs: &AtomicU32) -> Result<Receipt, TestError> {
    Tool::new("charge")
        .idem(idem)
        .verify(|_key| {
            runs.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, TestError>(Verified::Unknown) }
        })
        .side_effect(&[("order", &order)], &4200u64, |key| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move {
                Ok(Receipt {
                    run: 1,
                    key: key.to_string(),
                })
            }
        })
        .await
}

pub(super) fn answers<T: Clone + Send + Sync + 'static>(
    answer: Verified<T>,
    asked: Arc<AtomicU32>,
) -> impl Fn(IdempotencyKey) -> std::future::Ready<Result<Verified<T>, String>> + Send + Sync + 'static
{
    move |_| {
        asked.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok(answer.clone()))
    }
}

/// S28: verify answers Applied: the record completes with its answer, the decision is kept with
/// it as an operator's is, and a caller afterwards gets the replay; no body runs.
pub async fn s28_applied_completes_the_record_and_callers_replay_it<S: StoreUnderTest>(store: S) {
    let store = Arc::new(store);
    ambiguous(&*store, "charge", 1).await;
    let asked = Arc::new(AtomicU32::new(0));
    let settler = Settler::new(store.clone()).verify(
        "charge",
        answers(Verified::Applied(receipt()), asked.clone()),
    );
    let report = settler.run_once(&Pass::new()).await.unwrap();
    assert_eq!(
        report.records,
        vec![(key_of(1), "charge".to_owned(), Settled::Applied)]
    );
    assert_eq!(report.exit_code(), 0);
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    let record = store.get(&key_of(1)).await.unwrap().expect("kept");
    assert_eq!(
        record.state,
        RecordState::Completed {
            outcome: serde_json::to_vec(&receipt()).unwrap()
        }
    );
    let resolution = record
        .resolution
        .expect("the decision is kept with the record");
    assert_eq!(resolution.decision, Decision::Applied);
    assert!(resolution.note.unwrap().contains("idemkit settler"));
    let runs = AtomicU32::new(0);
    let idem = runtime(store.clone());
    assert_eq!(call(&idem, 1, &runs).await, Ok(receipt()));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "replayed: no body, no verify"
    );
    let again = settler.run_once(&Pass::new()).await.unwrap();
    assert!(again.records.is_empty(), "nothing left to settle");
}

/// S28: verify answers NotApplied: the record is released (the decision kept, shown by `get`),
/// and the next call runs the body once.
pub async fn s28_not_applied_releases_the_record_and_the_next_call_runs<S: StoreUnderTest>(
    store: S,
) {
    let store = Arc::new(store);
    ambiguous(&*store, "charge", 2).await;
    let asked = Arc::new(AtomicU32::new(0));
    let settler = Settler::new(store.clone()).verify(
        "charge",
        answers(Verified::<Receipt>::NotApplied, asked.clone()),
    );
    let report = settler.run_once(&Pass::new()).await.unwrap();
    assert_eq!(
        report.records,
        vec![(key_of(2), "charge".to_owned(), Settled::NotApplied)]
    );
    assert_eq!(report.exit_code(), 0);
    let record = store
        .get(&key_of(2))
        .await
        .unwrap()
        .expect("shown with its decision");
    assert!(!record.is_live());
    assert_eq!(record.resolution.unwrap().decision, Decision::NotApplied);
    let runs = AtomicU32::new(0);
    let idem = runtime(store.clone());
    let ran = call(&idem, 2, &runs).await.unwrap();
    assert_eq!(ran.run, 1);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the body ran once, verify was not asked"
    );
}

/// S28: verify answers Unknown (or fails): the record stays ambiguous with its note, the answers
/// are counted with it, and past the host's bound it is reported as needing an operator.
pub async fn s28_unknown_keeps_the_record_and_counts_it_up_to_the_bound<S: StoreUnderTest>(
    store: S,
) {
    let store = Arc::new(store);
    ambiguous(&*store, "charge", 3).await;
    let asked = Arc::new(AtomicU32::new(0));
    let settler = Settler::new(store.clone())
        .verify(
            "charge",
            answers(Verified::<Receipt>::Unknown, asked.clone()),
        )
        .operator_after(None)
        .operator_after_unknowns(2);
    let first = settler.run_once(&Pass::new()).await.unwrap();
    assert_eq!(
        first.records[0].2,
        Settled::Unknown {
            answers: 1,
            needs_operator: false,
            why: None
        }
    );
    assert_eq!(first.exit_code(), 3, "some remain unknown");
    let record = store.get(&key_of(3)).await.unwrap().unwrap();
    let RecordState::Ambiguous { note } = &record.state else {
        panic!("still ambiguous: {record:?}");
    };
    assert_eq!(note, NOTE, "the call's note is kept");
    assert_eq!(record.unknowns, 1, "the answer is counted with the record");
    assert!(record.unknown_since.is_some());
    let second = settler.run_once(&Pass::new()).await.unwrap();
    assert_eq!(
        second.records[0].2,
        Settled::Unknown {
            answers: 2,
            needs_operator: true,
            why: None
        }
    );
    assert_eq!(second.exit_code(), 4, "one needs an operator");
    assert!(second.summary().contains("needs an operator"));
    // An error of verify counts as Unknown.
    let failing = Settler::new(store.clone())
        .verify("charge", |_| async {
            Err::<Verified<Receipt>, _>("provider down")
        })
        .operator_after(None);
    let third = failing.run_once(&Pass::new()).await.unwrap();
    assert!(matches!(
        &third.records[0].2,
        Settled::Unknown { answers: 3, why: Some(why), .. } if why.contains("provider down")
    ));
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    // Still kept as ambiguous: a caller still gets no body run.
    let runs = AtomicU32::new(0);
    let idem = runtime(store.clone());
    assert!(call(&idem, 3, &runs).await.is_err());
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the caller asked its verify, ran no body"
    );
}

/// S28: a tool the settler has no verify for is left for `idemkit resolve` and counted; a dry
/// run asks nothing and changes nothing; `--tool` and `--tenant` select.
pub async fn s28_no_verify_is_left_and_counted_and_a_dry_run_changes_nothing<S: StoreUnderTest>(
    store: S,
) {
    let store = Arc::new(store);
    ambiguous(&*store, "charge", 4).await;
    ambiguous(&*store, "refund", 5).await;
    let before = store.get(&key_of(4)).await.unwrap().unwrap();
    let asked = Arc::new(AtomicU32::new(0));
    let settler = Settler::new(store.clone()).verify(
        "charge",
        answers(Verified::Applied(receipt()), asked.clone()),
    );
    let dry = settler.run_once(&Pass::new().dry_run(true)).await.unwrap();
    let mut seen: Vec<_> = dry
        .records
        .iter()
        .map(|(_, t, s)| (t.clone(), s.clone()))
        .collect();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        seen,
        vec![
            ("charge".to_owned(), Settled::WouldVerify),
            ("refund".to_owned(), Settled::NoVerify)
        ]
    );
    assert_eq!(asked.load(Ordering::SeqCst), 0, "a dry run asks nothing");
    let after = store.get(&key_of(4)).await.unwrap().unwrap();
    assert_eq!(
        (&after.state, &after.resolution, after.updated),
        (&before.state, &before.resolution, before.updated),
        "and changes nothing"
    );
    let other_tenant = settler.run_once(&Pass::new().tenant("acme")).await.unwrap();
    assert!(other_tenant.records.is_empty(), "no record is acme's");
    let refunds = settler.run_once(&Pass::new().tool("refund")).await.unwrap();
    assert_eq!(
        refunds.records,
        vec![(key_of(5), "refund".to_owned(), Settled::NoVerify)]
    );
    assert_eq!(refunds.exit_code(), 4);
    assert!(refunds.summary().contains("idemkit resolve"));
    let all = settler.run_once(&Pass::new()).await.unwrap();
    assert_eq!(all.count("applied"), 1);
    assert_eq!(all.count("no_verify"), 1);
    let refund = store.get(&key_of(5)).await.unwrap().unwrap();
    assert!(
        matches!(&refund.state, RecordState::Ambiguous { note } if note == NOTE),
        "left as it was: {refund:?}"
    );
}

/// A store that lets a test step in: it counts claims, and may make a caller's claim of a key
/// right after a list returns (a caller that takes the record over between the settler's
/// listing and its claim).
struct Watched<S> {
    inner: Arc<S>,
    claims: AtomicU32,
    take_after_list: Mutex<Option<IdempotencyKey>>,
    caller: Mutex<Option<LeaseToken>>,
}

impl<S: StoreUnderTest> crate::Store for Watched<S> {
    fn claim<'a>(&'a self, req: &'a ClaimRequest<'_>) -> StoreFuture<'a, Claim> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        self.inner.claim(req)
    }
    fn renew(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> StoreFuture<'_, Written> {
        self.inner.renew(key, token, lease)
    }
    fn complete(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        outcome: Outcome,
        ttl: Duration,
    ) -> StoreFuture<'_, Written> {
        self.inner.complete(key, token, outcome, ttl)
    }
    fn release(&self, key: IdempotencyKey, token: LeaseToken) -> StoreFuture<'_, Written> {
        self.inner.release(key, token)
    }
    fn mark_ambiguous<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        self.inner.mark_ambiguous(key, token, note, ttl)
    }
}

#[async_trait::async_trait]
impl<S: StoreUnderTest> OperationIds for Watched<S> {
    async fn operation_id(&self, name: &str, fresh: uuid::Uuid) -> Result<uuid::Uuid, StoreError> {
        self.inner.operation_id(name, fresh).await
    }
}

#[async_trait::async_trait]
impl<S: StoreUnderTest> Records for Watched<S> {
    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.inner.get(key).await
    }
    async fn list(&self, filter: &RecordFilter) -> Result<Vec<Record>, StoreError> {
        let listed = self.inner.list(filter).await?;
        let take = self.take_after_list.lock().unwrap().take();
        if let Some(key) = take {
            let token = LeaseToken::new();
            let req = ClaimRequest::new(key, "charge", fingerprint_of(4200), token, HOUR, HOUR);
            let took = self.inner.claim(&req).await?;
            assert!(
                matches!(took, Claim::Acquired { takeover: Some(_) }),
                "{took:?}"
            );
            *self.caller.lock().unwrap() = Some(token);
        }
        Ok(listed)
    }
    async fn release_key(&self, key: &IdempotencyKey, force: bool) -> Result<Released, StoreError> {
        self.inner.release_key(key, force).await
    }
    async fn forget(&self, key: &IdempotencyKey, force: bool) -> Result<Forgot, StoreError> {
        self.inner.forget(key, force).await
    }
    async fn forget_noted(
        &self,
        key: &IdempotencyKey,
        force: bool,
        note: Option<&str>,
    ) -> Result<Forgot, StoreError> {
        self.inner.forget_noted(key, force, note).await
    }
    async fn resolve(
        &self,
        key: &IdempotencyKey,
        decision: Decision,
        outcome: Option<&[u8]>,
        note: Option<&str>,
        ttl: Duration,
    ) -> Result<Resolved, StoreError> {
        self.inner.resolve(key, decision, outcome, note, ttl).await
    }
    async fn settle(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        decision: Decision,
        outcome: Option<&[u8]>,
        note: Option<&str>,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        self.inner
            .settle(key, token, decision, outcome, note, ttl)
            .await
    }
    async fn prune(&self, limit: usize) -> Result<usize, StoreError> {
        self.inner.prune(limit).await
    }
    async fn counts(&self) -> Result<Vec<Count>, StoreError> {
        self.inner.counts().await
    }
}

fn watched<S: StoreUnderTest>(store: S) -> Arc<Watched<S>> {
    Arc::new(Watched {
        inner: Arc::new(store),
        claims: AtomicU32::new(0),
        take_after_list: Mutex::new(None),
        caller: Mutex::new(None),
    })
}

/// S28: a caller that takes the record over between the settler's listing and its claim holds
/// it: the settler passes it by (busy), asks no verify, and the caller's lease stands.
pub async fn s28_a_record_a_caller_holds_is_passed_by<S: StoreUnderTest>(store: S) {
    let store = watched(store);
    ambiguous(&*store.inner, "charge", 6).await;
    *store.take_after_list.lock().unwrap() = Some(key_of(6));
    let asked = Arc::new(AtomicU32::new(0));
    let settler = Settler::new(store.clone()).verify(
        "charge",
        answers(Verified::Applied(receipt()), asked.clone()),
    );
    let report = settler.run_once(&Pass::new()).await.unwrap();
    assert_eq!(
        report.records,
        vec![(key_of(6), "charge".to_owned(), Settled::Busy)]
    );
    assert_eq!(report.exit_code(), 0, "left to its caller");
    assert_eq!(asked.load(Ordering::SeqCst), 0, "verify was not asked");
    let caller = store.caller.lock().unwrap().expect("the caller claimed");
    let record = store.inner.get(&key_of(6)).await.unwrap().unwrap();
    assert!(
        matches!(record.state, RecordState::Running { token, .. } if token == caller),
        "the caller still holds it: {record:?}"
    );
}

/// S28: a caller of the same key while the settler's verify runs waits for the settler as for
/// any holder, then replays its answer: the body and verify never run twice at once (nor at all,
/// for the caller).
pub async fn s28_a_caller_racing_the_settler_never_runs_body_or_verify_alongside<
    S: StoreUnderTest,
>(
    store: S,
) {
    let store = watched(store);
    ambiguous(&*store.inner, "charge", 7).await;
    let active = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
    let entered_tx = Arc::new(Mutex::new(Some(entered_tx)));
    let go = Arc::new(tokio::sync::Notify::new());
    let settler = {
        let (active, most, go) = (active.clone(), most.clone(), go.clone());
        Settler::new(store.clone()).verify("charge", move |_key| {
            let now = active.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            if let Some(tx) = entered_tx.lock().unwrap().take() {
                let _ = tx.send(());
            }
            let (active, go) = (active.clone(), go.clone());
            async move {
                go.notified().await;
                active.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, String>(Verified::Applied(receipt()))
            }
        })
    };
    let pass = tokio::spawn(async move { settler.run_once(&Pass::new()).await });
    entered_rx.await.expect("the settler asks verify");
    let claims_before = store.claims.load(Ordering::SeqCst);
    let idem = runtime(store.clone());
    let ran = Arc::new(AtomicBool::new(false));
    let caller = {
        let (active, most, ran) = (active.clone(), most.clone(), ran.clone());
        tokio::spawn(async move {
            let enter = || {
                ran.store(true, Ordering::SeqCst);
                let now = active.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                active.fetch_sub(1, Ordering::SeqCst);
            };
            Tool::new("charge")
                .idem(&idem)
                .verify(|_key| {
                    enter();
                    async { Ok::<_, TestError>(Verified::Unknown) }
                })
                .side_effect(&[("order", &7u64)], &4200u64, |_key| {
                    enter();
                    async {
                        Ok(Receipt {
                            run: 99,
                            key: String::new(),
                        })
                    }
                })
                .await
        })
    };
    // The caller has asked the store for the key twice (found the settler holding it, waited,
    // and asked again) before the settler's verify answers: a settler whose lease did not hold
    // the key while verify ran would have been taken over by then.
    while store.claims.load(Ordering::SeqCst) < claims_before + 2 && !caller.is_finished() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // And it goes on waiting a while (its next claims meanwhile find the settler's lease live).
    tokio::time::sleep(Duration::from_millis(50)).await;
    go.notify_one();
    let report = pass.await.unwrap().unwrap();
    assert_eq!(report.records[0].2, Settled::Applied);
    assert_eq!(
        caller.await.unwrap(),
        Ok(receipt()),
        "the caller replays the settler's answer"
    );
    assert!(
        !ran.load(Ordering::SeqCst),
        "the caller ran neither its body nor its verify"
    );
    assert_eq!(most.load(Ordering::SeqCst), 1, "never two at once");
}

/// S28: the host's settler task settles a record without any caller, and stops cleanly.
pub async fn s28_the_hosts_settler_task_settles_without_a_caller_and_stops<S: StoreUnderTest>(
    store: S,
) {
    let store = Arc::new(store);
    ambiguous(&*store, "charge", 8).await;
    let asked = Arc::new(AtomicU32::new(0));
    let mut task = Settler::new(store.clone())
        .verify(
            "charge",
            answers(Verified::Applied(receipt()), asked.clone()),
        )
        .spawn(Duration::from_millis(20));
    loop {
        let (_, report) = task.next_pass().await;
        report.as_ref().as_ref().expect("the pass ran");
        let record = store.get(&key_of(8)).await.unwrap().unwrap();
        if matches!(record.state, RecordState::Completed { .. }) {
            break;
        }
    }
    task.stop().await;
    assert_eq!(asked.load(Ordering::SeqCst), 1, "asked once, settled once");
}
