//! Claim + complete per second on `PostgresStore` and `RedisStore`, with 1 and 16 concurrent
//! callers, against the store's own statements (its upsert and update; its Lua scripts, taken
//! from the store, so the baseline never drifts from it) run by hand with the same client
//! (deadpool-postgres; redis-rs's `ConnectionManager`): the ratio is what the store's machinery
//! costs over the round trips themselves.
//!
//! Needs the servers (`eval "$(scripts/test-servers.sh start)"`); skips with a message without.
//! Run: `cargo bench -p idem-runtime --features postgres,redis --bench distributed_stores`
//! (prints criterion's figures, then a summary with the ratios).

#[path = "../../benches/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use idem_runtime::store::{Claim, ClaimRequest, LeaseToken, Outcome, Written};
use idem_runtime::{Fingerprint, IdempotencyKey, PostgresStore, RedisStore, Store};
use uuid::Uuid;

/// Every measured batch, per benchmark: (iterations, total time).
static MEASURED: Mutex<BTreeMap<String, (u64, Duration)>> = Mutex::new(BTreeMap::new());

const LEASE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(3600);
const CALLERS: [usize; 2] = [1, 16];

fn fresh_key() -> IdempotencyKey {
    IdempotencyKey::from_uuid(Uuid::new_v4())
}

