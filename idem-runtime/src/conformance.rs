//! The conformance suite: one test per behaviour S1–S11 of the executor protocol, generic over
//! the store, so every store proves it obeys the same table.
//!
//! A store's test file runs it with one line:
//!
//! ```ignore
//! async fn fresh_store() -> MyStore { MyStore::connect_to_a_new_empty_namespace().await }
//! idem_runtime::conformance_tests!(fresh_store);
//! ```
//!
//! Each row runs on a multi-threaded runtime in real time, with leases of a second or less,
//! because stores other than memory keep their own clock.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::store::{
    Claim, ClaimRequest, Existing, ExistingState, LeaseToken, RecordState, Written,
};
use crate::{
    CallOutcome, Classify, Error, Failure, Fingerprint, Idem, IdempotencyKey, RetryPolicy, Store,
    StoreError, StoreErrorKind, Tool, observe,
};

/// Generates one `#[test]` per conformance row for the store `make` returns (an `async fn`
/// returning a fresh, empty store each time it is called).
#[macro_export]
macro_rules! conformance_tests {
    ($make:path) => {
        $crate::conformance_tests!(@rows $make;
            s1_first_call_runs_once_and_is_stored,
            s2_repeat_returns_the_stored_outcome,
            s3_same_key_other_arguments_is_key_reuse,
            s4_retryable_failures_retry_with_the_identical_key,
            s5_permanent_failure_is_not_retried_and_released,
            s6_exhausted_transient_is_released,
            s6_exhausted_ambiguous_is_kept_and_taken_over,
            s7_concurrent_calls_run_the_body_once,
            s7_a_caller_that_waits_too_long_gets_in_flight,
            s8_a_dead_holders_lease_expires_and_is_taken_over,
            s9_unreachable_store_fails_closed,
            s9_corrupt_outcome_fails_closed,
            s10_records_past_their_ttl_are_absent,
            s11_late_writes_of_a_taken_over_lease_are_fenced,
            s11_a_slow_holder_cannot_overwrite_the_new_record,
            s12_renew_extends_a_held_lease_past_its_end_and_its_ttl,
            s12_renew_after_the_lease_ran_out_untaken_still_holds,
            s12_renew_is_refused_to_a_stale_token_and_to_ended_records,
            s12_a_body_longer_than_its_lease_runs_once,
            s13_a_holder_whose_renewals_fail_stops_and_is_taken_over,
            contention_64_tasks_one_key,
            operation_ids_are_minted_once
        );
    };
    (@rows $make:path; $($row:ident),*) => {$(
        #[test]
        fn $row() {
            $crate::conformance::block_on(async { $crate::conformance::$row($make().await).await });
        }
    )*};
}

/// Runs a row on a fresh multi-threaded runtime.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(fut)
}

/// The error type of the suite's tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestError {
    /// The body failed so.
    Body(Failure),
    /// idemkit refused: key reuse.
    KeyReuse,
    /// idemkit refused: another call in flight.
    InFlight,
    /// idemkit refused: the store failed so.
    Store(StoreErrorKind),
    /// The call's lease was lost while it ran (S13).
    LeaseLost,
    /// Any other runtime error.
    Other(String),
}

impl Classify for TestError {
    fn classify(&self) -> Failure {
        match self {
            TestError::Body(f) => *f,
            _ => Failure::Permanent,
        }
    }
}

impl From<Error> for TestError {
    fn from(e: Error) -> Self {
        match e {
            Error::KeyReuse { .. } => TestError::KeyReuse,
            Error::InFlight { .. } => TestError::InFlight,
            Error::Store { source, .. } => TestError::Store(source.kind()),
            Error::LeaseLost { .. } => TestError::LeaseLost,
            other => TestError::Other(other.to_string()),
        }
    }
}

/// What the suite's tools return.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// Which run of the body made it.
    pub run: u32,
    /// The key the body saw.
    pub key: String,
}

// Long enough that a holder under a loaded CI machine still completes inside its lease (a
// takeover there would be a second body run, and a false failure of S7), short enough for S8.
const LEASE: Duration = Duration::from_millis(1000);

fn runtime(store: impl Store) -> Idem {
    Idem::builder()
        .store(store)
        .retry(
            RetryPolicy::default()
                .with_initial_delay(Duration::from_millis(2))
                .with_max_delay(Duration::from_millis(10))
                .with_max_elapsed(Duration::from_secs(5)),
        )
        .lease(LEASE)
        .build()
        .expect("the suite's settings are consistent")
}

