//! Trace validation on the real stores (issue 32): the store transitions of runs of the real
//! executor on SQLite, PostgreSQL and Redis, recorded by a wrapping store
//! (`model/traces.rs`'s `Recorder`), are checked to be behaviours of the model
//! (`model/protocol.rs`), as the memory store's are in `model.rs`. The runs are in real time
//! (a tick of 250 ms), whose ticks jitter: each trace is checked in its order, with any time
//! between its transitions (`validate_untimed`): every claim's answer, renewal, completion,
//! release and ambiguity mark, by which caller and whether the store applied it, must be one
//! the model allows at that point.
//!
//! The divergence it catches: a store that acknowledges renewals it never wrote (as a failover
//! that loses them does) lets a second caller take over while the first holder is told its
//! lease is renewed; the trace is rejected at the first holder's renewal after the takeover.
//!
//! PostgreSQL and Redis need `IDEMKIT_TEST_POSTGRES_URL` / `IDEMKIT_TEST_REDIS_URL` (their tests
//! are in `needs_postgres` and `needs_redis`, which `scripts/test.sh` leaves out where the server
//! is not installed); SQLite always runs.

#[allow(dead_code)]
#[path = "model/protocol.rs"]
mod protocol;
mod servers;
#[allow(dead_code)]
#[path = "model/traces.rs"]
mod traces;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::time::Duration;

use idem_runtime::store::{
    Claim, ClaimRequest, LeaseToken, OperationIds, Outcome, StoreFuture, Written,
};
use idem_runtime::{
    Classify, Error, Failure, Fingerprint, Idem, IdempotencyKey, PostgresStore, RedisStore,
    SqliteStore, Store, StoreError, Tool, Verified,
};
use uuid::Uuid;

use protocol::{Config, Exec, Faults, StoreKind};
use traces::{Event, Recorder, Seen, validate_untimed};

/// One tick of the model, in real time.
const TICK: Duration = Duration::from_millis(250);
const FIELDS: &[idem_runtime::KeyField<'static>] = &[("order", &1u64)];

fn ticks(n: u32) -> Duration {
    TICK * n
}

#[derive(Debug)]
struct E;
impl Classify for E {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}
impl From<Error> for E {
    fn from(_: Error) -> Self {
        E
    }
}

fn tool(idem: &Idem, lease: u32) -> Tool<'_> {
    Tool::new("send_sms")
        .idem(idem)
        .lease(ticks(lease))
        .max_attempts(2)
        .resend(false)
        .in_flight_wait(Duration::from_secs(60))
}

/// The model of these runs: two callers with leases of 3 and 6 ticks, a provider that does not
/// deduplicate, every fault allowed (a real run may stall or fail anywhere), no operator.
fn model(store: StoreKind, verifies: bool) -> Config {
    Config {
        leases: vec![3, 6],
        offsets: vec![0, 0],
        store,
        dedup: false,
        resend: false,
        verifies,
        max_attempts: 2,
        faults: Faults {
            crash: true,
            drop: true,
            store_errors: true,
            schedule_gives_up: true,
        },
        operator_actions: 0,
        exec: Exec::CODE,
    }
}

fn show(trace: &[Event]) -> String {
    trace
        .iter()
        .map(|e| format!("  t={} caller {} {:?}\n", e.tick, e.caller, e.seen))
        .collect()
}

/// A fresh store of one kind (its own file in `dir`, table or prefix).
trait Fresh: Store + OperationIds + Sized + 'static {
    async fn fresh(dir: &Path) -> Self;
    /// How the model sees its clock.
    const CLOCK: StoreKind;
}

impl Fresh for SqliteStore {
    async fn fresh(dir: &Path) -> Self {
        SqliteStore::open(dir.join(format!("{}.db", Uuid::new_v4().simple()))).unwrap()
    }
    const CLOCK: StoreKind = StoreKind::CallersClocks {
        cap_by_holders_lease: true,
    };
}

impl Fresh for PostgresStore {
    async fn fresh(_: &Path) -> Self {
        let url = servers::server_url("IDEMKIT_TEST_POSTGRES_URL", "PostgreSQL");
        PostgresStore::builder(url)
            .table(servers::unique("trace"))
            .connect()
            .await
            .expect("the store connects")
    }
    const CLOCK: StoreKind = StoreKind::OneClock;
}

impl Fresh for RedisStore {
    async fn fresh(_: &Path) -> Self {
        let url = servers::server_url("IDEMKIT_TEST_REDIS_URL", "Redis");
        RedisStore::builder(url)
            .prefix(format!("{}:", servers::unique("trace")))
            .connect()
            .await
            .expect("the store connects")
    }
    const CLOCK: StoreKind = StoreKind::OneClock;
}

