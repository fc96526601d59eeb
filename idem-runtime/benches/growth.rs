//! The store's cost as the work grows (issue 53): a first call and a replay with 10 thousand to
//! 10 million records already in the store, bytes per record on each store, Redis memory per
//! record and per tombstone (S33), prune's throughput: expired records into tombstones, and
//! tombstones past the tombstone setting deleted. Not run by `benches/run.sh` or CI (a 10 million record fill takes
//! minutes and gigabytes); `cargo check --benches` builds it.
//!
//! The stores are filled without calls ([`fill`]: one record made through the store's API, then
//! copied under random keys by the store's bulk path), read back through `Records::get`, and
//! then timed call by call: first calls (a claim that makes a record and its completion, on a
//! fresh random key) and replays (a claim of a random filled key, answered with its completed
//! outcome), on the grown store and on a store of 10,000 records in turn, so that the two see
//! the machine alike (its fsyncs and other processes' load move these figures by several times
//! within minutes); 200 rounds not counted, then p50 and p99 of each. The stores run with their
//! library defaults (SQLite `synchronous=FULL`; PostgreSQL's and Redis's durability is the
//! server's, printed with each figure), and each run prints the load average.
//!
//! Run (a server URL from `IDEMKIT_GROWTH_POSTGRES_URL` or `IDEMKIT_TEST_POSTGRES_URL`, and
//! `IDEMKIT_GROWTH_REDIS_URL` or `IDEMKIT_TEST_REDIS_URL`; files under `$TMPDIR`, deleted after):
//!
//! ```text
//! cargo bench -p idem-runtime --features sqlite,postgres,redis --bench growth -- latency memory|sqlite|postgres|redis 1000000 [CALLS [record|tombstone]]
//! cargo bench -p idem-runtime --features sqlite,postgres,redis --bench growth -- size memory|sqlite|postgres|redis 1000000 [record|tombstone]
//! cargo bench -p idem-runtime --features sqlite,postgres,redis --bench growth -- prune memory|sqlite|postgres|redis 1000000 [expired|tombstone]
//! ```

#[path = "growth/fill.rs"]
mod fill;
#[path = "growth/stores.rs"]
mod stores;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use fill::{FINGERPRINT, Kind, LEASE, TOOL, TTL};
use idem_runtime::store::{Claim, ClaimRequest, ExistingState, LeaseToken, RecordState};
use idem_runtime::{IdempotencyKey, Records, Store};
use stores::Bench;

/// Counts the bytes the process holds, for the memory store's bytes per record.
struct Counting;

static HELD: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HELD.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        HELD.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Bytes held by the process's allocations (the memory store's records among them).
pub fn held() -> isize {
    HELD.load(Ordering::Relaxed)
}

const WARM_UP: usize = 200;
const USAGE: &str = "usage: growth latency memory|sqlite|postgres|redis RECORDS [CALLS [record|tombstone]] | size memory|sqlite|postgres|redis RECORDS [record|tombstone] | prune memory|sqlite|postgres|redis RECORDS [expired|tombstone]";

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// p50 and p99 of `times` (sorted here), in microseconds.
fn percentiles(times: &mut [Duration]) -> (f64, f64) {
    times.sort_unstable();
    let at = |q: usize| times[(times.len() * q / 100).min(times.len() - 1)].as_secs_f64() * 1e6;
    (at(50), at(99))
}

/// A replay's store work: the claim of a completed record, answered with its outcome.
async fn replay<S: Store>(store: &S, key: IdempotencyKey) {
    let req = ClaimRequest::new(key, TOOL, FINGERPRINT, LeaseToken::new(), LEASE, TTL);
    match store.claim(&req).await.expect("claim") {
        Claim::Existing(e) if matches!(e.state, ExistingState::Completed { .. }) => {}
        other => panic!("a filled record did not replay: {other:?}"),
    }
}

/// Live records made by calls in a store filled with tombstones, for its replays.
const LIVE_AMONG_TOMBSTONES: usize = 500;

/// The records in the store every grown store is compared with, call by call.
pub const REFERENCE: usize = 10_000;

/// p50 and p99 of a first call and of a replay, on one store.
pub type Figures = [(f64, f64); 2];