/// A tool whose body counts its runs and fails as `script` says, then succeeds.
struct Counted {
    runs: Arc<AtomicU32>,
    keys: Arc<std::sync::Mutex<Vec<IdempotencyKey>>>,
}

impl Counted {
    fn new() -> Self {
        Counted {
            runs: Arc::default(),
            keys: Arc::default(),
        }
    }

    fn runs(&self) -> u32 {
        self.runs.load(Ordering::SeqCst)
    }

    /// Calls tool `charge` with key field `order` and argument `amount`; the body sleeps `hold`
    /// and fails with `script[n]` on its n-th run in this call.
    async fn call(
        &self,
        tool: Tool<'_>,
        order: u64,
        amount: u64,
        script: &[Failure],
        hold: Duration,
    ) -> (Result<Receipt, TestError>, CallOutcome) {
        let mut attempt = 0usize;
        let (result, info) = observe(tool.side_effect(&[("order", &order)], &amount, |key| {
            let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
            self.keys.lock().unwrap().push(key);
            let failure = script.get(attempt).copied();
            attempt += 1;
            async move {
                tokio::time::sleep(hold).await;
                match failure {
                    Some(f) => Err(TestError::Body(f)),
                    None => Ok(Receipt {
                        run: n,
                        key: key.to_string(),
                    }),
                }
            }
        }))
        .await;
        (
            result,
            info.expect("every call reports what happened").outcome,
        )
    }
}

fn charge(idem: &Idem) -> Tool<'_> {
    Tool::new("charge").idem(idem)
}

fn key_of(order: u64) -> IdempotencyKey {
    IdempotencyKey::derive("charge", &[("order", &order)])
}

fn fingerprint_of(amount: u64) -> Fingerprint {
    Fingerprint::of(&amount).unwrap()
}

/// S1: the body runs once; the outcome is stored as completed and returned.
pub async fn s1_first_call_runs_once_and_is_stored(store: impl Store) {
    let idem = runtime(store);
    let tool = Counted::new();
    let (result, outcome) = tool.call(charge(&idem), 1, 4200, &[], Duration::ZERO).await;
    let receipt = result.unwrap();
    assert_eq!(
        (tool.runs(), receipt.run, outcome),
        (1, 1, CallOutcome::Completed)
    );
    assert_eq!(receipt.key, key_of(1).to_string());
    let record = idem
        .store()
        .get(&key_of(1))
        .await
        .unwrap()
        .expect("a completed record");
    assert_eq!(record.tool, "charge");
    assert_eq!(record.fingerprint, fingerprint_of(4200));
    let RecordState::Completed { outcome } = record.state else {
        panic!("not completed: {record:?}")
    };
    assert_eq!(
        serde_json::from_slice::<Receipt>(&outcome).unwrap(),
        receipt
    );
}

/// S2: the same key and arguments again return the stored outcome without running the body.
pub async fn s2_repeat_returns_the_stored_outcome(store: impl Store) {
    let idem = runtime(store);
    let tool = Counted::new();
    let first = tool
        .call(charge(&idem), 2, 4200, &[], Duration::ZERO)
        .await
        .0
        .unwrap();
    for _ in 0..3 {
        let (again, outcome) = tool.call(charge(&idem), 2, 4200, &[], Duration::ZERO).await;
        assert_eq!(again.unwrap(), first);
        assert_eq!(outcome, CallOutcome::Replayed);
    }
    assert_eq!(tool.runs(), 1);
}

/// S3: the same key with other arguments is refused as key reuse; the body does not run.
pub async fn s3_same_key_other_arguments_is_key_reuse(store: impl Store) {
    let idem = runtime(store);
    let tool = Counted::new();
    tool.call(charge(&idem), 3, 4200, &[], Duration::ZERO)
        .await
        .0
        .unwrap();
    let (reused, outcome) = tool.call(charge(&idem), 3, 9900, &[], Duration::ZERO).await;
    assert_eq!(
        (reused, outcome),
        (Err(TestError::KeyReuse), CallOutcome::Refused)
    );
    assert_eq!(tool.runs(), 1);
}

