//! Rows S1–S7: a call runs once, repeats replay, key reuse is refused, retries keep the key,
//! failures release or keep, concurrent callers run one body.

use std::sync::Arc;
use std::time::Duration;

use super::{Counted, Receipt, StoreUnderTest, TestError, charge, fingerprint_of, key_of, runtime};
use crate::store::RecordState;
use crate::{CallOutcome, Failure};

/// S1: the body runs once; the outcome is stored as completed and returned.
pub async fn s1_first_call_runs_once_and_is_stored(store: impl StoreUnderTest) {
    let store = Arc::new(store);
    let idem = runtime(store.clone());
    let tool = Counted::new();
    let (result, outcome) = tool.call(charge(&idem), 1, 4200, &[], Duration::ZERO).await;
    let receipt = result.unwrap();
    assert_eq!(
        (tool.runs(), receipt.run, outcome),
        (1, 1, CallOutcome::Completed)
    );
    assert_eq!(receipt.key, key_of(1).to_string());
    let record = store
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
pub async fn s2_repeat_returns_the_stored_outcome(store: impl StoreUnderTest) {
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
pub async fn s3_same_key_other_arguments_is_key_reuse(store: impl StoreUnderTest) {
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
pub async fn s4_retryable_failures_retry_with_the_identical_key(store: impl StoreUnderTest) {
    let store = Arc::new(store);
    let idem = runtime(store.clone());
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
        store.get(&key_of(4)).await.unwrap().unwrap().state,
        RecordState::Completed { .. }
    ));
}

/// S5: a permanent failure is not retried; the record is released, so a later call runs again.
pub async fn s5_permanent_failure_is_not_retried_and_released(store: impl StoreUnderTest) {
    let store = Arc::new(store);
    let idem = runtime(store.clone());
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
    assert_eq!(store.get(&key_of(5)).await.unwrap(), None);
    // Released: even other arguments may now use the key.
    let (later, _) = tool.call(charge(&idem), 5, 5000, &[], Duration::ZERO).await;
    assert_eq!((later.unwrap().run, tool.runs()), (2, 2));
}

/// S6: transient failures until the attempts run out: the last error returned, the record released.
pub async fn s6_exhausted_transient_is_released(store: impl StoreUnderTest) {
    let store = Arc::new(store);
    let idem = runtime(store.clone());
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
    assert_eq!(store.get(&key_of(6)).await.unwrap(), None);
}

/// S6: ambiguous failures until the attempts run out: the record is kept (an operator sees it),
/// and the next call with the same arguments takes it over at once, with the same key.
pub async fn s6_exhausted_ambiguous_is_kept_and_taken_over(store: impl StoreUnderTest) {
    let store = Arc::new(store);
    let idem = runtime(store.clone());
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
    let record = store
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
pub async fn s7_concurrent_calls_run_the_body_once(store: impl StoreUnderTest) {
    contend(store, 8, 8).await;
}

/// 64 tasks calling one key at once: the body runs exactly once; all get the same output.
pub async fn contention_64_tasks_one_key(store: impl StoreUnderTest) {
    contend(store, 64, 64).await;
}

pub(super) async fn contend(store: impl StoreUnderTest, callers: usize, order: u64) {
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
pub async fn s7_a_caller_that_waits_too_long_gets_in_flight(store: impl StoreUnderTest) {
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