/// S12/S7: a holder (lease 3 ticks) whose body takes 12 renews its lease; a second caller
/// (lease 6) arriving at 1 waits and replays. One message; the trace and what was sent.
/// (12, not fewer: on the store whose renewals are not written, several renewals must follow
/// the waiter's takeover however late a loaded machine makes it.)
async fn renewing_holder_and_waiter<S: Store + OperationIds + 'static>(
    inner: S,
) -> (Vec<Event>, u32) {
    let store = Arc::new(Recorder::wrap(inner, TICK, None));
    let idem = Idem::new(store.clone());
    let sent = Arc::new(AtomicU32::new(0));
    let body = |caller: u8, wait: u32| {
        let (sent, store) = (sent.clone(), store.clone());
        move |_key: IdempotencyKey| {
            let (sent, store) = (sent.clone(), store.clone());
            async move {
                tokio::time::sleep(ticks(wait)).await;
                store.effect(caller);
                Ok::<u32, E>(sent.fetch_add(1, SeqCst) + 1)
            }
        }
    };
    let a = tool(&idem, 3).side_effect(FIELDS, &(), body(0, 12));
    let b = async {
        tokio::time::sleep(ticks(1)).await;
        tool(&idem, 6).side_effect(FIELDS, &(), body(1, 0)).await
    };
    let _ = tokio::join!(a, b);
    (store.events(), sent.load(SeqCst))
}

/// `verify` answering from what was sent.
fn verify(
    sent: Arc<AtomicU32>,
) -> impl Fn(IdempotencyKey) -> std::future::Ready<Result<Verified<u32>, E>> + Send + Sync {
    move |_key| {
        std::future::ready(Ok(if sent.load(SeqCst) > 0 {
            Verified::Applied(0)
        } else {
            Verified::NotApplied
        }))
    }
}

/// S8/S19: a holder dies after its claim (lease 3 ticks); a caller with `verify` takes the
/// record over at 4, verifies (not applied), sends, completes.
async fn takeover_of_a_dead_holder<S: Store + OperationIds + 'static>(
    inner: S,
) -> (Vec<Event>, u32) {
    let store = Arc::new(Recorder::wrap(inner, TICK, None));
    let idem = Idem::new(store.clone());
    let key = IdempotencyKey::derive("send_sms", FIELDS);
    let req = ClaimRequest::new(
        key,
        "send_sms",
        Fingerprint::of(&()).unwrap(),
        LeaseToken::new(),
        ticks(3),
        Duration::from_secs(3600),
    );
    store.claim(&req).await.unwrap();
    tokio::time::sleep(ticks(4)).await;
    let sent = Arc::new(AtomicU32::new(0));
    let (s2, log) = (sent.clone(), store.clone());
    let _ = tool(&idem, 6)
        .verify(verify(sent.clone()))
        .side_effect(FIELDS, &(), move |_key| {
            let s2 = s2.clone();
            log.effect(1);
            async move { Ok::<u32, E>(s2.fetch_add(1, SeqCst) + 1) }
        })
        .await;
    (store.events(), sent.load(SeqCst))
}

/// S22: caller 0 (lease 3 ticks, `verify`) whose claim's reply comes at 4; caller 1 (lease 6,
/// `verify`) from 3.5. One message.
async fn late_claim_reply<S: Store + OperationIds + 'static>(inner: S) -> (Vec<Event>, u32) {
    let store = Arc::new(Recorder::wrap(inner, TICK, Some(ticks(4))));
    let idem = Idem::new(store.clone());
    let sent = Arc::new(AtomicU32::new(0));
    let body = |caller: u8| {
        let (sent, store) = (sent.clone(), store.clone());
        move |_key: IdempotencyKey| {
            let sent = sent.clone();
            store.effect(caller);
            async move { Ok::<u32, E>(sent.fetch_add(1, SeqCst) + 1) }
        }
    };
    let a = tool(&idem, 3)
        .verify(verify(sent.clone()))
        .side_effect(FIELDS, &(), body(0));
    let b = async {
        tokio::time::sleep(ticks(7) / 2).await;
        tool(&idem, 6)
            .verify(verify(sent.clone()))
            .side_effect(FIELDS, &(), body(1))
            .await
    };
    let _ = tokio::join!(a, b);
    (store.events(), sent.load(SeqCst))
}