/// `calls` rounds, each a first call and a replay on the grown store `big` and the same on the
/// reference store `small` (in turn first), so that both see the machine in the same state
/// (other processes' load and fsyncs move these figures by several times within minutes). A
/// first call claims a fresh random key and completes it; a replay claims a random key of the
/// store's fill. Returns `[small, big]`.
pub async fn latency<S: Store>(
    small: (&S, &[IdempotencyKey]),
    big: (&S, &[IdempotencyKey]),
    calls: usize,
) -> [Figures; 2] {
    let mut times: [Vec<Duration>; 4] = std::array::from_fn(|_| Vec::with_capacity(calls));
    for i in 0..WARM_UP + calls {
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let (store, sample) = if which == 0 { small } else { big };
            let key = fill::fresh_key();
            let t = Instant::now();
            fill::call(store, key, TTL).await;
            let a = t.elapsed();
            let key = sample[fastrand::usize(..sample.len())];
            let t = Instant::now();
            replay(store, key).await;
            let b = t.elapsed();
            if i >= WARM_UP {
                times[2 * which].push(a);
                times[2 * which + 1].push(b);
            }
        }
    }
    let [mut sf, mut sr, mut bf, mut br] = times;
    [
        [percentiles(&mut sf), percentiles(&mut sr)],
        [percentiles(&mut bf), percentiles(&mut br)],
    ]
}

/// Checks that the fill reads as real records of its kind through the store (`Records::get`):
/// a record completed, an expired record or a tombstone as a tombstone (S33).
pub async fn read_back<S: Records>(store: &S, kind: Kind, sample: &[IdempotencyKey]) {
    for key in sample.iter().take(3) {
        let record = store
            .get(key)
            .await
            .expect("get")
            .expect("a filled record reads back");
        assert_eq!(record.fingerprint, FINGERPRINT);
        assert_eq!(record.tool, TOOL);
        match kind {
            Kind::Record => assert!(
                matches!(record.state, RecordState::Completed { .. }),
                "a filled record reads as completed: {:?}",
                record.state
            ),
            Kind::Expired | Kind::Tombstone => assert_eq!(
                record.state,
                RecordState::Tombstone,
                "a record past its time-to-live reads as a tombstone"
            ),
        }
    }
}

async fn run(args: &[String]) -> Result<(), String> {
    let [what, store, n, rest @ ..] = args else {
        return Err(USAGE.to_owned());
    };
    let n: usize = n.parse().map_err(|_| USAGE.to_owned())?;
    let kind = match what.as_str() {
        "prune" => match rest.first().map(String::as_str) {
            None | Some("expired") => Kind::Expired,
            Some("tombstone") => Kind::Tombstone,
            _ => return Err(USAGE.to_owned()),
        },
        "size" => rest
            .first()
            .map(|k| Kind::parse(k).ok_or(USAGE.to_owned()))
            .transpose()?
            .unwrap_or(Kind::Record),
        "latency" => match rest.get(1).map(String::as_str) {
            None | Some("record") => Kind::Record,
            Some("tombstone") => Kind::Tombstone,
            _ => return Err(USAGE.to_owned()),
        },
        _ => Kind::Record,
    };
    let mut bench = Bench::open(store, n).await?;
    let before = bench.size().await;
    let template = bench.template(kind).await?;
    let t = Instant::now();
    let sample = bench.fill(kind, &template, n).await?;
    let fill_secs = t.elapsed().as_secs_f64();
    let after = bench.size().await;
    let per = (after - before) as f64 / n as f64;
    println!(
        "growth {store} ({}): {n} {kind:?} filled in {fill_secs:.1} s; {} {per:.0} bytes per {} ({}-byte outcome); load {}",
        bench.durability().await,
        bench.size_measure(),
        match kind {
            Kind::Record => "record",
            Kind::Expired => "expired record",
            Kind::Tombstone => "tombstone",
        },
        fill::outcome().len(),
        load()
    );
    match what.as_str() {
        "latency" => {
            let calls: usize = rest.first().and_then(|c| c.parse().ok()).unwrap_or(5_000);
            bench.read_back(kind, &sample).await;
            // A store of tombstones: the replays are of live records made among them.
            let sample = match kind {
                Kind::Tombstone => bench.live(LIVE_AMONG_TOMBSTONES).await,
                _ => sample,
            };
            let mut reference = Bench::open(store, REFERENCE).await?;
            let template = reference.template(Kind::Record).await?;
            let small = reference.fill(Kind::Record, &template, REFERENCE).await?;
            reference.read_back(Kind::Record, &small).await;
            let [[(s50, s99), (t50, t99)], [(f50, f99), (r50, r99)]] =
                bench.latency(&sample, &reference, &small, calls).await;
            println!(
                "growth {store} ({}), {n} {}: first call p50 {f50:.1} µs p99 {f99:.1} µs; replay p50 {r50:.1} µs p99 {r99:.1} µs. \
                 Beside it, {REFERENCE} records: first call p50 {s50:.1} µs p99 {s99:.1} µs; replay p50 {t50:.1} µs p99 {t99:.1} µs. \
                 p50 {n} ÷ {REFERENCE}: first call {:.2}×, replay {:.2}× ({calls} rounds; load {})",
                bench.durability().await,
                match kind {
                    Kind::Tombstone => format!(
                        "tombstones and {LIVE_AMONG_TOMBSTONES} live records (the replays')"
                    ),
                    _ => "records".to_owned(),
                },
                f50 / s50,
                r50 / t50,
                load()
            );
            reference.clean().await;
        }
        "size" => bench.read_back(kind, &sample).await,
        "prune" if kind == Kind::Expired => {
            bench.read_back(kind, &sample).await;
            prune_expired(&mut bench, store, n, &sample).await;
        }
        "prune" => {
            bench.read_back(kind, &sample).await;
            let (pruned, took) = bench
                .prune_with_tombstones(Duration::from_millis(1))
                .await?;
            let secs = took.as_secs_f64();
            assert_eq!(
                pruned,
                n + 1,
                "prune deleted every tombstone, the template too"
            );
            println!(
                "growth {store} ({}): prune past the tombstone setting deleted {pruned} tombstones in {secs:.2} s: {:.0} tombstones/s (one Records::prune(usize::MAX)); load {}",
                bench.durability().await,
                pruned as f64 / secs,
                load()
            );
        }
        _ => return Err(USAGE.to_owned()),
    }
    bench.clean().await;
    Ok(())
}

