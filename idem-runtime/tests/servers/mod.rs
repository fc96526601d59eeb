//! What the PostgreSQL and Redis tests share: the URL of the test server (`url.rs`: a test that
//! needs one lives in a module named `needs_postgres`, `needs_pgbouncer` or `needs_redis`), a
//! tool that counts how often its body runs, and the contention and fencing tests every
//! distributed store runs.
#![allow(dead_code)] // Each test file uses part of it.

mod url;
pub use url::server_url;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idem_runtime::store::{
    Claim, ClaimRequest, LeaseToken, OperationIds, Outcome, RecordState, Takeover, Written,
};
use idem_runtime::{
    CallOutcome, Classify, Error, Failure, Fingerprint, Idem, IdempotencyKey, Records, Store,
    StoreErrorKind, Tool, observe,
};

/// The error type of the tool below.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestError {
    /// idemkit refused: the store failed so.
    Store(StoreErrorKind),
    /// Any other runtime error.
    Other(String),
}

impl Classify for TestError {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}

impl From<Error> for TestError {
    fn from(e: Error) -> Self {
        match e {
            Error::Store { source, .. } => TestError::Store(source.kind()),
            other => TestError::Other(other.to_string()),
        }
    }
}

/// `prefix` and 12 random hex digits: a table or key prefix of one test's own.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// The key of tool `charge` for `order`.
pub fn key_of(order: u64) -> IdempotencyKey {
    IdempotencyKey::derive("charge", &[("order", &order)])
}

/// Calls tool `charge` for `order`; the body counts its run in `runs`, then awaits `during`.
pub async fn charge<Fut: Future<Output = ()>>(
    idem: &Idem,
    order: u64,
    runs: &AtomicU32,
    during: impl FnOnce() -> Fut,
) -> (Result<String, TestError>, CallOutcome) {
    let mut during = Some(during);
    let (result, info) = observe(Tool::new("charge").idem(idem).side_effect(
        &[("order", &order)],
        &4200u64,
        |key| {
            let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
            let during = during.take().expect("the body runs at most once per call");
            async move {
                during().await;
                Ok::<_, TestError>(format!("receipt {n} for {key}"))
            }
        },
    ))
    .await;
    (result, info.expect("every call reports").outcome)
}

/// 32 tasks spread over 4 workers (one store each, so 4 pools or connections) call one key at
/// once: exactly one body runs, and all 32 get its output.
pub async fn contention_32_tasks_over_4_workers<S: Store + OperationIds + Records>(stores: Vec<S>) {
    assert_eq!(stores.len(), 4);
    let workers: Vec<Idem> = stores.into_iter().map(Idem::new).collect();
    let runs = Arc::new(AtomicU32::new(0));
    let start = Arc::new(tokio::sync::Barrier::new(32));
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let (idem, runs, start) = (workers[i % 4].clone(), runs.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                charge(&idem, 1, &runs, || {
                    tokio::time::sleep(Duration::from_millis(100))
                })
                .await
            })
        })
        .collect();
    let mut outputs = Vec::new();
    let mut replays = 0;
    for task in tasks {
        let (result, outcome) = task.await.unwrap();
        outputs.push(result.expect("every caller gets the outcome"));
        replays += usize::from(outcome == CallOutcome::Replayed);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "exactly one body ran");
    assert!(outputs.iter().all(|o| *o == outputs[0]), "{outputs:?}");
    assert_eq!(replays, 31);
}

/// Worker A's lease expires and worker B (another store instance) takes over; A's late writes
/// are refused and B's record stands, seen from both.
pub async fn fencing_across_workers<S: Store + OperationIds + Records>(a: S, b: S) {
    let req = |token| {
        ClaimRequest::new(
            key_of(7),
            "charge",
            Fingerprint::of(&4200u64).unwrap(),
            token,
            Duration::from_millis(200),
            Duration::from_secs(60),
        )
    };
    let (old, new) = (LeaseToken::new(), LeaseToken::new());
    let ttl = Duration::from_secs(60);
    assert_eq!(
        a.claim(&req(old)).await.unwrap(),
        Claim::Acquired { takeover: None }
    );
    assert!(matches!(
        b.claim(&req(new)).await.unwrap(),
        Claim::Existing(_)
    ));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        b.claim(&req(new)).await.unwrap(),
        Claim::Acquired {
            takeover: Some(Takeover::ExpiredHolder)
        }
    );
    assert_eq!(
        a.complete(key_of(7), old, Outcome::from(&b"\"a\""[..]), ttl)
            .await
            .unwrap(),
        Written::Fenced
    );
    assert_eq!(
        a.mark_ambiguous(key_of(7), old, "late", ttl).await.unwrap(),
        Written::Fenced
    );
    assert_eq!(a.release(key_of(7), old).await.unwrap(), Written::Fenced);
    assert_eq!(
        b.complete(key_of(7), new, Outcome::from(&b"\"b\""[..]), ttl)
            .await
            .unwrap(),
        Written::Applied
    );
    for store in [&a, &b] {
        assert_eq!(
            store.get(&key_of(7)).await.unwrap().unwrap().state,
            RecordState::Completed {
                outcome: b"\"b\"".to_vec()
            },
            "B's record stands, seen from both workers"
        );
    }
}

