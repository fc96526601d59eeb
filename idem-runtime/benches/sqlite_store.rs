//! Claim + complete on `SqliteStore`, with `synchronous=FULL` and `NORMAL`, 1 and 16 concurrent
//! callers, against the same two statements written by hand with rusqlite (one connection; no
//! async, no blocking-pool hop, no decoding; 16 threads share it behind a mutex): at 1 caller
//! the ratio is what the store's machinery costs; at 16 callers under `FULL` the store's group
//! commit (writes queued meanwhile share one fsync) is what it gains, since the hand-written
//! statements commit one by one.
//!
//! The ratios come from interleaved rounds (store, by hand, by hand, store, …), not from two
//! criterion runs one after the other: a commit under `FULL` waits for an fsync, whose latency
//! swings tenfold with other processes' writes to the same disk (a compile next door), so two
//! figures measured seconds apart can compare the disk's moods, not the code.
//!
//! Under `FULL` the baseline is, in some runs, 3–5x slower than the store (e.g. 3.1 ms against
//! 0.7 ms a claim+complete) even with interleaving, although both make the same system calls per
//! operation (2 fsyncs of the WAL and ~5 page writes, by strace), run the same SQL through the
//! same bundled SQLite with the same pragmas, and keep their WAL at the same size (4 MB, reset at
//! each checkpoint). It starts during a slow-disk period and then sticks to one file for the rest
//! of the process; in quiet runs the baseline is faster, as it should be (see the summary).
//!
//! Run: `cargo bench -p idem-runtime --features sqlite --bench sqlite_store`
//! (prints criterion's figures, then a summary with the ratios).

/// The store's own statements (not public API): the baseline runs exactly what the store runs.
#[path = "../src/store/sqlite/sql.rs"]
#[allow(dead_code, unused_imports)]
mod sql;
#[path = "../../benches/support/mod.rs"]
mod support;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use criterion::{Criterion, SamplingMode, Throughput};
use idem_runtime::store::{Claim, ClaimRequest, LeaseToken, Outcome, Written};
use idem_runtime::{Fingerprint, IdempotencyKey, SqliteStore, Store, Synchronous};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, named_params};
use support::{Pair, summary};
use uuid::Uuid;

const LEASE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(24 * 3600);

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The hand-written baseline: the store's claim (upsert, in an IMMEDIATE transaction, with the
/// read of what it did not take) and complete, straight on a connection.
struct ByHand {
    conn: Connection,
}

impl ByHand {
    fn open(path: &Path, synchronous: &str) -> Self {
        let conn = Connection::open(path).unwrap();
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |_| Ok(()))
            .unwrap();
        conn.pragma_update(None, "synchronous", synchronous)
            .unwrap();
        // The store's own schema, every migration of it, so the statements find their columns.
        for migration in sql::MIGRATIONS {
            conn.execute_batch(migration).unwrap();
        }
        ByHand { conn }
    }

    fn claim_and_complete(&mut self, key: &IdempotencyKey, fingerprint: &Fingerprint) {
        let token = Uuid::new_v4();
        let now = now_ms();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        let took: Option<Vec<u8>> = tx
            .prepare_cached(sql::CLAIM)
            .unwrap()
            .query_row(
                named_params! {
                    ":key": key.as_str(), ":tool": "charge", ":fingerprint": fingerprint.0,
                    ":token": token.as_bytes(), ":now": now,
                    ":lease_until": now + LEASE.as_millis() as i64, ":expires_at": now + TTL.as_millis() as i64,
                    ":tenant": None::<&str>,
                },
                |row| row.get(0),
            )
            .optional()
            .unwrap();
        assert!(took.is_some());
        tx.commit().unwrap();
        let now = now_ms();
        let changed = self
            .conn
            .prepare_cached(sql::COMPLETE)
            .unwrap()
            .execute(named_params! {
                ":key": key.as_str(), ":token": token.as_bytes(), ":outcome": br#"{"receipt":"r_1"}"#,
                ":now": now, ":expires_at": now + TTL.as_millis() as i64,
            })
            .unwrap();
        assert_eq!(changed, 1);
    }
}

