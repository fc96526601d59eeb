//! Claim + complete per second on `PostgresStore` and `RedisStore`, with 1 and 16 concurrent
//! callers, against the same statements (the same upsert and update; the same Lua scripts)
//! written by hand with the same client (deadpool-postgres; redis-rs's `ConnectionManager`):
//! the ratio is what the store's machinery costs over the round trips themselves.
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

/// The figures of the summary: rounds that alternate store and baseline (the first two warm
/// up), so both meet the same server and machine load.
fn interleave(
    store: &str,
    hand: &str,
    callers: usize,
    s: &dyn Fn(u64) -> Duration,
    h: &dyn Fn(u64) -> Duration,
) {
    let per_round = if callers == 1 { 200 } else { 1000 };
    for round in 0..12 {
        let (ts, th) = if round % 2 == 0 {
            let ts = s(per_round);
            (ts, h(per_round))
        } else {
            let th = h(per_round);
            (s(per_round), th)
        };
        if round >= 2 {
            support::round(store, hand, per_round, ts, th);
        }
    }
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
    assert_eq!(store.claim(&req).await.unwrap(), Claim::Acquired);
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
    fn new(url: &str, table: &str) -> Self {
        let config: tokio_postgres::Config = url.parse().unwrap();
        let manager = Manager::from_config(
            config,
            tokio_postgres::NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let t = format!("\"idemkit_bench\".\"{table}\"");
        PgByHand {
            pool: Pool::builder(manager).max_size(16).build().unwrap(),
            claim: format!(
                "INSERT INTO {t} AS r (key, tool, fingerprint, state, token, lease_until, expires_at)
                 VALUES ($1, $2, $3, 'running', $4, now() + $5::int8 * interval '1 microsecond',
                         now() + $6::int8 * interval '1 microsecond')
                 ON CONFLICT (key) DO UPDATE
                    SET tool = EXCLUDED.tool, fingerprint = EXCLUDED.fingerprint, state = 'running',
                        token = EXCLUDED.token, lease_until = EXCLUDED.lease_until,
                        expires_at = EXCLUDED.expires_at, outcome = NULL, note = NULL
                  WHERE r.expires_at <= now()
                     OR (r.fingerprint = EXCLUDED.fingerprint
                         AND (r.state = 'ambiguous'
                              OR (r.state = 'running'
                                  AND (r.lease_until <= now() OR r.token = EXCLUDED.token))))
                 RETURNING true"
            ),
            complete: format!(
                "UPDATE {t} SET state = 'completed', outcome = $3, note = NULL,
                                expires_at = now() + $4::int8 * interval '1 microsecond'
                  WHERE key = $1 AND token = $2 AND expires_at > now()
                    AND state IN ('running', 'completed')"
            ),
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
                &[&key, &"bench", &fingerprint, &token, &lease, &ttl],
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

const PRELUDE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function ms(x) return string.format('%.0f', x) end
";

impl RedisByHand {
    async fn new(url: &str) -> Self {
        let client = redis::Client::open(url).unwrap();
        let claim = format!(
            "{PRELUDE}
local r = redis.call('HMGET', KEYS[1], 'fp', 'state', 'token', 'lease_until', 'expires_at', 'outcome')
if r[1] and tonumber(r[5]) > now then
  local lease_left = tonumber(r[4]) - now
  local same = r[1] == ARGV[2]
  local take = same and (r[2] == 'ambiguous'
    or (r[2] == 'running' and (lease_left <= 0 or r[3] == ARGV[3])))
  if not take then
    return {{r[1], r[2], math.max(lease_left, 0), r[6] or ''}}
  end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'tool', ARGV[1], 'fp', ARGV[2], 'state', 'running', 'token', ARGV[3],
  'lease_until', ms(now + ARGV[4]), 'expires_at', ms(now + ARGV[5]))
redis.call('PEXPIREAT', KEYS[1], ms(now + ARGV[5] + ARGV[6]))
return 1"
        );
        let complete = format!(
            "{PRELUDE}
local r = redis.call('HMGET', KEYS[1], 'token', 'state', 'expires_at')
if r[1] ~= ARGV[1] or tonumber(r[3]) <= now or (r[2] ~= 'running' and r[2] ~= 'completed') then return 0 end
redis.call('HSET', KEYS[1], 'state', 'completed', 'outcome', ARGV[2], 'expires_at', ms(now + ARGV[3]))
redis.call('HDEL', KEYS[1], 'note')
redis.call('PEXPIREAT', KEYS[1], ms(now + ARGV[3] + ARGV[4]))
return 1"
        );
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
        rt.block_on(async {
            // The baseline writes to a table of the same shape, made the same way.
            PostgresStore::builder(&url)
                .schema("idemkit_bench")
                .table(&hand_table)
                .connect()
                .await
                .unwrap()
        });
        let hand = Arc::new(PgByHand::new(&url, &hand_table));
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