/// S4: transient, ambiguous and retry-after failures are retried with the identical key.
pub async fn s4_retryable_failures_retry_with_the_identical_key(store: impl Store) {
    let idem = runtime(store);
    let tool = Counted::new();
    let script = [
        Failure::Transient,
        Failure::Ambiguous,
        Failure::RetryAfter(Duration::from_millis(20)),
    ];
    let (result, outcome) = tool
        .call(
            charge(&idem).max_attempts(4),
            4,
            4200,
            &script,
            Duration::ZERO,
        )
        .await;
    assert_eq!((result.unwrap().run, outcome), (4, CallOutcome::Completed));
    let keys = tool.keys.lock().unwrap().clone();
    assert_eq!(keys, vec![key_of(4); 4], "every attempt sees the same key");
    assert!(matches!(
        idem.store().get(&key_of(4)).await.unwrap().unwrap().state,
        RecordState::Completed { .. }
    ));
}

/// S5: a permanent failure is not retried; the record is released, so a later call runs again.
pub async fn s5_permanent_failure_is_not_retried_and_released(store: impl Store) {
    let idem = runtime(store);
    let tool = Counted::new();
    let (result, outcome) = tool
        .call(
            charge(&idem),
            5,
            4200,
            &[Failure::Permanent],
            Duration::ZERO,
        )
        .await;
    assert_eq!(result, Err(TestError::Body(Failure::Permanent)));
    assert_eq!(
        (tool.runs(), outcome),
        (1, CallOutcome::Failed(Failure::Permanent))
    );
    assert_eq!(idem.store().get(&key_of(5)).await.unwrap(), None);
    // Released: even other arguments may now use the key.
    let (later, _) = tool.call(charge(&idem), 5, 5000, &[], Duration::ZERO).await;
    assert_eq!((later.unwrap().run, tool.runs()), (2, 2));
}

/// S6: transient failures until the attempts run out: the last error returned, the record released.
pub async fn s6_exhausted_transient_is_released(store: impl Store) {
    let idem = runtime(store);
    let tool = Counted::new();
    let script = [Failure::Transient; 3];
    let (result, outcome) = tool
        .call(
            charge(&idem).max_attempts(3),
            6,
            4200,
            &script,
            Duration::ZERO,
        )
        .await;
    assert_eq!(result, Err(TestError::Body(Failure::Transient)));
    assert_eq!(
        (tool.runs(), outcome),
        (3, CallOutcome::Failed(Failure::Transient))
    );
    assert_eq!(idem.store().get(&key_of(6)).await.unwrap(), None);
}

/// S6: ambiguous failures until the attempts run out: the record is kept (an operator sees it),
/// and the next call with the same arguments takes it over at once, with the same key.
pub async fn s6_exhausted_ambiguous_is_kept_and_taken_over(store: impl Store) {
    let idem = runtime(store);
    let tool = Counted::new();
    let script = [Failure::Ambiguous; 2];
    let (result, outcome) = tool
        .call(
            charge(&idem).max_attempts(2),
            7,
            4200,
            &script,
            Duration::ZERO,
        )
        .await;
    assert_eq!(result, Err(TestError::Body(Failure::Ambiguous)));
    assert_eq!(outcome, CallOutcome::Failed(Failure::Ambiguous));
    let record = idem
        .store()
        .get(&key_of(7))
        .await
        .unwrap()
        .expect("the ambiguous record is kept");
    assert!(
        matches!(record.state, RecordState::Ambiguous { .. }),
        "{record:?}"
    );
    // Other arguments may not use the key while it may have taken effect.
    let (reuse, _) = tool.call(charge(&idem), 7, 9900, &[], Duration::ZERO).await;
    assert_eq!(reuse, Err(TestError::KeyReuse));
    let (retry, outcome) = tool.call(charge(&idem), 7, 4200, &[], Duration::ZERO).await;
    assert_eq!((retry.unwrap().run, outcome), (3, CallOutcome::Completed));
    assert_eq!(tool.keys.lock().unwrap().clone(), vec![key_of(7); 3]);
}

/// S7: concurrent calls of one key: one body runs, the others wait for and return its outcome.
pub async fn s7_concurrent_calls_run_the_body_once(store: impl Store) {
    contend(store, 8, 8).await;
}

/// 64 tasks calling one key at once: the body runs exactly once; all get the same output.
pub async fn contention_64_tasks_one_key(store: impl Store) {
    contend(store, 64, 64).await;
}

