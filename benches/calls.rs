//! What a call through the attributes costs, with the memory store and an empty body:
//!
//! - `#[side_effect]` against a hand-written equivalent doing the same necessary work (derive the
//!   key, SHA-256 of the other arguments' JSON, claim in a `Mutex<HashMap>`, run the body,
//!   serialize the outcome, complete), and against the same workload on the memory store of the
//!   `idempotent` crate (a peer library; 0.3.0, its newest release that builds on Rust 1.95:
//!   1.0.0, 1.1.0 and 2.0.0 declare rust-version 1.98); and the hand-written map against the
//!   same map keeping what the guarantees need and nothing of the protocol (a lease, a
//!   time-to-live from the completion, the completion fenced, the outcome sealed): what the
//!   guarantees cost by themselves, and the wrapped call against that;
//! - `#[read_only]` against the bare function, and against a read written by hand that does what a
//!   read needs (a span, the time its retries are bounded from, a retry loop by failure kind);
//! - 1,000 concurrent callers of one key: time until all are answered, body runs counted (exactly
//!   one), against an in-process single-flight (`tokio::sync::OnceCell`) around the same body;
//! - a lost reply settled by `verify` (S19): the body answers `Ambiguous`, the verify function
//!   answers `Applied`, the record completes with what it found; against the plain call, the
//!   ratio is what a verification costs on top of a call.
//!
//! The two pairs with a goal (the side effect against the hand-written map, the read against the
//! hand-written read), and the pairs with the map that keeps what the guarantees need, are then
//! run in 100 interleaved rounds of a few milliseconds each, and
//! reported by the median of the rounds' ratios with their range (this VM swings between a fast
//! and a slow mode, ~1.7× apart, for longer than a round: both sides of a round share it).
//!
//! Run: `cargo bench --bench calls` (or `benches/run.sh` for everything).