/// Runs `iters` operations spread over `callers` tasks; returns the wall time.
fn run<F, Fut>(
    rt: &tokio::runtime::Runtime,
    name: &str,
    iters: u64,
    callers: usize,
    op: F,
) -> Duration
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let took = rt.block_on(async {
        let start = Instant::now();
        let per = iters.div_ceil(callers as u64);
        let tasks: Vec<_> = (0..callers)
            .map(|i| {
                let op = op.clone();
                let n = per.min(iters.saturating_sub(per * i as u64));
                tokio::spawn(async move {
                    for _ in 0..n {
                        op().await;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        start.elapsed()
    });
    let mut m = MEASURED.lock().unwrap();
    let e = m.entry(name.to_owned()).or_default();
    e.0 += iters;
    e.1 += took;
    took
}

/// The figures of the summary: 10 rounds that alternate store and baseline (after two that
/// warm up), so both meet the same server and machine load.
fn interleave(
    store: &str,
    hand: &str,
    callers: usize,
    s: &dyn Fn(u64) -> Duration,
    h: &dyn Fn(u64) -> Duration,
) {
    let per_round = if callers == 1 { 200 } else { 1000 };
    support::interleave(store, hand, 10, per_round, s, h);
}

async fn store_op(store: &dyn Store, fingerprint: Fingerprint) {
    let req = ClaimRequest::new(
        fresh_key(),
        "bench",
        fingerprint,
        LeaseToken::new(),
        LEASE,
        TTL,
    );
    assert_eq!(
        store.claim(&req).await.unwrap(),
        Claim::Acquired { takeover: None }
    );
    let done = store.complete(
        req.key,
        req.token,
        Outcome::from(&b"{\"ok\":true}"[..]),
        TTL,
    );
    assert_eq!(done.await.unwrap(), Written::Applied);
}

/// The PostgreSQL baseline: the store's claim upsert and complete update, by hand.
struct PgByHand {
    pool: Pool,
    claim: String,
    complete: String,
}

impl PgByHand {
    /// A pool of its own, running `store`'s statements (the store's table, made the same way).
    fn new(url: &str, store: &PostgresStore) -> Self {
        let config: tokio_postgres::Config = url.parse().unwrap();
        let manager = Manager::from_config(
            config,
            tokio_postgres::NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let [claim, complete] = store.__claim_and_complete_statements();
        PgByHand {
            pool: Pool::builder(manager).max_size(16).build().unwrap(),
            claim: claim.to_owned(),
            complete: complete.to_owned(),
        }
    }

    async fn op(&self, fingerprint: &[u8]) {
        let (key, token) = (Uuid::new_v4(), Uuid::new_v4());
        let (lease, ttl) = (LEASE.as_micros() as i64, TTL.as_micros() as i64);
        let c = self.pool.get().await.unwrap();
        let claim = c.prepare_cached(&self.claim).await.unwrap();
        let row = c
            .query_opt(
                &claim,
                &[
                    &key,
                    &"bench",
                    &fingerprint,
                    &token,
                    &lease,
                    &ttl,
                    &None::<&str>,
                ],
            )
            .await
            .unwrap();
        assert!(row.is_some());
        let complete = c.prepare_cached(&self.complete).await.unwrap();
        let outcome: &[u8] = b"{\"ok\":true}";
        let n = c
            .execute(&complete, &[&key, &token, &outcome, &ttl])
            .await
            .unwrap();
        assert_eq!(n, 1);
    }
}

/// The Redis baseline: the same two scripts, invoked by hand.
struct RedisByHand {
    conn: redis::aio::ConnectionManager,
    claim: redis::Script,
    complete: redis::Script,
    prefix: String,
}

impl RedisByHand {
    async fn new(url: &str) -> Self {
        let client = redis::Client::open(url).unwrap();
        let [claim, complete] = RedisStore::__claim_and_complete_scripts();
        RedisByHand {
            conn: redis::aio::ConnectionManager::new(client).await.unwrap(),
            claim: redis::Script::new(&claim),
            complete: redis::Script::new(&complete),
            prefix: format!("bench:{}:hand:rec:", Uuid::new_v4().simple()),
        }
    }

    async fn op(&self, fp_hex: &str) {
        let key = format!("{}{}", self.prefix, Uuid::new_v4());
        let token = Uuid::new_v4().to_string();
        let (lease, ttl) = (LEASE.as_millis() as u64, TTL.as_millis() as u64);
        let mut conn = self.conn.clone();
        let acquired: i64 = self
            .claim
            .key(&key)
            .arg("bench")
            .arg(fp_hex)
            .arg(&token)
            .arg(lease)
            .arg(ttl)
            .arg(60_000)
            .invoke_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(acquired, 1);
        let done: i64 = self
            .complete
            .key(&key)
            .arg(&token)
            .arg(&b"{\"ok\":true}"[..])
            .arg(ttl)
            .arg(60_000)
            .invoke_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(done, 1);
    }
}

fn url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            eprintln!(
                "SKIPPED: set {var} to benchmark that store (eval \"$(scripts/test-servers.sh start)\")"
            );
            None
        }
    }
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(10)
        .configure_from_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fingerprint = Fingerprint::of(&4200u64).unwrap();
    let mut pairs = Vec::new();

    if let Some(url) = url("IDEMKIT_TEST_POSTGRES_URL") {
        let table = format!("bench_{}", &Uuid::new_v4().simple().to_string()[..12]);
        let store: Arc<dyn Store> = Arc::new(rt.block_on(async {
            PostgresStore::builder(&url)
                .schema("idemkit_bench")
                .table(&table)
                .max_connections(16)
                .connect()
                .await
                .unwrap()
        }));
        let hand_table = format!("{table}_h");
        // The baseline runs the store's own statements by hand, on a table made the same way.
        let hand_store = rt.block_on(async {
            PostgresStore::builder(&url)
                .schema("idemkit_bench")
                .table(&hand_table)
                .connect()
                .await
                .unwrap()
        });
        let hand = Arc::new(PgByHand::new(&url, &hand_store));
        let mut group = c.benchmark_group("postgres claim+complete");
        group.throughput(Throughput::Elements(1));
        for callers in CALLERS {
            let name = format!("postgres store, {callers} callers");
            let store_run = |iters: u64| {
                let s = store.clone();
                run(&rt, &name, iters, callers, move || {
                    let s = s.clone();
                    async move { store_op(&*s, fingerprint).await }
                })
            };
            let hand_name = format!("postgres by hand, {callers} callers");
            let hand_run = |iters: u64| {
                let h = hand.clone();
                run(&rt, &hand_name, iters, callers, move || {
                    let h = h.clone();
                    async move { h.op(&fingerprint.0).await }
                })
            };
            group.bench_function(format!("store/{callers}"), |b| b.iter_custom(&store_run));
            group.bench_function(format!("by_hand/{callers}"), |b| b.iter_custom(&hand_run));
            interleave(&name, &hand_name, callers, &store_run, &hand_run);
            pairs.push((name, hand_name));
        }
        group.finish();
    }

    if let Some(url) = url("IDEMKIT_TEST_REDIS_URL") {
        let store: Arc<dyn Store> = Arc::new(rt.block_on(async {
            RedisStore::builder(&url)
                .prefix(format!("bench:{}:", Uuid::new_v4().simple()))
                .connect()
                .await
                .unwrap()
        }));
        let hand = Arc::new(rt.block_on(RedisByHand::new(&url)));
        let fp_hex: Arc<str> = fingerprint.to_hex().into();
        let mut group = c.benchmark_group("redis claim+complete");
        group.throughput(Throughput::Elements(1));
        for callers in CALLERS {
            let name = format!("redis store, {callers} callers");
            let store_run = |iters: u64| {
                let s = store.clone();
                run(&rt, &name, iters, callers, move || {
                    let s = s.clone();
                    async move { store_op(&*s, fingerprint).await }
                })
            };
            let hand_name = format!("redis by hand, {callers} callers");
            let hand_run = |iters: u64| {
                let (h, fp) = (hand.clone(), fp_hex.clone());
                run(&rt, &hand_name, iters, callers, move || {
                    let (h, fp) = (h.clone(), fp.clone());
                    async move { h.op(&fp).await }
                })
            };
            group.bench_function(format!("store/{callers}"), |b| b.iter_custom(&store_run));
            group.bench_function(format!("by_hand/{callers}"), |b| b.iter_custom(&hand_run));
            interleave(&name, &hand_name, callers, &store_run, &hand_run);
            pairs.push((name, hand_name));
        }
        group.finish();
    }

    c.final_summary();
    let m = MEASURED.lock().unwrap();
    let per_sec = |name: &str| {
        m.get(name)
            .map(|(n, t)| *n as f64 / t.as_secs_f64())
            .unwrap_or(f64::NAN)
    };
    println!("\nclaim+complete per second (all measured batches, warm-up included):");
    for (store, hand) in &pairs {
        let (s, h) = (per_sec(store), per_sec(hand));
        println!(
            "  {store:<30} {s:>9.0}/s   {hand:<32} {h:>9.0}/s   time ratio store/by-hand {:.2}",
            h / s
        );
    }
    drop(m);
    let pairs: Vec<support::Pair<'_>> = pairs
        .iter()
        .map(|(store, hand)| support::Pair {
            subject: store,
            baseline: hand,
            // ≥ 0.9× the throughput of the statements by hand.
            goal: Some(1.0 / 0.9),
        })
        .collect();
    support::summary(
        "claim+complete, store vs the same statements by hand",
        &pairs,
    );
}
