//! S28's cost per record: what keeping a verify tool's arguments with its record adds to the
//! bytes each store keeps, measured on records as the executor writes them (claimed, then
//! completed with a receipt). The figures are in benches/README.md ("Bytes per record"); run with
//! `-- --nocapture` to print them. Each test checks the cost stays the arguments' own length plus
//! a small bound, and that a record without arguments costs what it did.

mod servers;

use std::time::Duration;

use idem_runtime::store::{ClaimRequest, LeaseToken, Outcome};
use idem_runtime::{Fingerprint, IdempotencyKey, Store};

/// How many records each side writes.
const RECORDS: u64 = 2000;
/// A call of `charge(customer_id: &str, order_id: u64, amount_cents: u64)` as it is kept (the
/// benches' verify tool): 22 bytes.
const ARGUMENTS: &[u8] = br#"["cus_4242",1001,4200]"#;
const RECEIPT: &[u8] = br#"{"order_id":1001,"amount_cents":4200}"#;
const HOUR: Duration = Duration::from_secs(3600);

fn key(side: &str, i: u64) -> IdempotencyKey {
    IdempotencyKey::derive("charge", &[("side", &side), ("order", &i)])
}

/// Writes `RECORDS` completed records of `side`, with the arguments kept or not.
async fn write(store: &impl Store, side: &str, kept: bool) {
    for i in 0..RECORDS {
        let token = LeaseToken::new();
        let fingerprint = Fingerprint::of(&4200u64).unwrap();
        let req = ClaimRequest::new(key(side, i), "charge", fingerprint, token, HOUR, HOUR)
            .with_arguments(kept.then_some(ARGUMENTS));
        store.claim(&req).await.unwrap();
        let completed = store
            .complete(key(side, i), token, Outcome::from(RECEIPT), HOUR)
            .await;
        assert_eq!(completed.unwrap(), idem_runtime::store::Written::Applied);
    }
}

/// Prints and checks one store's figures: bytes per record without and with the arguments.
fn report(store: &str, without: f64, with: f64, bound: f64) {
    let added = with - without;
    println!(
        "{store}: {without:.1} bytes per record without arguments, {with:.1} with {} bytes of \
         arguments: +{added:.1}",
        ARGUMENTS.len()
    );
    assert!(
        added >= ARGUMENTS.len() as f64 * 0.9 && added <= ARGUMENTS.len() as f64 + bound,
        "{store}: keeping {} bytes of arguments added {added:.1} bytes per record",
        ARGUMENTS.len()
    );
}

/// SQLite: the file's pages (after `VACUUM`) per record, each side in a file of its own.
#[tokio::test]
async fn s28_the_bytes_sqlite_keeps_per_record_with_and_without_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let mut per_record = Vec::new();
    for (side, kept) in [("without", false), ("with", true)] {
        let path = dir.path().join(format!("{side}.db"));
        let store = idem_runtime::SqliteStore::open(&path).unwrap();
        write(&store, side, kept).await;
        drop(store);
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("VACUUM").unwrap();
        let pages: i64 = conn
            .query_row("PRAGMA page_count", [], |r| r.get(0))
            .unwrap();
        let size: i64 = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap();
        per_record.push((pages * size) as f64 / RECORDS as f64);
    }
    // A page holds whole rows: the file grows by pages, so allow a row's worth of slack.
    report("SQLite (file pages)", per_record[0], per_record[1], 12.0);
}

mod needs_postgres {
    use super::*;

    /// PostgreSQL: the rows' size as stored (`pg_column_size` of the row).
    #[tokio::test]
    async fn s28_the_bytes_postgres_keeps_per_record_with_and_without_arguments() {
        let url = servers::server_url("IDEMKIT_TEST_POSTGRES_URL", "PostgreSQL");
        let table = format!("size_{}", uuid::Uuid::new_v4().simple());
        let store = idem_runtime::PostgresStore::builder(&url)
            .schema("idemkit_test")
            .table(&table)
            .connect()
            .await
            .unwrap();
        write(&store, "without", false).await;
        write(&store, "with", true).await;
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let mut per_record = Vec::new();
        for kept in [false, true] {
            let row = client
                .query_one(
                    &format!(
                        "SELECT avg(pg_column_size(r.*))::float8 FROM idemkit_test.{table} r \
                         WHERE (arguments IS NOT NULL) = $1"
                    ),
                    &[&kept],
                )
                .await
                .unwrap();
            per_record.push(row.get::<_, f64>(0));
        }
        report("PostgreSQL (row)", per_record[0], per_record[1], 8.0);
    }
}

mod needs_redis {
    use super::*;

    /// Redis: `MEMORY USAGE` of each record's hash.
    #[tokio::test]
    async fn s28_the_bytes_redis_keeps_per_record_with_and_without_arguments() {
        let url = servers::server_url("IDEMKIT_TEST_REDIS_URL", "Redis");
        let prefix = format!("size:{}:", uuid::Uuid::new_v4().simple());
        let store = idem_runtime::RedisStore::builder(&url)
            .prefix(&prefix)
            .connect()
            .await
            .unwrap();
        write(&store, "without", false).await;
        write(&store, "with", true).await;
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let mut per_record = Vec::new();
        for side in ["without", "with"] {
            let mut total = 0u64;
            for i in 0..RECORDS {
                let name = format!("{prefix}rec:{}", key(side, i));
                let used: Option<u64> = redis::cmd("MEMORY")
                    .arg("USAGE")
                    .arg(&name)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                total += used.unwrap_or_else(|| panic!("no record at {name}"));
            }
            per_record.push(total as f64 / RECORDS as f64);
        }
        // A small hash is one listpack: the field name ("args") and its value with their
        // headers (about 28 bytes here), in one allocation rounded up to the allocator's size
        // class (jemalloc's steps are 64 bytes at this size): up to a step more.
        report("Redis (MEMORY USAGE)", per_record[0], per_record[1], 64.0);
    }
}