mod support;

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::Criterion;
use idemkit::{
    Classify, Failure, Idem, IdempotencyKey, MemoryStore, Verified, read_only, side_effect,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use support::{CHUNK, Pair, Selected, chunked, record, summary};

#[derive(Debug)]
enum BenchError {
    KeyReuse,
    InFlight,
    /// The provider acted, its reply was lost.
    LostReply,
    #[allow(dead_code)]
    Idem(String),
}

impl Classify for BenchError {
    fn classify(&self) -> Failure {
        match self {
            BenchError::LostReply => Failure::Ambiguous,
            _ => Failure::Permanent,
        }
    }
}

impl From<idemkit::Error> for BenchError {
    fn from(e: idemkit::Error) -> Self {
        BenchError::Idem(e.to_string())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    order_id: u64,
    amount_cents: u64,
}

const TTL: Duration = Duration::from_secs(24 * 3600);

/// The body every variant runs: nothing but making its result.
async fn body(order_id: u64, amount_cents: u64) -> Result<Receipt, BenchError> {
    Ok(Receipt {
        order_id,
        amount_cents,
    })
}

/// The subject: what a user writes.
#[side_effect(key = "customer_id, order_id")]
async fn charge(
    customer_id: &str,
    order_id: u64,
    amount_cents: u64,
) -> Result<Receipt, BenchError> {
    let _ = customer_id;
    body(order_id, amount_cents).await
}

/// The same call to a provider that cannot deduplicate, whose reply is lost every time: settled
/// by asking it (S19), not by sending again.
#[side_effect(key = "customer_id, order_id", verify = was_charged)]
async fn charge_lost_reply(
    customer_id: &str,
    order_id: u64,
    amount_cents: u64,
) -> Result<Receipt, BenchError> {
    let _ = (customer_id, order_id, amount_cents);
    Err(BenchError::LostReply)
}

/// "Did order `order_id` get charged?": it did.
async fn was_charged(
    customer_id: &str,
    order_id: u64,
    amount_cents: u64,
) -> Result<Verified<Receipt>, BenchError> {
    let _ = customer_id;
    Ok(Verified::Applied(Receipt {
        order_id,
        amount_cents,
    }))
}

/// The other arguments, as a hand-writer would fingerprint them (one field: already canonical).
#[derive(Serialize)]
struct ChargeArgs {
    amount_cents: u64,
}

enum HandState {
    Running(u64),
    Completed(Vec<u8>),
}

struct HandRecord {
    fingerprint: [u8; 32],
    state: HandState,
}

/// The hand-written equivalent: a map behind a mutex, claim → body → complete.
#[derive(Default)]
struct HandStore {
    records: Mutex<HashMap<[u8; 16], HandRecord>>,
    tokens: AtomicU64,
}

/// The key and the other arguments' fingerprint, as both hand-written maps make them.
fn key_and_fingerprint(
    customer_id: &str,
    order_id: u64,
    amount_cents: u64,
) -> (IdempotencyKey, [u8; 32]) {
    let key = IdempotencyKey::derive(
        "charge",
        &[("customer_id", &customer_id), ("order_id", &order_id)],
    );
    let args = serde_json::to_vec(&ChargeArgs { amount_cents }).expect("serializes");
    (key, Sha256::digest(&args).into())
}

/// What a hand-written map answers a claim that finds a live record of another holder: a
/// different payload under the key is refused, a completed one replayed, a running one waited
/// for (here: refused as in flight).
fn answer_existing(
    fingerprint: &[u8; 32],
    state: &HandState,
    claimed: [u8; 32],
) -> Result<Receipt, BenchError> {
    if *fingerprint != claimed {
        return Err(BenchError::KeyReuse);
    }
    match state {
        HandState::Completed(outcome) => Ok(serde_json::from_slice(outcome).expect("deserializes")),
        HandState::Running(_) => Err(BenchError::InFlight),
    }
}

async fn charge_by_hand(
    store: &HandStore,
    customer_id: &str,
    order_id: u64,
    amount_cents: u64,
) -> Result<Receipt, BenchError> {
    let (key, fingerprint) = key_and_fingerprint(customer_id, order_id, amount_cents);
    let token = store.tokens.fetch_add(1, Ordering::Relaxed);
    match store.records.lock().unwrap().entry(*key.as_bytes()) {
        Entry::Occupied(rec) => {
            let rec = rec.get();
            return answer_existing(&rec.fingerprint, &rec.state, fingerprint);
        }
        Entry::Vacant(slot) => {
            slot.insert(HandRecord {
                fingerprint,
                state: HandState::Running(token),
            });
        }
    }
    let result = body(order_id, amount_cents).await;
    let mut records = store.records.lock().unwrap();
    match &result {
        Ok(receipt) => {
            let outcome = serde_json::to_vec(receipt).expect("serializes");
            if let Some(rec) = records.get_mut(key.as_bytes())
                && matches!(rec.state, HandState::Running(t) if t == token)
            {
                rec.state = HandState::Completed(outcome);
            }
        }
        Err(_) => {
            records.remove(key.as_bytes());
        }
    }
    result
}

/// A record of [`KeptStore`]: what the hand-written map keeps, and what the protocol's guarantees
/// need beside it (a lease, a time-to-live from the completion, the tool's name).
struct KeptRecord {
    /// For operators, as the protocol's records name their tool; not read by a call.
    #[allow(dead_code)]
    tool: &'static str,
    fingerprint: [u8; 32],
    state: HandState,
    lease_until: tokio::time::Instant,
    expires_at: tokio::time::Instant,
}

/// The hand-written map, keeping what the protocol keeps for its guarantees that the map does
/// not: a lease timed from the claim (S12, S22), a record that expires a time-to-live after its
/// completion (one clock read at the claim, one at the completion), the completion fenced by the
/// lease's token and the record's life (S11), and the outcome sealed so that a replay that does
/// not decode is told from a damaged record (S16 against S9). What it still does not keep: a
/// tenant, takeovers, wake-ups of waiters, a span, a call dropped midway.
#[derive(Default)]
struct KeptStore {
    records: Mutex<HashMap<[u8; 16], KeptRecord>>,
    tokens: AtomicU64,
}

const LEASE: Duration = Duration::from_secs(30);

async fn charge_kept_by_hand(
    store: &KeptStore,
    customer_id: &str,
    order_id: u64,
    amount_cents: u64,
) -> Result<Receipt, BenchError> {
    let (key, fingerprint) = key_and_fingerprint(customer_id, order_id, amount_cents);
    let token = store.tokens.fetch_add(1, Ordering::Relaxed);
    let now = tokio::time::Instant::now();
    let running = KeptRecord {
        tool: "charge",
        fingerprint,
        state: HandState::Running(token),
        lease_until: now + LEASE,
        expires_at: now + TTL,
    };
    match store.records.lock().unwrap().entry(*key.as_bytes()) {
        // Live, and not a holder whose lease ended (that one is taken over, below).
        Entry::Occupied(rec)
            if rec.get().expires_at > now
                && !(matches!(rec.get().state, HandState::Running(_))
                    && rec.get().fingerprint == fingerprint
                    && rec.get().lease_until <= now) =>
        {
            let rec = rec.get();
            return answer_existing(&rec.fingerprint, &rec.state, fingerprint);
        }
        Entry::Occupied(mut expired_or_abandoned) => {
            expired_or_abandoned.insert(running);
        }
        Entry::Vacant(slot) => {
            slot.insert(running);
        }
    }
    let result = body(order_id, amount_cents).await;
    let sealed = match &result {
        Ok(receipt) => {
            let mut outcome = serde_json::to_vec(receipt).expect("serializes");
            seal(&mut outcome, std::any::type_name::<Receipt>());
            Some(outcome)
        }
        Err(_) => None,
    };
    let now = tokio::time::Instant::now();
    let mut records = store.records.lock().unwrap();
    match sealed {
        Some(outcome) => {
            if let Some(rec) = records.get_mut(key.as_bytes())
                && rec.expires_at > now
                && matches!(rec.state, HandState::Running(t) if t == token)
            {
                rec.state = HandState::Completed(outcome);
                rec.expires_at = now + TTL;
            }
        }
        None => {
            records.remove(key.as_bytes());
        }
    }
    result
}

/// A 32-bit digest of the type's name and the JSON, appended as whitespace (two bits a
/// character), so that the outcome is still the same JSON: the executor's seal, written out by
/// hand (the crate keeps its writer private; the bench checks at its start that
/// `Outcome::sealed_for` accepts what this writes).
fn seal(json: &mut Vec<u8>, type_name: &str) {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mix = |h: u64, w: u64| (h ^ w).wrapping_mul(K).rotate_left(29);
    let mut h = K;
    for part in [type_name.as_bytes(), json.as_slice()] {
        let mut chunks = part.chunks_exact(8);
        for c in &mut chunks {
            h = mix(h, u64::from_le_bytes(c.try_into().unwrap()));
        }
        let last = chunks
            .remainder()
            .iter()
            .rev()
            .fold(0u64, |w, &b| w << 8 | u64::from(b));
        h = mix(mix(h, last), part.len() as u64);
    }
    let digest = ((h ^ (h >> 32)).wrapping_mul(K) >> 32) as u32;
    let mut tail = *b"\n\t                ";
    for (i, c) in tail[2..].iter_mut().enumerate() {
        *c = b" \t\r\n"[(digest >> (30 - 2 * i)) as usize & 3];
    }
    json.extend_from_slice(&tail);
}

/// `n` calls of the hand-written map that keeps what the guarantees need, on `store`.
async fn kept_by_hand_on(store: &KeptStore, fresh: &impl Fn() -> u64, n: u64) {
    for _ in 0..n {
        black_box(
            charge_kept_by_hand(store, "cus_1", fresh(), 4200)
                .await
                .unwrap(),
        );
    }
}

/// The same workload on the peer library's memory store (an actor task behind a channel).
async fn charge_on_peer(
    store: &idempotent::store::memory::MemoryStore,
    customer_id: &str,
    order_id: u64,
    amount_cents: u64,
) -> Result<Receipt, BenchError> {
    use idempotent::fingerprint::{DefaultFingerprintStrategy, FingerprintStrategy};
    use idempotent::store::{IdempotencyStore, InsertResult};
    use idempotent::{CachedResponse, IdempotencyEntry, Metadata, entry::ExistingEntry};

    let key = IdempotencyKey::derive(
        "charge",
        &[("customer_id", &customer_id), ("order_id", &order_id)],
    );
    let key = idempotent::IdempotencyKey::new(key.as_str()).expect("a valid key");
    let args = serde_json::to_vec(&ChargeArgs { amount_cents }).expect("serializes");
    let fingerprint = DefaultFingerprintStrategy.compute("charge", &args);
    let entry = IdempotencyEntry::new(fingerprint, TTL);
    let token = match store.try_insert(&key, entry).await.expect("infallible") {
        InsertResult::Claimed { fencing_token } => fencing_token,
        InsertResult::Exists(ExistingEntry::Completed(done)) => {
            if !done.fingerprint_matches(fingerprint) {
                return Err(BenchError::KeyReuse);
            }
            return Ok(serde_json::from_slice(&done.response().body).expect("deserializes"));
        }
        InsertResult::Exists(ExistingEntry::Processing(_)) => return Err(BenchError::InFlight),
    };
    let result = body(order_id, amount_cents).await;
    match &result {
        Ok(receipt) => {
            let outcome = serde_json::to_vec(receipt).expect("serializes");
            let done = IdempotencyEntry::new(fingerprint, TTL).complete(CachedResponse {
                status_code: 200,
                metadata: Metadata::default(),
                body: outcome.into(),
            });
            store.complete(&key, done, token).await.expect("infallible");
        }
        Err(_) => store.remove(&key).await.expect("infallible"),
    }
    result
}

#[read_only]
async fn balance(customer_id: &str) -> Result<u64, BenchError> {
    Ok(black_box(customer_id).len() as u64)
}

async fn balance_bare(customer_id: &str) -> Result<u64, BenchError> {
    Ok(black_box(customer_id).len() as u64)
}

/// What a read-only call needs, written by hand around the bare function: a span, the time its
/// retries are bounded from (one clock read), and a retry loop by failure kind.
async fn balance_by_hand(customer_id: &str) -> Result<u64, BenchError> {
    const MAX_ATTEMPTS: u32 = 3;
    const BUDGET: Duration = Duration::from_secs(30);
    let span = tracing::info_span!(
        "balance",
        attempts = tracing::field::Empty,
        outcome = tracing::field::Empty
    );
    let started = tokio::time::Instant::now();
    let mut attempts = 0;
    loop {
        attempts += 1;
        match balance_bare(customer_id).await {
            Ok(v) => {
                span.record("attempts", attempts);
                span.record("outcome", "completed");
                return Ok(v);
            }
            Err(e)
                if attempts < MAX_ATTEMPTS
                    && e.classify() != Failure::Permanent
                    && started.elapsed() < BUDGET =>
            {
                tokio::time::sleep(Duration::from_millis(100) * attempts).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// How often the body of `settle` ran.
static SETTLE_RUNS: AtomicU32 = AtomicU32::new(0);
/// How long `settle`'s body takes: a fast provider.
const SETTLE_BODY: Duration = Duration::from_millis(1);

async fn settle_body(job_id: u64) -> Result<u64, BenchError> {
    SETTLE_RUNS.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(SETTLE_BODY).await;
    Ok(job_id)
}

#[side_effect(key = "job_id")]
async fn settle(job_id: u64) -> Result<u64, BenchError> {
    settle_body(job_id).await
}

const CALLERS: usize = 1000;

/// Interleaved rounds after criterion's runs of a pair with a goal (`support::interleave`): a
/// round runs each side for a few milliseconds, so the machine's slow spells, which on a shared
/// VM last longer than that, weigh on both. The summary reports the pair by the median of the
/// rounds' ratios and their range; criterion's figures, one side measured seconds after the
/// other, swung the ratio of unchanged code by half on this machine.
const ROUNDS: usize = 100;

/// `n` calls of [`charge_lost_reply`], each settled by its verify function.
fn verified_calls(
    rt: &tokio::runtime::Runtime,
    fresh: impl Fn() -> u64,
    n: u64,
) -> (Duration, Idem) {
    let idem = Idem::new(MemoryStore::new());
    let start = Instant::now();
    rt.block_on(idem.scope(async {
        for _ in 0..n {
            black_box(charge_lost_reply("cus_1", fresh(), 4200).await.unwrap());
        }
    }));
    (start.elapsed(), idem)
}

/// `n` calls of the wrapped tool on a fresh memory store, each with a key of its own: their time,
/// and the store, for the caller to drop outside the timing.
fn wrapped_calls(
    rt: &tokio::runtime::Runtime,
    fresh: impl Fn() -> u64,
    n: u64,
) -> (Duration, Idem) {
    timed_on(rt, Idem::new(MemoryStore::new()), async |idem| {
        wrapped_on(idem, &fresh, n).await
    })
}

/// How long `calls` on `store` took; the store is handed back, to be dropped outside the timing.
fn timed_on<S>(
    rt: &tokio::runtime::Runtime,
    store: S,
    calls: impl AsyncFnOnce(&S),
) -> (Duration, S) {
    let start = Instant::now();
    rt.block_on(calls(&store));
    (start.elapsed(), store)
}

/// `n` calls of the wrapped tool on `idem`, each with a key of its own.
async fn wrapped_on(idem: &Idem, fresh: &impl Fn() -> u64, n: u64) {
    idem.scope(async {
        for _ in 0..n {
            black_box(charge("cus_1", fresh(), 4200).await.unwrap());
        }
    })
    .await;
}

/// `n` calls of the hand-written map on `hand`, each with a key of its own.
async fn by_hand_on(hand: &HandStore, fresh: &impl Fn() -> u64, n: u64) {
    for _ in 0..n {
        black_box(charge_by_hand(hand, "cus_1", fresh(), 4200).await.unwrap());
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let next = AtomicU64::new(0);
    let fresh = || next.fetch_add(1, Ordering::Relaxed);

    // The three variants give the same receipts, and replay them.
    rt.block_on(async {
        let idem = Idem::new(MemoryStore::new());
        let hand = HandStore::default();
        let kept = KeptStore::default();
        let peer = idempotent::store::memory::MemoryStore::new(1024, Duration::from_secs(60));
        for _ in 0..2 {
            let want = Receipt {
                order_id: 7,
                amount_cents: 4200,
            };
            assert_eq!(idem.scope(charge("cus_1", 7, 4200)).await.unwrap(), want);
            assert_eq!(charge_by_hand(&hand, "cus_1", 7, 4200).await.unwrap(), want);
            assert_eq!(
                charge_kept_by_hand(&kept, "cus_1", 7, 4200).await.unwrap(),
                want
            );
            // Its seal is the executor's: the crate's own check accepts it.
            {
                let records = kept.records.lock().unwrap();
                let HandState::Completed(sealed) = &records.values().next().unwrap().state else {
                    panic!("the kept map completed the call")
                };
                assert!(idemkit::store::Outcome::sealed_for(
                    sealed,
                    std::any::type_name::<Receipt>()
                ));
            }
            assert_eq!(charge_on_peer(&peer, "cus_1", 7, 4200).await.unwrap(), want);
        }
    });

    // Each store serves at most CHUNK calls and is dropped outside the timing: the figure is the
    // cost of a call, not of a hash table grown to millions of records by criterion's batches.
    let mut group = c.benchmark_group("side-effect call, memory store, empty body");
    let subject = "#[side_effect] call (idemkit MemoryStore)";
    let ours = |n: u64| chunked(n, |n| wrapped_calls(&rt, fresh, n));
    let baseline = "hand-written (Mutex<HashMap>)";
    let by_hand = |n: u64| {
        chunked(n, |n| {
            timed_on(&rt, HandStore::default(), async |hand| {
                by_hand_on(hand, &fresh, n).await
            })
        })
    };
    let kept = "hand-written, keeping what the guarantees need (lease, ttl, fencing, seal)";
    let kept_by_hand = |n: u64| {
        chunked(n, |n| {
            timed_on(&rt, KeptStore::default(), async |store| {
                kept_by_hand_on(store, &fresh, n).await
            })
        })
    };
    let both = Selected::default();
    let with_kept = Selected::default();
    group.bench_function(subject, |b| {
        both.subject();
        with_kept.subject();
        b.iter_custom(|iters| record(subject, iters, ours(iters)))
    });
    let kept_and_map = Selected::default();
    group.bench_function(baseline, |b| {
        both.baseline();
        kept_and_map.baseline();
        b.iter_custom(|iters| record(baseline, iters, by_hand(iters)))
    });
    group.bench_function(kept, |b| {
        with_kept.baseline();
        kept_and_map.subject();
        b.iter_custom(|iters| record(kept, iters, kept_by_hand(iters)))
    });
    let name = "peer: idempotent 0.3.0 MemoryStore";
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let took = chunked(iters, |n| {
                let _guard = rt.enter();
                let peer =
                    idempotent::store::memory::MemoryStore::new(1024, Duration::from_secs(60));
                let start = Instant::now();
                rt.block_on(async {
                    for _ in 0..n {
                        black_box(charge_on_peer(&peer, "cus_1", fresh(), 4200).await.unwrap());
                    }
                });
                (start.elapsed(), peer)
            });
            record(name, iters, took)
        })
    });
    group.finish();
    if both.all() {
        support::interleave(subject, baseline, ROUNDS, CHUNK, &ours, &by_hand);
    }
    if with_kept.all() {
        support::interleave(subject, kept, ROUNDS, CHUNK, &ours, &kept_by_hand);
    }
    if kept_and_map.all() {
        support::interleave(kept, baseline, ROUNDS, CHUNK, &kept_by_hand, &by_hand);
    }

    // What settling a lost reply by `verify` adds to a call.
    rt.block_on(async {
        let idem = Idem::new(MemoryStore::new());
        let (result, info) =
            idemkit::scope::observe(idem.scope(charge_lost_reply("cus_1", 1, 4200))).await;
        assert_eq!(result.unwrap().order_id, 1);
        assert!(
            info.unwrap().verified,
            "the lost reply was settled by verify"
        );
    });
    let mut group = c.benchmark_group("lost reply settled by verify, memory store");
    let name = "#[side_effect] call, lost reply settled by verify";
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            record(
                name,
                iters,
                chunked(iters, |n| verified_calls(&rt, fresh, n)),
            )
        })
    });
    group.bench_function(subject, |b| {
        b.iter_custom(|iters| record(subject, iters, ours(iters)))
    });
    group.finish();

    #[cfg(feature = "metrics")]
    metrics_rows(c, &rt, &next);

    let mut group = c.benchmark_group("read-only call");
    let idem = Idem::new(MemoryStore::new());
    // One way of reading per closure: the same loop around each function (a macro, not a helper
    // taking a closure: the call must stay what is timed, not boxed).
    macro_rules! reads {
        ($read:ident) => {
            |n: u64| {
                let start = Instant::now();
                rt.block_on(idem.scope(async {
                    for _ in 0..n {
                        black_box($read(black_box("cus_1")).await.unwrap());
                    }
                }));
                start.elapsed()
            }
        };
    }
    let (ours, bare, by_hand) = (
        reads!(balance),
        reads!(balance_bare),
        reads!(balance_by_hand),
    );
    let subject = "#[read_only] call";
    let baseline = "hand-written read (span, start time, retry loop)";
    let both = Selected::default();
    group.bench_function(subject, |b| {
        both.subject();
        b.iter_custom(|iters| record(subject, iters, ours(iters)))
    });
    let name = "bare function";
    group.bench_function(name, |b| {
        b.iter_custom(|iters| record(name, iters, bare(iters)))
    });
    group.bench_function(baseline, |b| {
        both.baseline();
        b.iter_custom(|iters| record(baseline, iters, by_hand(iters)))
    });
    group.finish();
    if both.all() {
        support::interleave(subject, baseline, ROUNDS, 16 * CHUNK, &ours, &by_hand);
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("1,000 concurrent callers of one key");
    group.sample_size(10);
    let name = "1,000 callers, #[side_effect] (MemoryStore)";
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                let idem = Idem::new(MemoryStore::new());
                let job = fresh();
                let before = SETTLE_RUNS.load(Ordering::SeqCst);
                let start = Instant::now();
                rt.block_on(async {
                    let tasks: Vec<_> = (0..CALLERS)
                        .map(|_| {
                            let idem = idem.clone();
                            tokio::spawn(async move { idem.scope(settle(job)).await })
                        })
                        .collect();
                    for t in tasks {
                        assert_eq!(t.await.unwrap().unwrap(), job);
                    }
                });
                took += start.elapsed();
                let runs = SETTLE_RUNS.load(Ordering::SeqCst) - before;
                assert_eq!(
                    runs, 1,
                    "{CALLERS} callers of one key ran the body {runs} times"
                );
            }
            record(name, iters, took)
        })
    });
    let name = "1,000 callers, single-flight (OnceCell)";
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                let cell = Arc::new(tokio::sync::OnceCell::new());
                let job = fresh();
                let before = SETTLE_RUNS.load(Ordering::SeqCst);
                let start = Instant::now();
                rt.block_on(async {
                    let tasks: Vec<_> = (0..CALLERS)
                        .map(|_| {
                            let cell = cell.clone();
                            tokio::spawn(async move {
                                *cell.get_or_try_init(|| settle_body(job)).await.unwrap()
                            })
                        })
                        .collect();
                    for t in tasks {
                        assert_eq!(t.await.unwrap(), job);
                    }
                });
                took += start.elapsed();
                assert_eq!(SETTLE_RUNS.load(Ordering::SeqCst) - before, 1);
            }
            record(name, iters, took)
        })
    });
    group.finish();
}

