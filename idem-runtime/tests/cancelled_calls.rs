//! S27 (issue 41 #1): a call cancelled before its body was first polled (a `timeout` around it
//! fired while its claim was in flight, or after the claim but before the first attempt) leaves
//! no unknown outcome of its own, on every store of this crate.
//!
//! The measurement of the issue, as a test: 120 calls of a `resend(false)` tool without
//! `verify`, each under `tokio::time::timeout` of 0–2 ms, while four other tasks use the same
//! store. A key whose body never ran must not be left ambiguous, and its next call must run it
//! (not answer `Error::Ambiguous`). Which calls get cut where depends on timing; that no key is
//! left ambiguous with nothing run does not: the count must be 0 under any timing.
//!
//! Before (the seed-1856 fix, which kept a call dropped in its claim as ambiguous): SQLite 10 to
//! 48 of 120 keys ambiguous with nothing run, PostgreSQL 14 (see the report of issue 41).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::time::Duration;

use idem_runtime::store::{OperationIds, RecordState};
use idem_runtime::{Classify, Error, Failure, Idem, IdempotencyKey, Records, Store, Tool};

mod servers;

const CALLS: u64 = 120;

#[derive(Debug)]
enum E {
    Idem(#[allow(dead_code)] Error),
}

impl Classify for E {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}

impl From<Error> for E {
    fn from(e: Error) -> Self {
        E::Idem(e)
    }
}

fn key(order: u64) -> IdempotencyKey {
    IdempotencyKey::derive("send_sms", &[("order", &order)])
}

/// A tool that cannot re-send (`resend(false)`, no `verify`): an unknown outcome of it is kept.
fn send_sms(idem: &Idem) -> Tool<'_> {
    Tool::new("send_sms")
        .idem(idem)
        .lease(Duration::from_secs(1))
        .max_attempts(1)
        .resend(false)
}

async fn call(idem: &Idem, order: u64, runs: &[AtomicU32]) -> Result<u64, E> {
    send_sms(idem)
        .side_effect(&[("order", &order)], &order, |_key| {
            runs[order as usize].fetch_add(1, SeqCst);
            async move {
                tokio::time::sleep(Duration::from_millis(3)).await;
                Ok::<_, E>(order)
            }
        })
        .await
}

/// What the timed-out calls left, as counted after their background ends were written.
#[derive(Debug, Default, PartialEq, Eq)]
struct Left {
    /// Keys whose body never ran, kept as ambiguous.
    ambiguous_without_run: u32,
    /// Keys whose body never ran, still running under no caller.
    running_without_run: u32,
    /// Keys whose body never ran whose next call was refused as ambiguous (or could not run).
    refused_next_call: u32,
}