/// A worker's store whose connections a test can cut from outside (through a role or user of its
/// own on the server), for the lost-connection scenarios every distributed store runs.
#[allow(async_fn_in_trait)] // Test code: the futures are awaited where they are made.
pub trait Severable {
    type Store: Store + OperationIds + Records + Clone;
    /// How many connections a kill finds when the store is connected (`None`: at least one).
    const CONNECTIONS: Option<i64>;
    fn store(&self) -> &Self::Store;
    /// Kills every connection of the store; returns how many.
    async fn kill(&self) -> i64;
    /// Lets the store log in again (`true`) or refuses it (`false`).
    async fn allow(&self, logins: bool);
}

fn killed<F: Severable>(n: i64, what: &str) {
    match F::CONNECTIONS {
        Some(expected) => assert_eq!(n, expected, "{what}"),
        None => assert!(n >= 1, "{what}"),
    }
}

pub async fn completed(store: &impl Records, order: u64) -> bool {
    matches!(
        store.get(&key_of(order)).await.unwrap().map(|r| r.state),
        Some(RecordState::Completed { .. })
    )
}

/// The store's connections are killed between calls: the next claim runs on a fresh connection.
pub async fn connection_killed_before_the_claim<F: Severable>(f: &F) {
    let idem = Idem::new(f.store().clone());
    let runs = AtomicU32::new(0);
    charge(&idem, 1, &runs, || async {}).await.0.unwrap();
    killed::<F>(f.kill().await, "the store had a live connection");
    let (second, outcome) = charge(&idem, 2, &runs, || async {}).await;
    assert_eq!((second.is_ok(), outcome), (true, CallOutcome::Completed));
    assert_eq!(runs.load(Ordering::SeqCst), 2, "one run per operation");
    assert!(completed(f.store(), 2).await);
}

/// The connection dies while the body runs: `complete` is sent again on a fresh connection, so
/// the outcome is recorded and a repeat replays it.
pub async fn connection_killed_while_the_body_runs<F: Severable>(f: &F) {
    let idem = Idem::new(f.store().clone());
    let runs = AtomicU32::new(0);
    let (result, outcome) = charge(&idem, 1, &runs, || async {
        killed::<F>(f.kill().await, "the claim's connection was live");
    })
    .await;
    assert_eq!((result.is_ok(), outcome), (true, CallOutcome::Completed));
    assert!(completed(f.store(), 1).await);
    let (again, outcome) = charge(&idem, 1, &runs, || async {}).await;
    assert_eq!((again, outcome), (result, CallOutcome::Replayed));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// The server refuses the store outright: the call fails closed with `Error::Store` and the body
/// does not run; once the store may log in again, the same call runs once. Returns the refusal,
/// for the store's own finer check.
pub async fn server_refusing_the_store_fails_closed<F: Severable>(
    f: &F,
) -> Result<String, TestError> {
    let idem = Idem::new(f.store().clone());
    let runs = AtomicU32::new(0);
    charge(&idem, 1, &runs, || async {}).await.0.unwrap();
    f.allow(false).await;
    f.kill().await;
    let (refused, outcome) = charge(&idem, 2, &runs, || async {}).await;
    assert!(
        matches!(refused, Err(TestError::Store(_))),
        "fails closed: {refused:?}"
    );
    assert_eq!(outcome, CallOutcome::Refused);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the body did not run");
    f.allow(true).await;
    let (ran, outcome) = charge(&idem, 2, &runs, || async {}).await;
    assert_eq!(
        (ran.is_ok(), outcome),
        (true, CallOutcome::Completed),
        "{ran:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    refused
}