/// With the `metrics` feature (`cargo bench --bench calls --features metrics -- metrics`): the
/// same wrapped call with no recorder installed (what a program that never installs one pays;
/// `benches/run.sh` sets it beside the call built without the feature), and with a Prometheus
/// recorder in force (what counting costs).
#[cfg(feature = "metrics")]
fn metrics_rows(c: &mut Criterion, rt: &tokio::runtime::Runtime, next: &AtomicU64) {
    let mut group = c.benchmark_group("side-effect call, metrics feature");
    let fresh = || next.fetch_add(1, Ordering::Relaxed);
    let calls = |n: u64| wrapped_calls(rt, fresh, n);
    let name = "#[side_effect] call, metrics feature, no recorder";
    group.bench_function(name, |b| {
        b.iter_custom(|iters| record(name, iters, chunked(iters, calls)))
    });
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let name = "#[side_effect] call, metrics feature, Prometheus recorder";
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            // A local recorder, in force on this thread (the runtime's) while the calls run.
            let took = metrics::with_local_recorder(&recorder, || chunked(iters, calls));
            record(name, iters, took)
        })
    });
    group.finish();
    let scrape = recorder.handle().render();
    assert!(
        scrape.contains(
            "idemkit_calls_total{tool=\"charge\",kind=\"side_effect\",outcome=\"completed\"}"
        ),
        "the recorder counted the calls:\n{scrape}"
    );
}