/// Every scenario on a fresh store of kind `S`: one message each, and a trace the model allows.
async fn real_runs_are_model_behaviours<S: Fresh>(name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let store = S::fresh(dir.path()).await;
    let (trace, sent) = renewing_holder_and_waiter(store).await;
    check(
        name,
        "renewing holder and waiter (S12)",
        &trace,
        sent,
        model(S::CLOCK, false),
    );
    let (trace, sent) = takeover_of_a_dead_holder(S::fresh(dir.path()).await).await;
    check(
        name,
        "takeover of a dead holder (S19)",
        &trace,
        sent,
        model(S::CLOCK, true),
    );
    let (trace, sent) = late_claim_reply(S::fresh(dir.path()).await).await;
    check(
        name,
        "claim reply after the lease (S22)",
        &trace,
        sent,
        model(S::CLOCK, true),
    );

    fn check(store: &str, what: &str, trace: &[Event], sent: u32, model: Config) {
        assert_eq!(sent, 1, "{store}, {what}: one message\n{}", show(trace));
        let visited = validate_untimed(&model, trace)
            .unwrap_or_else(|d| panic!("{store}, {what}: {d:?}\n{}", show(trace)));
        println!(
            "TRACE {store}, {what}: {} transitions, a model behaviour ({visited} model states \
             searched)\n{}",
            trace.len(),
            show(trace)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_sqlite_real_runs_are_model_behaviours() {
    real_runs_are_model_behaviours::<SqliteStore>("sqlite").await;
}

mod needs_postgres {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn trace_postgres_real_runs_are_model_behaviours() {
        real_runs_are_model_behaviours::<PostgresStore>("postgres").await;
    }
}

mod needs_redis {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn trace_redis_real_runs_are_model_behaviours() {
        real_runs_are_model_behaviours::<RedisStore>("redis").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn trace_redis_renewals_acknowledged_but_not_written_is_rejected() {
        broken_store_is_rejected::<RedisStore>("redis").await;
    }
}

/// A deliberately broken store: it answers every renewal `Applied` without writing it (as a
/// failover that loses acknowledged renewals does). Everything else is the real store's.
struct RenewalsNotWritten<S>(S);

impl<S: Store> Store for RenewalsNotWritten<S> {
    fn claim<'a>(&'a self, req: &'a ClaimRequest<'_>) -> StoreFuture<'a, Claim> {
        self.0.claim(req)
    }
    fn renew(&self, _: IdempotencyKey, _: LeaseToken, _: Duration) -> StoreFuture<'_, Written> {
        StoreFuture::ready(Ok(Written::Applied))
    }
    fn complete(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        outcome: Outcome,
        ttl: Duration,
    ) -> StoreFuture<'_, Written> {
        self.0.complete(key, token, outcome, ttl)
    }
    fn release(&self, key: IdempotencyKey, token: LeaseToken) -> StoreFuture<'_, Written> {
        self.0.release(key, token)
    }
    fn mark_ambiguous<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        self.0.mark_ambiguous(key, token, note, ttl)
    }
}

#[async_trait::async_trait]
impl<S: OperationIds> OperationIds for RenewalsNotWritten<S> {
    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError> {
        self.0.operation_id(name, fresh).await
    }
}

/// The divergence trace validation catches: on a store whose renewals are acknowledged but
/// never written, the renewing holder's lease runs out in the store, the waiter takes the key
/// over, and the holder is told its next renewal applied: no behaviour of the model, which
/// rejects the trace at that renewal. (The same run on the real store is accepted above.)
async fn broken_store_is_rejected<S: Fresh>(name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let store = S::fresh(dir.path()).await;
    let (trace, _) = renewing_holder_and_waiter(RenewalsNotWritten(store)).await;
    print!("{}", show(&trace));
    let d = validate_untimed(&model(S::CLOCK, false), &trace)
        .expect_err("a trace with a renewal applied after a takeover is a model behaviour");
    println!(
        "TRACE {name} with renewals acknowledged but not written: rejected at transition {} \
         ({:?}), after {} model states explained the trace before it",
        d.at, d.event, d.candidates
    );
    assert_eq!(
        (d.event.caller, d.event.seen),
        (0, Seen::Renew { applied: true }),
        "{d:?}\n{}",
        show(&trace)
    );
    assert!(
        trace[..d.at]
            .iter()
            .any(|e| e.caller == 1 && e.seen == Seen::Acquired { takeover: true }),
        "after the waiter's takeover\n{}",
        show(&trace)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_sqlite_renewals_acknowledged_but_not_written_is_rejected() {
    broken_store_is_rejected::<SqliteStore>("sqlite").await;
}
