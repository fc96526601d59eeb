//! S33: what a tombstone costs on each store, measured. Each test writes `N` completed records of
//! tool `payments.charge` under tenant `acme` with a 200-byte outcome, lets their time-to-live
//! pass, prunes (which keeps them as tombstones, without their outcomes, under the default
//! setting), and measures the store's own account of its size: the memory store by the bytes its
//! allocations hold (a counting allocator), SQLite by the file's pages after `VACUUM`, PostgreSQL
//! by `pg_total_relation_size` of the table (heap, TOAST and indexes) after `VACUUM FULL`, Redis
//! by `MEMORY USAGE` of each key. Each prints bytes per record before the prune (completed, past
//! the ttl) and after it (tombstones), and asserts the tombstone is smaller and within a bound;
//! `benches/README.md` quotes the printed figures (`cargo test -p idem-runtime --all-features
//! --test tombstone_bytes -- --nocapture --test-threads 1`).

mod servers;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use idem_runtime::store::{ClaimRequest, LeaseToken, Outcome, RecordFilter, StateKind, Written};
use idem_runtime::{Fingerprint, IdempotencyKey, Records, Store};

/// Bytes held by the allocations of each thread (the memory store's measure). Per thread: the
/// other tests of this binary run on threads of their own and allocate meanwhile, which a
/// process-wide count took into the memory store's figure (522 bytes per tombstone once, in a
/// run with the tests in parallel); the memory store's test runs on tokio's current-thread
/// runtime, on its own thread, so what it counts is its store's.
struct Counting;

thread_local! {
    // Const-initialised and without a destructor: reading it never allocates.
    static HELD: Cell<isize> = const { Cell::new(0) };
}

fn count(bytes: isize) {
    // `try_with`: a thread being torn down still frees memory.
    let _ = HELD.try_with(|held| held.set(held.get() + bytes));
}

fn held() -> isize {
    HELD.with(Cell::get)
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size().cast_signed());
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-layout.size().cast_signed());
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const N: u64 = 2_000;
const TTL: Duration = Duration::from_millis(200);

fn key(n: u64) -> IdempotencyKey {
    IdempotencyKey::derive("payments.charge", &[("order", &n)]).for_tenant("acme")
}

/// A receipt of 200 bytes, as a provider's answer might be.
fn outcome(n: u64) -> Outcome {
    let text = format!(
        r#"{{"id":"ch_{n:012}","amount":4200,"currency":"eur","note":"{}"}}"#,
        "x".repeat(200)
    );
    Outcome::from(text.as_bytes()[..200].to_vec())
}

/// Writes the `N` completed records, and waits out their time-to-live.
async fn write(store: &(impl Store + Records)) {
    for n in 0..N {
        let token = LeaseToken::new();
        let req = ClaimRequest::new(
            key(n),
            "payments.charge",
            Fingerprint::of(&n).unwrap(),
            token,
            TTL,
            TTL,
        )
        .with_tenant(Some("acme".into()));
        store.claim(&req).await.unwrap();
        assert_eq!(
            store
                .complete(key(n), token, outcome(n), TTL)
                .await
                .unwrap(),
            Written::Applied
        );
    }
    tokio::time::sleep(TTL * 2).await;
}

/// Prunes until nothing more changes (outcomes dropped, nothing deleted under the default
/// setting), and checks every record is a tombstone.
async fn prune(store: &impl Records) {
    assert_eq!(
        store.prune(usize::MAX).await.unwrap(),
        0,
        "no tombstone goes"
    );
    let tombstones = store
        .list(
            &RecordFilter::new()
                .state(StateKind::Tombstone)
                .limit(N as usize + 1),
        )
        .await
        .unwrap();
    assert_eq!(tombstones.len() as u64, N);
}

fn report(store: &str, before: f64, after: f64, bound: f64) {
    println!(
        "{store}: {before:.0} bytes per completed record past its ttl, {after:.0} bytes per tombstone \
         ({N} records, 200-byte outcomes)"
    );
    assert!(after < before, "{store}: a tombstone keeps no outcome");
    assert!(
        after <= bound,
        "{store}: {after:.0} bytes per tombstone, over {bound}"
    );
}

#[tokio::test]
async fn s33_bytes_per_tombstone_memory() {
    let start = held();
    let store = idem_runtime::MemoryStore::new();
    write(&store).await;
    let before = (held() - start) as f64 / N as f64;
    prune(&store).await;
    let after = (held() - start) as f64 / N as f64;
    report("memory", before, after, 256.0);
}

#[tokio::test]
async fn s33_bytes_per_tombstone_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemkit.db");
    let store = idem_runtime::SqliteStore::open(&path).unwrap();
    let size = || {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("VACUUM").unwrap();
        conn.query_row(
            "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
            [],
            |row| row.get::<_, i64>(0),
        )
        .unwrap()
    };
    let empty = size();
    write(&store).await;
    let before = (size() - empty) as f64 / N as f64;
    prune(&store).await;
    let after = (size() - empty) as f64 / N as f64;
    report("SQLite", before, after, 320.0);
}

mod needs_postgres {
    use super::*;

    #[tokio::test]
    async fn s33_bytes_per_tombstone_postgres() {
        let url = servers::server_url("IDEMKIT_TEST_POSTGRES_URL", "PostgreSQL");
        let table = format!("bytes_{}", uuid::Uuid::new_v4().simple());
        let table = &table[..30];
        let store = idem_runtime::PostgresStore::builder(url.clone())
            .schema("idemkit_test")
            .table(table)
            .connect()
            .await
            .unwrap();
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let size = async || {
            client
                .batch_execute(&format!("VACUUM FULL idemkit_test.\"{table}\""))
                .await
                .unwrap();
            client
                .query_one(
                    &format!("SELECT pg_total_relation_size('idemkit_test.\"{table}\"')"),
                    &[],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
        };
        let empty = size().await;
        write(&store).await;
        let before = (size().await - empty) as f64 / N as f64;
        prune(&store).await;
        let after = (size().await - empty) as f64 / N as f64;
        report("PostgreSQL", before, after, 512.0);
    }
}

mod needs_redis {
    use super::*;

    #[tokio::test]
    async fn s33_bytes_per_tombstone_redis() {
        let url = servers::server_url("IDEMKIT_TEST_REDIS_URL", "Redis");
        let prefix = format!("bytes:{}:", uuid::Uuid::new_v4().simple());
        let store = idem_runtime::RedisStore::builder(url.clone())
            .prefix(prefix.clone())
            .connect()
            .await
            .unwrap();
        let client = redis::Client::open(url).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let mut size = async || {
            let mut total = 0i64;
            for n in 0..N {
                let name = format!("{prefix}rec:{}", key(n));
                let used: Option<i64> = redis::cmd("MEMORY")
                    .arg("USAGE")
                    .arg(&name)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                total += used.expect("the record's key exists");
            }
            total
        };
        write(&store).await;
        let before = size().await as f64 / N as f64;
        prune(&store).await;
        let after = size().await as f64 / N as f64;
        report("Redis", before, after, 512.0);
    }
}