/// `IDEMKIT_COUNT=<variant>:<n>` (what `benches/instructions.sh` runs under callgrind): one
/// call of the variant to warm up, then `n` calls, and nothing else: no criterion, no summary.
/// The script counts two values of `n` and divides the difference, so what does not repeat per
/// call (the process, the runtime, the warm-up) drops out. Variants: `wrapped` (the
/// `#[side_effect]` call, a fresh key each), `hand` (the hand-written map, a fresh key each),
/// `kept` (the hand-written map keeping what the guarantees need, a fresh key each), `replay` and
/// `hand-replay` (one key, completed once, asked again), `verified` (a lost reply
/// settled by `verify`), `read` (the `#[read_only]` call) and `hand-read`; and, for a sampling
/// profiler rather than callgrind, `wrapped-rounds`, `kept-rounds` and `hand-rounds` (`n` rounds of CHUNK calls
/// on fresh stores, as criterion's batches run them).
fn count_mode() -> bool {
    let Ok(spec) = std::env::var("IDEMKIT_COUNT") else {
        return false;
    };
    let (what, n) = spec
        .split_once(':')
        .expect("IDEMKIT_COUNT=<variant>:<calls>");
    let n: u64 = n.parse().expect("IDEMKIT_COUNT's calls: a number");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let next = AtomicU64::new(0);
    let fresh = || next.fetch_add(1, Ordering::Relaxed);
    let idem = Idem::new(MemoryStore::new());
    let hand = HandStore::default();
    rt.block_on(idem.scope(async {
        match what {
            "wrapped" | "replay" => {
                let fixed = what == "replay";
                black_box(charge("cus_1", 0, 4200).await.unwrap());
                for _ in 0..n {
                    let order = if fixed { 0 } else { fresh() + 1 };
                    black_box(charge("cus_1", order, 4200).await.unwrap());
                }
            }
            "hand" | "hand-replay" => {
                let fixed = what == "hand-replay";
                black_box(charge_by_hand(&hand, "cus_1", 0, 4200).await.unwrap());
                for _ in 0..n {
                    let order = if fixed { 0 } else { fresh() + 1 };
                    black_box(charge_by_hand(&hand, "cus_1", order, 4200).await.unwrap());
                }
            }
            "kept" => kept_by_hand_on(&KeptStore::default(), &fresh, n + 1).await,
            "verified" => {
                for _ in 0..=n {
                    black_box(charge_lost_reply("cus_1", fresh(), 4200).await.unwrap());
                }
            }
            "read" => {
                for _ in 0..=n {
                    black_box(balance(black_box("cus_1")).await.unwrap());
                }
            }
            "hand-read" => {
                for _ in 0..=n {
                    black_box(balance_by_hand(black_box("cus_1")).await.unwrap());
                }
            }
            // For a sampling profiler (`perf record`): n rounds of CHUNK calls on fresh stores, as
            // criterion's batches run them (their drop is sampled too: `drop_in_place`).
            "wrapped-rounds" => {
                for _ in 0..n {
                    wrapped_on(&Idem::new(MemoryStore::new()), &fresh, CHUNK).await;
                }
            }
            "kept-rounds" => {
                for _ in 0..n {
                    kept_by_hand_on(&KeptStore::default(), &fresh, CHUNK).await;
                }
            }
            "hand-rounds" => {
                for _ in 0..n {
                    by_hand_on(&HandStore::default(), &fresh, CHUNK).await;
                }
            }
            other => panic!("IDEMKIT_COUNT: no variant {other:?}"),
        }
    }));
    true
}

