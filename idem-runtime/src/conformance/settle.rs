//! S28: a settler asks verify about records kept as ambiguous, without waiting for a caller, and
//! takes each over as a caller does ([`Records::settle`] writes its decision under its lease).

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
const NOTE: &str = "timed out; may have taken effect";

/// A record of `charge` (order `order`, amount 4200) kept as ambiguous by a holder that gave up.
async fn ambiguous(store: &impl StoreUnderTest, tool: &str, order: u64) {
    let holder = claim_raw(store, tool, order, HOUR, HOUR).await;
    let marked = store
        .mark_ambiguous(key_of(order), holder, NOTE, HOUR)
        .await
        .unwrap();
    assert_eq!(marked, Written::Applied);
}

fn receipt() -> Receipt {
    Receipt {
        run: 7,
        key: "found at the provider".to_owned(),
    }
}

fn runtime(store: Arc<impl StoreUnderTest>) -> Idem {
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
async fn call(idem: &Idem, order: u64, runs: &AtomicU32) -> Result<Receipt, TestError> {
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

fn answers<T: Clone + Send + Sync + 'static>(
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

/// Polls `store`'s record of `order` (every 20 ms, for at most 20 s) until `done` holds.
async fn until_record<S: Records>(store: &S, order: u64, done: impl Fn(&Record) -> bool) -> Record {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let record = store.get(&key_of(order)).await.unwrap().expect("kept");
        if done(&record) {
            return record;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never came to pass: {record:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn is_ambiguous(record: &Record) -> bool {
    matches!(record.state, RecordState::Ambiguous { .. })
}

/// The records `store` lists as ambiguous.
async fn listed_ambiguous(store: &impl Records) -> Vec<IdempotencyKey> {
    let filter = RecordFilter::new().state(crate::store::StateKind::Ambiguous);
    let listed = store.list(&filter).await.unwrap();
    listed.into_iter().map(|r| r.key).collect()
}

/// S31 (issue 52 #3): a caller whose process died leaves its record Running with its lease
/// lapsed; without any caller coming back, operators read it as ambiguous (listed, counted, a
/// note that says its holder's lease lapsed), a settle pass reports it, and the settler settles
/// it by verify. Failed before: it read as running, and no pass saw it.
pub async fn s31_a_dead_callers_record_is_reported_and_settled_without_a_caller<
    S: StoreUnderTest,
>(
    store: S,
) {
    let store = Arc::new(store);
    let _dead = claim_raw(&*store, "charge", 31, Duration::from_millis(100), HOUR).await;
    let record = until_record(&*store, 31, is_ambiguous).await;
    let RecordState::Ambiguous { note } = &record.state else {
        unreachable!()
    };
    assert!(
        note.contains("lease lapsed") && note.contains("may have started"),
        "{note}"
    );
    assert_eq!(listed_ambiguous(&*store).await, vec![key_of(31)]);
    assert_eq!(
        store.counts().await.unwrap(),
        vec![Count::new("charge", crate::store::StateKind::Ambiguous, 1)]
    );
    // `idemkit settle`: reported, as a settler without its verify would.
    let reporting = Settler::new(store.clone());
    let report = reporting.run_once(&Pass::new()).await.unwrap();
    assert_eq!(
        report.records,
        vec![(key_of(31), "charge".to_owned(), Settled::NoVerify)]
    );
    assert_eq!(report.exit_code(), 4);
    let asked = Arc::new(AtomicU32::new(0));
    let settler = Settler::new(store.clone()).verify(
        "charge",
        answers(Verified::Applied(receipt()), asked.clone()),
    );
    let report = settler.run_once(&Pass::new()).await.unwrap();
    assert_eq!(
        report.records,
        vec![(key_of(31), "charge".to_owned(), Settled::Applied)]
    );
    let record = store.get(&key_of(31)).await.unwrap().unwrap();
    assert!(
        matches!(record.state, RecordState::Completed { .. }),
        "{record:?}"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1);
}

/// S31, S30: a caller that took an ambiguous record over and died leaves it Running with a
/// lapsed lease: it reads as the ambiguous record it was, its note kept through the takeover,
/// and a settler's Unknown answer keeps that note.
pub async fn s31_a_lapsed_takeover_of_an_ambiguous_record_reads_with_its_note<S: StoreUnderTest>(
    store: S,
) {
    let store = Arc::new(store);
    ambiguous(&*store, "charge", 32).await;
    let req = ClaimRequest::new(
        key_of(32),
        "charge",
        fingerprint_of(4200),
        LeaseToken::new(),
        Duration::from_millis(100),
        HOUR,
    );
    assert_eq!(
        store.claim(&req).await.unwrap(),
        Claim::Acquired {
            takeover: Some(crate::store::Takeover::Ambiguous)
        }
    );
    let record = until_record(&*store, 32, is_ambiguous).await;
    assert_eq!(
        record.state,
        RecordState::Ambiguous {
            note: NOTE.to_owned()
        }
    );
    assert_eq!(listed_ambiguous(&*store).await, vec![key_of(32)]);
    let settler = Settler::new(store.clone())
        .verify(
            "charge",
            answers(Verified::<Receipt>::Unknown, Arc::new(AtomicU32::new(0))),
        )
        .operator_after(None);
    let report = settler.run_once(&Pass::new()).await.unwrap();
    assert!(
        matches!(report.records[0].2, Settled::Unknown { answers: 1, .. }),
        "{report:?}"
    );
    let record = store.get(&key_of(32)).await.unwrap().unwrap();
    assert_eq!(
        record.state,
        RecordState::Ambiguous {
            note: NOTE.to_owned()
        }
    );
}

/// A settler whose verify never answers and tells when it was asked.
fn hanging<S: StoreUnderTest>(
    store: Arc<S>,
    entered: tokio::sync::oneshot::Sender<()>,
    lease: Duration,
) -> Settler {
    let entered = Mutex::new(Some(entered));
    Settler::new(store)
        .lease(lease)
        .verify("charge", move |_key| {
            if let Some(tx) = entered.lock().unwrap().take() {
                let _ = tx.send(());
            }
            std::future::pending::<Result<Verified<Receipt>, String>>()
        })
}

/// S30 (issue 52 #1): a settle pass cut off mid-verify (a timeout around `run_once`) gives the
/// record back at once: it is ambiguous and listed again, with its note, long before the
/// settler's lease (a minute) would lapse, and the next pass settles it. Failed before: the
/// record stayed Running under the settler's token, and no pass listed it.
pub async fn s30_a_pass_cut_off_mid_verify_gives_the_record_back_at_once<S: StoreUnderTest>(
    store: S,
) {
    let store = Arc::new(store);
    ambiguous(&*store, "charge", 33).await;
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel();
    let settler = hanging(store.clone(), entered_tx, Duration::from_secs(60));
    let pass = Pass::new();
    let cut = tokio::time::timeout(Duration::from_millis(300), settler.run_once(&pass)).await;
    assert!(cut.is_err(), "the pass was cut off");
    entered_rx.await.expect("verify was asked before the cut");
    let record = until_record(&*store, 33, is_ambiguous).await;
    assert_eq!(
        record.state,
        RecordState::Ambiguous {
            note: NOTE.to_owned()
        },
        "as it was before the settler's claim"
    );
    assert_eq!(listed_ambiguous(&*store).await, vec![key_of(33)]);
    let settler = Settler::new(store.clone()).verify(
        "charge",
        answers(Verified::Applied(receipt()), Arc::new(AtomicU32::new(0))),
    );
    let report = settler.run_once(&Pass::new()).await.unwrap();
    assert_eq!(report.records[0].2, Settled::Applied);
}

/// S30: a settler that dies mid-verify (its pass never dropped: nothing gives the claim back)
/// leaves the record ambiguous and listed, with its note, as soon as its lease lapses; the next
/// pass settles it. Failed before: the record stayed Running, and no pass listed it.
pub async fn s30_a_settler_that_dies_mid_verify_leaves_the_record_listed_once_its_lease_lapses<
    S: StoreUnderTest,
>(
    store: S,
) {
    let store = Arc::new(store);
    ambiguous(&*store, "charge", 34).await;
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel();
    let settler = hanging(store.clone(), entered_tx, Duration::from_millis(400));
    let pass = Pass::new();
    let mut dying = Box::pin(settler.run_once(&pass));
    let mut entered_rx = entered_rx;
    std::future::poll_fn(|cx| {
        use std::future::Future as _;
        if dying.as_mut().poll(cx).is_ready() {
            panic!("verify never answers");
        }
        std::pin::Pin::new(&mut entered_rx).poll(cx)
    })
    .await
    .expect("verify was asked");
    // The process dies here: its pass is never polled nor dropped again.
    std::mem::forget(dying);
    let held = store.get(&key_of(34)).await.unwrap().unwrap();
    assert!(
        matches!(held.state, RecordState::Running { .. }),
        "the settler holds it while its lease is live: {held:?}"
    );
    let record = until_record(&*store, 34, is_ambiguous).await;
    assert_eq!(
        record.state,
        RecordState::Ambiguous {
            note: NOTE.to_owned()
        }
    );
    assert_eq!(listed_ambiguous(&*store).await, vec![key_of(34)]);
    let settler = Settler::new(store.clone()).verify(
        "charge",
        answers(Verified::Applied(receipt()), Arc::new(AtomicU32::new(0))),
    );
    let report = settler.run_once(&Pass::new()).await.unwrap();
    assert_eq!(report.records[0].2, Settled::Applied);
}

/// S32 (issue 52 #2): the operator bound counts across callers' retries. Three passes whose
/// verify answers Unknown, with a caller's retry between each (its own verify answering Unknown,
/// its takeover rewriting `created`): every answer is counted with the record, the settler's
/// `operator_after_unknowns(3)` fires, and when the operation was first made stays as it was.
/// Failed before: each caller's mark dropped the count kept in the note (answers 1 every pass,
/// never needing an operator).
pub async fn s32_the_operator_bound_counts_across_callers_retries<S: StoreUnderTest>(store: S) {
    let store = Arc::new(store);
    ambiguous(&*store, "charge", 35).await;
    let made = store.get(&key_of(35)).await.unwrap().unwrap().first_made;
    assert!(made > std::time::UNIX_EPOCH);
    let settler = Settler::new(store.clone())
        .verify(
            "charge",
            answers(Verified::<Receipt>::Unknown, Arc::new(AtomicU32::new(0))),
        )
        .operator_after(None)
        .operator_after_unknowns(3);
    let idem = runtime(store.clone());
    let runs = AtomicU32::new(0);
    let mut seen = Vec::new();
    let mut since = None;
    for _pass in 1..=3u32 {
        let report = settler.run_once(&Pass::new()).await.unwrap();
        let Settled::Unknown {
            answers,
            needs_operator,
            ..
        } = report.records[0].2
        else {
            panic!("{report:?}");
        };
        seen.push((answers, needs_operator));
        let record = store.get(&key_of(35)).await.unwrap().unwrap();
        assert_eq!(record.unknowns, answers);
        assert_eq!(record.first_made, made, "made: unchanged by every takeover");
        since = since.or(record.unknown_since);
        assert_eq!(
            record.unknown_since, since,
            "since the first Unknown answer"
        );
        // A caller retries: takes the record over, asks its verify (Unknown), keeps it.
        assert!(call(&idem, 35, &runs).await.is_err());
        let record = store.get(&key_of(35)).await.unwrap().unwrap();
        assert_eq!(record.unknowns, answers + 1, "the caller's answer counts");
        assert_eq!(record.first_made, made);
    }
    assert_eq!(seen, vec![(1, false), (3, true), (5, true)]);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        3,
        "each caller asked verify, ran no body"
    );
}

/// S32: the settler's age bound (`operator_after`) counts from when the operation was first
/// made, which a caller's takeover does not move. Failed before: the caller's takeover rewrote
/// `created`, from which the age was taken.
pub async fn s32_the_age_bound_counts_from_when_the_operation_was_first_made<S: StoreUnderTest>(
    store: S,
) {
    let store = Arc::new(store);
    ambiguous(&*store, "charge", 36).await;
    let made = store.get(&key_of(36)).await.unwrap().unwrap().first_made;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // A caller retries, and keeps it ambiguous.
    let idem = runtime(store.clone());
    let runs = AtomicU32::new(0);
    assert!(call(&idem, 36, &runs).await.is_err());
    let record = store.get(&key_of(36)).await.unwrap().unwrap();
    assert_eq!(record.first_made, made);
    assert!(record.created > made, "the takeover restarted `created`");
    let settler = Settler::new(store.clone())
        .verify(
            "charge",
            answers(Verified::<Receipt>::Unknown, Arc::new(AtomicU32::new(0))),
        )
        .operator_after(Duration::from_secs(1));
    let report = settler.run_once(&Pass::new()).await.unwrap();
    assert!(
        matches!(
            report.records[0].2,
            Settled::Unknown {
                answers: 2,
                needs_operator: true,
                ..
            }
        ),
        "{report:?}"
    );
}

/// S34: a pass reports the record it left with its outcome unknown that has waited longest (an
/// ambiguous record never expires by time): its key and when its operation was first made, in
/// the report and its summary; a pass that settles every record reports none.
pub async fn s34_a_pass_reports_the_oldest_unknown_it_left<S: StoreUnderTest>(store: S) {
    let store = Arc::new(store);
    ambiguous(&*store, "charge", 1).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    ambiguous(&*store, "charge", 2).await;
    let first_made = store
        .get(&key_of(1))
        .await
        .unwrap()
        .expect("kept")
        .first_made;
    // No verify function here: both are left for an operator.
    let report = Settler::new(store.clone())
        .run_once(&Pass::new())
        .await
        .unwrap();
    assert_eq!(report.count("no_verify"), 2);
    assert_eq!(report.oldest_unknown, Some((key_of(1), first_made)));
    assert!(report.oldest_unknown_age().is_some());
    let summary = report.summary();
    assert!(
        summary.contains("the oldest unknown outcome has waited")
            && summary.contains(&key_of(1).to_string()),
        "{summary}"
    );
    let asked = Arc::new(AtomicU32::new(0));
    let settler = Settler::new(store.clone()).verify(
        "charge",
        answers(Verified::Applied(receipt()), asked.clone()),
    );
    let report = settler.run_once(&Pass::new()).await.unwrap();
    assert_eq!(report.count("applied"), 2);
    assert_eq!(report.oldest_unknown, None, "none left");
    assert!(!report.summary().contains("oldest unknown"));
}