async fn cancelled_calls_leave_no_unknown_outcome<S>(store: S) -> Left
where
    S: Store + Records + OperationIds,
{
    let store = Arc::new(store);
    let idem = Idem::new(Arc::clone(&store));
    let runs: Arc<Vec<AtomicU32>> = Arc::new((0..CALLS).map(|_| AtomicU32::new(0)).collect());
    // Four other tasks use the same store meanwhile, each with keys of its own.
    let stop = Arc::new(AtomicBool::new(false));
    let others: Vec<_> = (0..4u64)
        .map(|task| {
            let (idem, stop) = (idem.clone(), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(SeqCst) {
                    n += 1;
                    let order = 1_000_000 * (task + 1) + n;
                    let _ = Tool::new("busy")
                        .idem(&idem)
                        .side_effect(&[("order", &order)], &order, |_| async {
                            tokio::task::yield_now().await;
                            Ok::<_, E>(())
                        })
                        .await;
                }
            })
        })
        .collect();
    for order in 0..CALLS {
        // 0 to 2 ms, spread over the calls.
        let limit = Duration::from_micros(order * 733 % 2001);
        let _ = tokio::time::timeout(limit, call(&idem, order, &runs)).await;
    }
    stop.store(true, SeqCst);
    for task in others {
        task.await.unwrap();
    }
    // The dropped calls' ends are written in the background: wait (bounded) until no key is
    // running any more, then count; a key still running then is counted as such.
    let mut left = Left::default();
    for _ in 0..500 {
        let mut running = 0;
        for order in 0..CALLS {
            if let Some(rec) = Records::get(&*store, &key(order)).await.unwrap()
                && matches!(rec.state, RecordState::Running { .. })
            {
                running += 1;
            }
        }
        if running == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut ran = 0;
    for order in 0..CALLS {
        if runs[order as usize].load(SeqCst) > 0 {
            ran += 1;
            continue;
        }
        match Records::get(&*store, &key(order))
            .await
            .unwrap()
            .map(|r| r.state)
        {
            Some(RecordState::Ambiguous { .. }) => left.ambiguous_without_run += 1,
            Some(RecordState::Running { .. }) => left.running_without_run += 1,
            _ => {}
        }
    }
    // The next call of each key whose body never ran runs it.
    for order in 0..CALLS {
        if runs[order as usize].load(SeqCst) == 0 && call(&idem, order, &runs).await.is_err() {
            left.refused_next_call += 1;
        }
    }
    eprintln!(
        "S27: {CALLS} timed-out calls, {ran} bodies ran; with nothing run: {} ambiguous, {} running, \
         {} next calls refused",
        left.ambiguous_without_run, left.running_without_run, left.refused_next_call
    );
    left
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s27_timed_out_calls_leave_no_unknown_outcome_memory() {
    let left = cancelled_calls_leave_no_unknown_outcome(idem_runtime::MemoryStore::new()).await;
    assert_eq!(left, Left::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s27_timed_out_calls_leave_no_unknown_outcome_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = idem_runtime::SqliteStore::open(dir.path().join("idemkit.db")).unwrap();
    let left = cancelled_calls_leave_no_unknown_outcome(store).await;
    assert_eq!(left, Left::default());
}

/// A memory store whose first claim is applied at once but answered only after `late` (its
/// reply held up on the way back); every other operation answers as the memory store does.
struct FirstClaimAnsweredLate {
    inner: idem_runtime::MemoryStore,
    late: Duration,
    claims: AtomicU32,
}

#[async_trait::async_trait]
impl OperationIds for FirstClaimAnsweredLate {
    async fn operation_id(
        &self,
        name: &str,
        fresh: uuid::Uuid,
    ) -> Result<uuid::Uuid, idem_runtime::StoreError> {
        self.inner.operation_id(name, fresh).await
    }
}

impl Store for FirstClaimAnsweredLate {
    fn claim<'a>(
        &'a self,
        req: &'a idem_runtime::store::ClaimRequest<'_>,
    ) -> idem_runtime::store::StoreFuture<'a, idem_runtime::store::Claim> {
        idem_runtime::store::StoreFuture::boxed(async move {
            // Counted when sent (polled): an answer dropped unpolled was never asked.
            let first = self.claims.fetch_add(1, SeqCst) == 0;
            let answer = self.inner.claim(req).await;
            if first {
                tokio::time::sleep(self.late).await;
            }
            answer
        })
    }
    fn renew(
        &self,
        key: IdempotencyKey,
        token: idem_runtime::store::LeaseToken,
        lease: Duration,
    ) -> idem_runtime::store::StoreFuture<'_, idem_runtime::store::Written> {
        self.inner.renew(key, token, lease)
    }
    fn complete(
        &self,
        key: IdempotencyKey,
        token: idem_runtime::store::LeaseToken,
        outcome: idem_runtime::store::Outcome,
        ttl: Duration,
    ) -> idem_runtime::store::StoreFuture<'_, idem_runtime::store::Written> {
        self.inner.complete(key, token, outcome, ttl)
    }
    fn release(
        &self,
        key: IdempotencyKey,
        token: idem_runtime::store::LeaseToken,
    ) -> idem_runtime::store::StoreFuture<'_, idem_runtime::store::Written> {
        self.inner.release(key, token)
    }
    fn mark_ambiguous<'a>(
        &'a self,
        key: IdempotencyKey,
        token: idem_runtime::store::LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> idem_runtime::store::StoreFuture<'a, idem_runtime::store::Written> {
        self.inner.mark_ambiguous(key, token, note, ttl)
    }
    fn restore<'a>(
        &'a self,
        key: IdempotencyKey,
        token: idem_runtime::store::LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> idem_runtime::store::StoreFuture<'a, idem_runtime::store::Written> {
        self.inner.restore(key, token, note, ttl)
    }
}

/// Issue 41 (third wave's leftovers): a claim applied whose answer did not come back within the
/// store timeout is sent again under its own token, and is the same claim: the body runs once,
/// the outcome is stored, and no running record is left behind for a lease to expire (before:
/// the call failed with a store error and left its claim running, and the next call of the key
/// took it over as an expired holder's unknown outcome, `Error::Ambiguous` for this tool).
#[tokio::test(start_paused = true)]
async fn a_claim_answered_late_is_sent_again_under_its_token_and_leaves_no_orphan() {
    let store = Arc::new(FirstClaimAnsweredLate {
        inner: idem_runtime::MemoryStore::new(),
        late: Duration::from_secs(10),
        claims: AtomicU32::new(0),
    });
    let idem = Idem::builder()
        .store(Arc::clone(&store))
        .store_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let runs: Vec<AtomicU32> = (0..1).map(|_| AtomicU32::new(0)).collect();
    let first = call(&idem, 0, &runs).await;
    assert!(
        first.is_ok(),
        "the claim sent again is the same claim: {first:?}"
    );
    assert_eq!(runs[0].load(SeqCst), 1);
    assert_eq!(store.claims.load(SeqCst), 2, "sent twice, under one token");
    let rec = Records::get(&store.inner, &key(0)).await.unwrap().unwrap();
    assert!(
        matches!(rec.state, RecordState::Completed { .. }),
        "{rec:?}"
    );
    let again = call(&idem, 0, &runs).await;
    assert!(again.is_ok(), "the repeat replays: {again:?}");
    assert_eq!(runs[0].load(SeqCst), 1, "the body ran once");
}

mod needs_postgres {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn s27_timed_out_calls_leave_no_unknown_outcome_postgres() {
        let url = servers::server_url("IDEMKIT_TEST_POSTGRES_URL", "PostgreSQL");
        let table = servers::unique("s27");
        let store = idem_runtime::PostgresStore::builder(url)
            .schema("idemkit_test")
            .table(&table)
            .max_connections(8)
            .connect()
            .await
            .unwrap();
        let left = cancelled_calls_leave_no_unknown_outcome(store).await;
        assert_eq!(left, Left::default());
    }
}

mod needs_redis {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn s27_timed_out_calls_leave_no_unknown_outcome_redis() {
        let url = servers::server_url("IDEMKIT_TEST_REDIS_URL", "Redis");
        let store = idem_runtime::RedisStore::builder(url)
            .prefix(format!("{}:", servers::unique("s27")))
            .connect()
            .await
            .unwrap();
        let left = cancelled_calls_leave_no_unknown_outcome(store).await;
        assert_eq!(left, Left::default());
    }
}