fn main() {
    if count_mode() {
        return;
    }
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    bench(&mut c);
    c.final_summary();
    summary(
        "calls",
        &[
            Pair {
                subject: "#[side_effect] call (idemkit MemoryStore)",
                baseline: "hand-written (Mutex<HashMap>)",
                goal: Some(1.3),
            },
            Pair {
                subject: "#[side_effect] call (idemkit MemoryStore)",
                baseline: "hand-written, keeping what the guarantees need (lease, ttl, fencing, seal)",
                goal: None,
            },
            Pair {
                subject: "hand-written, keeping what the guarantees need (lease, ttl, fencing, seal)",
                baseline: "hand-written (Mutex<HashMap>)",
                goal: None,
            },
            Pair {
                subject: "#[side_effect] call (idemkit MemoryStore)",
                baseline: "peer: idempotent 0.3.0 MemoryStore",
                goal: Some(1.0),
            },
            Pair {
                subject: "#[side_effect] call, lost reply settled by verify",
                baseline: "#[side_effect] call (idemkit MemoryStore)",
                goal: None,
            },
            Pair {
                subject: "#[side_effect] call, metrics feature, Prometheus recorder",
                baseline: "#[side_effect] call, metrics feature, no recorder",
                goal: None,
            },
            Pair {
                subject: "#[read_only] call",
                baseline: "hand-written read (span, start time, retry loop)",
                // What a read needs, written by hand, is the floor; the attribute may add at most
                // as much again for what it gives every read (observe, metrics, per-tool retry
                // settings, the typed last result).
                goal: Some(2.0),
            },
            Pair {
                subject: "#[read_only] call",
                baseline: "bare function",
                goal: None,
            },
            Pair {
                subject: "1,000 callers, #[side_effect] (MemoryStore)",
                baseline: "1,000 callers, single-flight (OnceCell)",
                goal: None,
            },
        ],
    );
    // Rounds of both sides count (each asserts its own single run); none when filtered out.
    let runs = SETTLE_RUNS.load(Ordering::SeqCst);
    if runs > 0 {
        println!(
            "1,000 concurrent callers of one key: the body ran exactly once in every measured round \
             (asserted; {runs} runs over all rounds of both sides, one per round)"
        );
    }
}