/// S33's prune of completed records past their time-to-live: `Records::prune(usize::MAX)`, with
/// the store's default tombstone setting, called until no record keeps its outcome (SQLite and
/// PostgreSQL count the rows after the first call and every 10th, not timed; Redis checks the sample; the
/// memory store's one call goes over its whole map). Only the prune calls are timed.
async fn prune_expired(bench: &mut Bench, store: &str, n: usize, sample: &[IdempotencyKey]) {
    let kept_before = bench.outcomes_kept(sample).await;
    let (mut calls, mut deleted, mut took) = (0usize, 0usize, Duration::ZERO);
    let mut first = None;
    let size_before = bench.size().await;
    loop {
        let t = Instant::now();
        deleted += bench.prune().await;
        let one = t.elapsed();
        took += one;
        calls += 1;
        if calls == 1 || calls % 10 == 0 {
            let kept = bench.outcomes_kept(sample).await;
            if calls == 1 {
                first = Some((one, kept));
            }
            if kept.is_none_or(|k| k == 0) {
                break;
            }
            assert!(
                calls < 100_000,
                "prune made no progress: {kept:?} outcomes kept"
            );
        }
    }
    let size_after = bench.size().await;
    let (first_took, first_kept) = first.expect("one call");
    let secs = took.as_secs_f64();
    assert_eq!(
        deleted, 0,
        "prune deleted no tombstone before its tombstone setting"
    );
    bench.read_back(Kind::Tombstone, sample).await;
    println!(
        "growth {store} ({}): prune turned {} expired records into tombstones in {secs:.2} s: {:.0} records/s; \
         {calls} Records::prune(usize::MAX) call(s), deleted {deleted}; the first call took {:.2} s, \
         outcomes kept before it {kept_before:?}, after it {first_kept:?} ({}); {} {size_before} → {size_after}; load {}",
        bench.durability().await,
        n + 1,
        (n + 1) as f64 / secs,
        first_took.as_secs_f64(),
        match bench {
            Bench::Redis { .. } => "of the sample",
            Bench::Memory(_) => "the memory store's map is not visible",
            _ => "rows",
        },
        bench.size_measure(),
        load()
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a bare run (`cargo bench` of the whole package) measures
    // nothing here.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if args.is_empty() {
        eprintln!("growth: nothing run ({USAGE})");
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    if let Err(e) = rt.block_on(run(&args)) {
        eprintln!("growth: {e}");
        std::process::exit(2);
    }
}