async fn contend(store: impl Store, callers: usize, order: u64) {
    let idem = runtime(store);
    let tool = Arc::new(Counted::new());
    let start = Arc::new(tokio::sync::Barrier::new(callers));
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (idem, tool, start) = (idem.clone(), tool.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                tool.call(charge(&idem), order, 4200, &[], Duration::from_millis(100))
                    .await
            })
        })
        .collect();
    let mut receipts = Vec::new();
    let mut replays = 0;
    for task in tasks {
        let (result, outcome) = task.await.unwrap();
        receipts.push(result.unwrap());
        replays += usize::from(outcome == CallOutcome::Replayed);
    }
    assert_eq!(tool.runs(), 1, "exactly one body ran");
    assert!(
        receipts.iter().all(|r| *r == receipts[0]),
        "all callers got the same output"
    );
    assert_eq!(replays, callers - 1);
}

/// S7: a caller that waits longer than its bound for the running call gets `InFlight`.
pub async fn s7_a_caller_that_waits_too_long_gets_in_flight(store: impl Store) {
    let idem = runtime(store);
    let tool = Arc::new(Counted::new());
    let holder = {
        let (idem, tool) = (idem.clone(), tool.clone());
        tokio::spawn(async move {
            tool.call(charge(&idem), 8, 4200, &[], Duration::from_millis(600))
                .await
        })
    };
    while tool.runs() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let impatient = charge(&idem).in_flight_wait(Duration::from_millis(50));
    let (result, outcome) = tool.call(impatient, 8, 4200, &[], Duration::ZERO).await;
    assert_eq!(
        (result, outcome),
        (Err(TestError::InFlight), CallOutcome::Refused)
    );
    assert_eq!(holder.await.unwrap().1, CallOutcome::Completed);
    assert_eq!(tool.runs(), 1);
}

/// S8: a holder that died leaves a lease that expires; the next call takes over with the same key.
pub async fn s8_a_dead_holders_lease_expires_and_is_taken_over(store: impl Store) {
    let idem = runtime(store);
    // The "dead process": it claimed and never came back.
    let dead = ClaimRequest {
        key: key_of(9),
        tool: "charge",
        fingerprint: fingerprint_of(4200),
        token: LeaseToken::new(),
        lease: LEASE,
        ttl: Duration::from_secs(60),
    };
    assert_eq!(idem.store().claim(&dead).await.unwrap(), Claim::Acquired);
    let tool = Counted::new();
    let (result, outcome) = tool.call(charge(&idem), 9, 4200, &[], Duration::ZERO).await;
    assert_eq!(
        (result.unwrap().key, outcome),
        (key_of(9).to_string(), CallOutcome::Completed)
    );
    assert_eq!(tool.runs(), 1);
    assert_eq!(
        idem.store()
            .complete(&key_of(9), dead.token, b"1", Duration::from_secs(60))
            .await
            .unwrap(),
        Written::Fenced
    );
}

/// A store whose every operation fails as an unreachable one would.
struct Unreachable;

#[async_trait::async_trait]
impl Store for Unreachable {
    async fn claim(&self, _: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
        Err(StoreError::unavailable("connection refused"))
    }
    async fn complete(
        &self,
        _: &IdempotencyKey,
        _: LeaseToken,
        _: &[u8],
        _: Duration,
    ) -> Result<Written, StoreError> {
        Err(StoreError::unavailable("connection refused"))
    }
    async fn renew(
        &self,
        _: &IdempotencyKey,
        _: LeaseToken,
        _: Duration,
    ) -> Result<Written, StoreError> {
        Err(StoreError::unavailable("connection refused"))
    }
    async fn release(&self, _: &IdempotencyKey, _: LeaseToken) -> Result<Written, StoreError> {
        Err(StoreError::unavailable("connection refused"))
    }
    async fn mark_ambiguous(
        &self,
        _: &IdempotencyKey,
        _: LeaseToken,
        _: &str,
        _: Duration,
    ) -> Result<Written, StoreError> {
        Err(StoreError::unavailable("connection refused"))
    }
    async fn get(&self, _: &IdempotencyKey) -> Result<Option<crate::store::Record>, StoreError> {
        Err(StoreError::unavailable("connection refused"))
    }
    async fn prune(&self, _: usize) -> Result<usize, StoreError> {
        Err(StoreError::unavailable("connection refused"))
    }
    async fn operation_id(&self, _: &str, _: Uuid) -> Result<Uuid, StoreError> {
        Err(StoreError::unavailable("connection refused"))
    }
}

