//! What a request through `IdempotencyLayer` costs against the same axum handler without it,
//! in process (`tower::ServiceExt::oneshot`, no socket): a first request (a fresh key each, so
//! claim, handler, body collected and stored, complete) and a repeat (a replay), on the memory
//! store and on the SQLite store (`synchronous = NORMAL`: FULL measures the disk's fsync, which
//! `benches/README.md`'s store rows measure already).
//!
//! Run: `cargo bench --bench http --features tower` (or `benches/run.sh` for everything).

mod support;

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::Request;
use axum::routing::post;
use criterion::Criterion;
use idemkit::http::IdempotencyLayer;
use idemkit::{Idem, MemoryStore, SqliteStore, Synchronous};
use support::{Pair, chunked, record, summary};
use tower::ServiceExt;

const BODY: &str = r#"{"customer":"cus_1","amount_cents":4200}"#;

/// The handler: echoes a small JSON receipt.
async fn charge(body: Bytes) -> ([(&'static str, &'static str); 1], String) {
    (
        [("content-type", "application/json")],
        format!(
            r#"{{"id":"ch_1","request":{}}}"#,
            String::from_utf8_lossy(&body)
        ),
    )
}

/// The route, with the layer or without, its state given (`with_state`, as `axum::serve` does
/// through `into_make_service`): the handler and the layer are made into a service once, not
/// at every request.
fn app(layer: Option<IdempotencyLayer>) -> Router {
    let route = Router::new().route("/v1/charges", post(charge));
    match layer {
        Some(layer) => route.layer(layer),
        None => route,
    }
    .with_state(())
}

fn request(key: Option<u64>) -> Request<Body> {
    let mut request = Request::post("/v1/charges").header("content-type", "application/json");
    if let Some(key) = key {
        request = request.header("idempotency-key", format!("\"k-{key}\""));
    }
    request.body(Body::from(BODY)).unwrap()
}

/// `n` requests to `app`, each keyed by what `key` gives: their time.
fn requests(
    rt: &tokio::runtime::Runtime,
    app: &Router,
    key: impl Fn() -> Option<u64>,
    n: u64,
) -> Duration {
    let start = Instant::now();
    rt.block_on(async {
        for _ in 0..n {
            let response = app.clone().oneshot(request(key())).await.unwrap();
            black_box(
                axum::body::to_bytes(response.into_body(), usize::MAX)
                    .await
                    .unwrap(),
            );
        }
    });
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let next = AtomicU64::new(0);
    let fresh = || Some(next.fetch_add(1, Ordering::Relaxed));
    let dir = std::env::temp_dir().join(format!("idemkit-http-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sqlite = SqliteStore::builder(dir.join("bench.db"))
        .synchronous(Synchronous::Normal)
        .open()
        .unwrap();
    let stores = [
        ("memory", Idem::new(MemoryStore::new())),
        ("SQLite NORMAL", Idem::new(sqlite)),
    ];

    let mut g = c.benchmark_group("http request");
    let bare = app(None);
    g.bench_function("handler without the layer", |b| {
        b.iter_custom(|iters| {
            record(
                "handler without the layer",
                iters,
                requests(&rt, &bare, || None, iters),
            )
        })
    });
    for (store, idem) in &stores {
        let layered = app(Some(IdempotencyLayer::new(idem.clone())));
        let first = format!("through the layer, {store} store, first request");
        // On the memory store, as the calls bench does: each store serves at most CHUNK first
        // requests and is dropped outside the timing, so the figure is the layer's cost, not a
        // hash table's grown to millions of records by criterion's batches. (The SQLite store's
        // table grows, as a database's does.)
        let memory = *store == "memory";
        g.bench_function(&first, |b| {
            b.iter_custom(|iters| {
                let took = if memory {
                    chunked(iters, |n| {
                        let fresh_app =
                            app(Some(IdempotencyLayer::new(Idem::new(MemoryStore::new()))));
                        (requests(&rt, &fresh_app, fresh, n), fresh_app)
                    })
                } else {
                    requests(&rt, &layered, fresh, iters)
                };
                record(&first, iters, took)
            })
        });
        // One key, stored once before: every request is a replay.
        let replayed = next.fetch_add(1, Ordering::Relaxed);
        requests(&rt, &layered, || Some(replayed), 1);
        let replay = format!("through the layer, {store} store, replay");
        g.bench_function(&replay, |b| {
            b.iter_custom(|iters| {
                record(
                    &replay,
                    iters,
                    requests(&rt, &layered, || Some(replayed), iters),
                )
            })
        });
    }
    g.finish();
    drop(stores);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `IDEMKIT_COUNT=<variant>:<n>` (what `benches/instructions.sh` runs under callgrind): one
/// request to warm up, then `n`, on the memory store, and nothing else. Variants: `http-bare`
/// (the handler without the layer), `http-first` (through the layer, a fresh key each),
/// `http-replay` (through the layer, one key stored once); and, for a sampling profiler,
/// `http-first-rounds` (`n` rounds of CHUNK first requests on fresh stores, as criterion's
/// batches run them).
fn count_mode() -> bool {
    let Ok(spec) = std::env::var("IDEMKIT_COUNT") else {
        return false;
    };
    let (what, n) = spec
        .split_once(':')
        .expect("IDEMKIT_COUNT=<variant>:<requests>");
    let n: u64 = n.parse().expect("IDEMKIT_COUNT's requests: a number");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let next = AtomicU64::new(0);
    let fresh = || Some(next.fetch_add(1, Ordering::Relaxed));
    if what == "http-first-rounds" {
        for _ in 0..n {
            let app = app(Some(IdempotencyLayer::new(Idem::new(MemoryStore::new()))));
            requests(&rt, &app, fresh, support::CHUNK);
        }
        return true;
    }
    let (app, key): (Router, &dyn Fn() -> Option<u64>) = match what {
        "http-bare" => (app(None), &|| None),
        "http-first" => (
            app(Some(IdempotencyLayer::new(Idem::new(MemoryStore::new())))),
            &fresh,
        ),
        "http-replay" => (
            app(Some(IdempotencyLayer::new(Idem::new(MemoryStore::new())))),
            &|| Some(u64::MAX),
        ),
        other => panic!("IDEMKIT_COUNT: no variant {other:?}"),
    };
    requests(&rt, &app, key, 1);
    requests(&rt, &app, key, n);
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
    let pairs: Vec<Pair<'_>> = [
        "through the layer, memory store, first request",
        "through the layer, memory store, replay",
        "through the layer, SQLite NORMAL store, first request",
        "through the layer, SQLite NORMAL store, replay",
    ]
    .into_iter()
    .map(|subject| Pair {
        subject,
        baseline: "handler without the layer",
        goal: None,
    })
    .collect();
    summary("http", &pairs);
}