async fn store_claim_and_complete(
    store: &SqliteStore,
    key: IdempotencyKey,
    fingerprint: Fingerprint,
) {
    let req = ClaimRequest::new(key, "charge", fingerprint, LeaseToken::new(), LEASE, TTL);
    assert_eq!(
        store.claim(&req).await.unwrap(),
        Claim::Acquired { takeover: None }
    );
    let written = store
        .complete(
            key,
            req.token,
            Outcome::from(&br#"{"receipt":"r_1"}"#[..]),
            TTL,
        )
        .await
        .unwrap();
    assert_eq!(written, Written::Applied);
}

static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

fn fresh_key() -> IdempotencyKey {
    IdempotencyKey::from_uuid(Uuid::from_u128(u128::from(
        NEXT_KEY.fetch_add(1, Ordering::Relaxed),
    )))
}

const FINGERPRINT: Fingerprint = Fingerprint([7; 32]);
const CALLERS: [usize; 2] = [1, 16];

/// One variant: a store or its baseline, in one synchronous mode, with so many callers.
struct Setup {
    store: SqliteStore,
    hand: Arc<Mutex<ByHand>>,
    rt: tokio::runtime::Runtime,
}

impl Setup {
    /// `iters` claim+completes on the store, spread over `callers` tasks; the wall time.
    fn store(&self, iters: u64, callers: usize) -> Duration {
        let start = Instant::now();
        self.rt.block_on(async {
            let tasks: Vec<_> = share(iters, callers)
                .map(|n| {
                    let store = self.store.clone();
                    tokio::spawn(async move {
                        for _ in 0..n {
                            store_claim_and_complete(&store, fresh_key(), FINGERPRINT).await;
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        start.elapsed()
    }

    /// The same by hand, spread over `callers` threads sharing the connection.
    fn by_hand(&self, iters: u64, callers: usize) -> Duration {
        let start = Instant::now();
        if callers == 1 {
            let mut hand = self.hand.lock().unwrap();
            for _ in 0..iters {
                hand.claim_and_complete(&fresh_key(), &FINGERPRINT);
            }
        } else {
            std::thread::scope(|scope| {
                for n in share(iters, callers) {
                    scope.spawn(move || {
                        for _ in 0..n {
                            let key = fresh_key();
                            self.hand
                                .lock()
                                .unwrap()
                                .claim_and_complete(&key, &FINGERPRINT);
                        }
                    });
                }
            });
        }
        start.elapsed()
    }
}

/// `iters` split over `callers` as evenly as can be.
fn share(iters: u64, callers: usize) -> impl Iterator<Item = u64> {
    let c = callers as u64;
    (0..c).map(move |i| iters / c + u64::from(i < iters % c))
}

fn names(mode: &str, callers: usize) -> (String, String) {
    (
        format!("SqliteStore {mode}, {callers} caller(s)"),
        format!("rusqlite by hand {mode}, {callers} caller(s)"),
    )
}

fn bench(c: &mut Criterion, dir: &Path) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    for (mode, name) in [(Synchronous::Full, "FULL"), (Synchronous::Normal, "NORMAL")] {
        let setup = Setup {
            store: SqliteStore::builder(dir.join(format!("store-{name}.db")))
                .synchronous(mode)
                .open()
                .unwrap(),
            hand: Arc::new(Mutex::new(ByHand::open(
                &dir.join(format!("hand-{name}.db")),
                name,
            ))),
            rt: tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap(),
        };
        let mut group = c.benchmark_group(format!("claim+complete synchronous={name}"));
        group
            .throughput(Throughput::Elements(1))
            .sampling_mode(SamplingMode::Flat)
            .sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        for callers in CALLERS {
            group.bench_function(format!("SqliteStore/{callers}"), |b| {
                b.iter_custom(|iters| setup.store(iters, callers))
            });
            group.bench_function(format!("by hand (rusqlite)/{callers}"), |b| {
                b.iter_custom(|iters| setup.by_hand(iters, callers))
            });
        }
        group.finish();

        // The figures of the summary: rounds that alternate the two, so both meet the same disk.
        let per_round: u64 = if mode == Synchronous::Full { 200 } else { 1000 };
        for callers in CALLERS {
            let (store, hand) = names(name, callers);
            support::interleave(
                &store,
                &hand,
                10,
                per_round,
                &|n| setup.store(n, callers),
                &|n| setup.by_hand(n, callers),
            );
            pairs.push((store, hand));
        }
    }
    pairs
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Criterion::default().configure_from_args();
    let pairs = bench(&mut c, dir.path());
    c.final_summary();
    let pairs: Vec<Pair<'_>> = pairs
        .iter()
        .map(|(store, hand)| Pair {
            subject: store,
            baseline: hand,
            // ≥ 0.9× the throughput of the statements by hand.
            goal: Some(1.0 / 0.9),
        })
        .collect();
    summary(
        "SQLite claim+complete, store vs the same statements by hand (interleaved rounds)",
        &pairs,
    );
}