/// S9: an unreachable store fails the call closed: `Error::Store`, the body never runs.
pub async fn s9_unreachable_store_fails_closed(store: impl Store) {
    drop(store); // This row is about the executor's side of the contract.
    let idem = runtime(Unreachable);
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
pub async fn s9_corrupt_outcome_fails_closed(store: impl Store) {
    let idem = runtime(store);
    let req = ClaimRequest {
        key: key_of(11),
        tool: "charge",
        fingerprint: fingerprint_of(4200),
        token: LeaseToken::new(),
        lease: LEASE,
        ttl: Duration::from_secs(60),
    };
    assert_eq!(idem.store().claim(&req).await.unwrap(), Claim::Acquired);
    let written = idem
        .store()
        .complete(
            &req.key,
            req.token,
            br#"{"not":"a receipt"}"#,
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

/// S10: a record older than its time-to-live is treated as absent, and pruned.
pub async fn s10_records_past_their_ttl_are_absent(store: impl Store) {
    let idem = runtime(store);
    let tool = Counted::new();
    let short = || charge(&idem).ttl(Duration::from_millis(1000));
    tool.call(short(), 12, 4200, &[], Duration::ZERO)
        .await
        .0
        .unwrap();
    assert_eq!(
        tool.call(short(), 12, 4200, &[], Duration::ZERO).await.1,
        CallOutcome::Replayed
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(idem.store().get(&key_of(12)).await.unwrap(), None);
    assert!(
        idem.store().prune(100).await.unwrap() >= 1,
        "the expired record is pruned"
    );
    // Expired: other arguments may use the key again, and the body runs.
    let (again, outcome) = tool.call(short(), 12, 9900, &[], Duration::ZERO).await;
    assert_eq!((again.unwrap().run, outcome), (2, CallOutcome::Completed));
}

/// S11: every write of a holder whose lease was taken over is refused; the new record stands.
pub async fn s11_late_writes_of_a_taken_over_lease_are_fenced(store: impl Store) {
    let req = |token| ClaimRequest {
        key: key_of(13),
        tool: "charge",
        fingerprint: fingerprint_of(4200),
        token,
        lease: Duration::from_millis(200),
        ttl: Duration::from_secs(60),
    };
    let (old, new) = (LeaseToken::new(), LeaseToken::new());
    assert_eq!(store.claim(&req(old)).await.unwrap(), Claim::Acquired);
    assert!(
        matches!(store.claim(&req(new)).await.unwrap(), Claim::Existing(_)),
        "a live lease is not taken"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        store.claim(&req(new)).await.unwrap(),
        Claim::Acquired,
        "an expired lease is taken over"
    );
    let ttl = Duration::from_secs(60);
    assert_eq!(
        store
            .complete(&key_of(13), old, b"\"old\"", ttl)
            .await
            .unwrap(),
        Written::Fenced
    );
    assert_eq!(
        store
            .mark_ambiguous(&key_of(13), old, "late", ttl)
            .await
            .unwrap(),
        Written::Fenced
    );
    assert_eq!(
        store.release(&key_of(13), old).await.unwrap(),
        Written::Fenced
    );
    assert_eq!(
        store
            .complete(&key_of(13), new, b"\"new\"", ttl)
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

/// S11 through the executor: a holder that cannot notice its lease ending (its body blocks its
/// thread, so nothing polls the lease) finishes after the lease was taken over and the new
/// holder completed; its write is refused, the new record stands, and its caller is told.
/// (A holder that awaits notices and stops: S13.)
pub async fn s11_a_slow_holder_cannot_overwrite_the_new_record(store: impl Store) {
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

fn renew_req(
    order: u64,
    token: LeaseToken,
    lease: Duration,
    ttl: Duration,
) -> ClaimRequest<'static> {
    ClaimRequest {
        key: key_of(order),
        tool: "charge",
        fingerprint: fingerprint_of(4200),
        token,
        lease,
        ttl,
    }
}

/// S12 (store): `renew` moves a held lease's end later, and the record's expiry with it, so a
/// holder that renews is neither taken over nor expired while it runs.
pub async fn s12_renew_extends_a_held_lease_past_its_end_and_its_ttl(store: impl Store) {
    let short = Duration::from_millis(300);
    let (holder, other) = (LeaseToken::new(), LeaseToken::new());
    assert_eq!(
        store
            .claim(&renew_req(15, holder, short, short))
            .await
            .unwrap(),
        Claim::Acquired
    );
    assert_eq!(
        store
            .renew(&key_of(15), holder, Duration::from_secs(5))
            .await
            .unwrap(),
        Written::Applied
    );
    // Past the claim's lease and its ttl: the renewed lease holds.
    tokio::time::sleep(Duration::from_millis(600)).await;
    // Claimed with the lease the holder renews with, as callers of one tool are (the SQLite
    // store caps a lease end further ahead than the claimer's lease, as clock skew).
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
pub async fn s12_renew_after_the_lease_ran_out_untaken_still_holds(store: impl Store) {
    let (holder, other) = (LeaseToken::new(), LeaseToken::new());
    let ttl = Duration::from_secs(60);
    let req = |token| renew_req(16, token, Duration::from_millis(100), ttl);
    assert_eq!(store.claim(&req(holder)).await.unwrap(), Claim::Acquired);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        store
            .renew(&key_of(16), holder, Duration::from_secs(5))
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
pub async fn s12_renew_is_refused_to_a_stale_token_and_to_ended_records(store: impl Store) {
    let (old, new) = (LeaseToken::new(), LeaseToken::new());
    let ttl = Duration::from_secs(60);
    let long = Duration::from_secs(5);
    let req = |token| renew_req(17, token, Duration::from_millis(200), ttl);
    assert_eq!(store.claim(&req(old)).await.unwrap(), Claim::Acquired);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(store.claim(&req(new)).await.unwrap(), Claim::Acquired);
    assert_eq!(
        store.renew(&key_of(17), old, long).await.unwrap(),
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
            .complete(&key_of(17), new, b"\"done\"", ttl)
            .await
            .unwrap(),
        Written::Applied
    );
    assert_eq!(
        store.renew(&key_of(17), new, long).await.unwrap(),
        Written::Fenced,
        "a completed record is not renewed"
    );
    assert!(matches!(
        store.get(&key_of(17)).await.unwrap().unwrap().state,
        RecordState::Completed { .. }
    ));
    assert_eq!(
        store.renew(&key_of(18), new, long).await.unwrap(),
        Written::Fenced,
        "a key never claimed"
    );
    assert_eq!(store.get(&key_of(18)).await.unwrap(), None);
}

/// S12 through the executor: a body that runs 2.5 leases is not taken over: its holder renews
/// the lease while it runs, so a second caller waits for it and replays its outcome. (Before
/// renewals, the second caller took the key over at the lease's end and ran the body again.)
pub async fn s12_a_body_longer_than_its_lease_runs_once(store: impl Store) {
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

/// A store whose renewals fail (as when the holder cannot reach it); everything else passes.
struct RenewalsFail<S>(Arc<S>);

#[async_trait::async_trait]
impl<S: Store> Store for RenewalsFail<S> {
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
        self.0.claim(req).await
    }
    async fn complete(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        outcome: &[u8],
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        self.0.complete(key, token, outcome, ttl).await
    }
    async fn renew(
        &self,
        _: &IdempotencyKey,
        _: LeaseToken,
        _: Duration,
    ) -> Result<Written, StoreError> {
        Err(StoreError::unavailable("connection refused"))
    }
    async fn release(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
    ) -> Result<Written, StoreError> {
        self.0.release(key, token).await
    }
    async fn mark_ambiguous(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        self.0.mark_ambiguous(key, token, note, ttl).await
    }
    async fn get(&self, key: &IdempotencyKey) -> Result<Option<crate::store::Record>, StoreError> {
        self.0.get(key).await
    }
    async fn prune(&self, limit: usize) -> Result<usize, StoreError> {
        self.0.prune(limit).await
    }
    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError> {
        self.0.operation_id(name, fresh).await
    }
}

/// S13 through the executor: a holder whose renewals fail until its lease ends stops its body
/// at the next await (the body never finishes), starts no further attempt, and its caller is
/// told the outcome is unknown; the record is kept as ambiguous, so the next call takes it over
/// with the same key.
pub async fn s13_a_holder_whose_renewals_fail_stops_and_is_taken_over(store: impl Store) {
    let store = Arc::new(store);
    let cut_off = runtime(RenewalsFail(store.clone()));
    let idem = runtime(store);
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
    let record = idem.store().get(&key_of(20)).await.unwrap().expect("kept");
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

/// `Idem::operation` mints an id once per name and returns it unchanged afterwards.
pub async fn operation_ids_are_minted_once(store: impl Store) {
    let idem = runtime(store);
    let first = idem.operation("plan-42/step-3").await.unwrap();
    assert_eq!(idem.operation("plan-42/step-3").await.unwrap(), first);
    assert_ne!(idem.operation("plan-42/step-4").await.unwrap(), first);
    assert_eq!(first.as_uuid().get_version_num(), 4);
}
