//! Claim + complete per second on `SqliteStore`, with `synchronous=FULL` and `NORMAL`, against
//! the same two statements written by hand with rusqlite on one connection (no async, no
//! blocking-pool hop, no mutex, no decoding): the ratio is what the store's machinery costs.
//!
//! Run: `cargo bench -p idem-runtime --features sqlite --bench sqlite_store`
//! (prints criterion's figures, then a summary with the ratios).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use criterion::{Criterion, SamplingMode, Throughput};
use idem_runtime::store::sqlite::sql;
use idem_runtime::store::{Claim, ClaimRequest, LeaseToken, Written};
use idem_runtime::{Fingerprint, IdempotencyKey, SqliteStore, Store, Synchronous};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, named_params};
use uuid::Uuid;

/// Every measured batch, per benchmark: (iterations, total time).
static MEASURED: Mutex<BTreeMap<String, (u64, Duration)>> = Mutex::new(BTreeMap::new());

fn record(name: &str, iters: u64, took: Duration) -> Duration {
    let mut m = MEASURED.lock().unwrap();
    let e = m.entry(name.to_owned()).or_default();
    e.0 += iters;
    e.1 += took;
    took
}

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
        conn.execute_batch(sql::MIGRATIONS[0]).unwrap();
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
    let req = ClaimRequest {
        key,
        tool: "charge",
        fingerprint,
        token: LeaseToken::new(),
        lease: LEASE,
        ttl: TTL,
    };
    assert_eq!(store.claim(&req).await.unwrap(), Claim::Acquired);
    let written = store
        .complete(&key, req.token, br#"{"receipt":"r_1"}"#, TTL)
        .await
        .unwrap();
    assert_eq!(written, Written::Applied);
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let fingerprint = Fingerprint([7; 32]);
    let mut next = 0u128;
    let mut fresh_key = move || {
        next += 1;
        IdempotencyKey::from_uuid(Uuid::from_u128(next))
    };

    for (mode, name) in [(Synchronous::Full, "FULL"), (Synchronous::Normal, "NORMAL")] {
        let mut group = c.benchmark_group(format!("claim+complete synchronous={name}"));
        group
            .throughput(Throughput::Elements(1))
            .sampling_mode(SamplingMode::Flat)
            .sample_size(20);
        group.measurement_time(Duration::from_secs(if mode == Synchronous::Full {
            8
        } else {
            4
        }));

        let store = SqliteStore::builder(dir.path().join(format!("store-{name}.db")))
            .synchronous(mode)
            .open()
            .unwrap();
        let id = format!("{name}/SqliteStore");
        group.bench_function("SqliteStore", |b| {
            b.iter_custom(|iters| {
                let keys: Vec<_> = (0..iters).map(|_| fresh_key()).collect();
                let start = Instant::now();
                rt.block_on(async {
                    for key in keys {
                        store_claim_and_complete(&store, key, fingerprint).await;
                    }
                });
                record(&id, iters, start.elapsed())
            })
        });

        let mut hand = ByHand::open(&dir.path().join(format!("hand-{name}.db")), name);
        let id = format!("{name}/by hand");
        group.bench_function("by hand (rusqlite)", |b| {
            b.iter_custom(|iters| {
                let keys: Vec<_> = (0..iters).map(|_| fresh_key()).collect();
                let start = Instant::now();
                for key in &keys {
                    hand.claim_and_complete(key, &fingerprint);
                }
                record(&id, iters, start.elapsed())
            })
        });
        group.finish();
    }
}

fn summary() {
    let m = MEASURED.lock().unwrap();
    let per_sec = |id: &str| m.get(id).map(|(n, t)| *n as f64 / t.as_secs_f64());
    println!("\nclaim+complete per second (all measured iterations; warm-up excluded):");
    for name in ["FULL", "NORMAL"] {
        if let (Some(store), Some(hand)) = (
            per_sec(&format!("{name}/SqliteStore")),
            per_sec(&format!("{name}/by hand")),
        ) {
            println!(
                "  synchronous={name:<6}  SqliteStore {store:>9.0}/s   by hand {hand:>9.0}/s   \
                 time ratio store/by-hand {:.2}",
                hand / store
            );
        }
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    summary();
}
