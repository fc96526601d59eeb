//! Filling a store with many records at once, in the store's own current format, without calls.
//!
//! Every store is filled the same way: one record of the wanted [`Kind`] is made through the
//! store's own API (a claim and a completion, as a call makes it: the template), and that row or
//! hash is then copied under many random keys by the store's bulk path (SQLite: prepared
//! inserts of a copy of the template's row, a transaction per million; PostgreSQL: `INSERT … SELECT` of
//! the template's row over `unnest` of 10,000 keys a statement; Redis: the template's hash
//! `DUMP`ed and `RESTORE`d under each key, pipelined). Only the key changes, so whatever columns
//! or fields the store writes today (or after a migration) are copied as they are, and the store
//! reads the copies as real records (the caller checks one through `Records::get`). Keys are
//! random, as derived keys are, so the primary-key index grows as it does under calls.
//!
//! A tombstone (S33) is made the same way: a completed record past its time-to-live, turned into
//! a tombstone by `Records::prune` (its outcome dropped), then copied as it is.

use std::time::Duration;

use idem_runtime::store::{Claim, ClaimRequest, LeaseToken, Outcome, Written};
use idem_runtime::{Fingerprint, IdempotencyKey, Records, Store};
use uuid::Uuid;

/// The tool every record is made for.
pub const TOOL: &str = "charge";
/// The fingerprint every record is made with (a replay claims with the same one).
pub const FINGERPRINT: Fingerprint = Fingerprint([7; 32]);
/// A receipt as a tool returns it, 65 bytes of JSON (the executor's seal is not added: this is
/// the store's cost for an outcome of this size). `IDEMKIT_GROWTH_OUTCOME_BYTES=N` pads or cuts
/// the receipt's id to make the outcome `N` bytes (at least 49).
pub fn outcome() -> &'static [u8] {
    static OUTCOME: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    OUTCOME.get_or_init(|| {
        let head = r#"{"order_id":1234567,"amount_cents":1999,"receipt":"r_"#;
        let bytes: usize = std::env::var("IDEMKIT_GROWTH_OUTCOME_BYTES")
            .ok()
            .and_then(|b| b.parse().ok())
            .unwrap_or(65);
        let id = bytes.saturating_sub(head.len() + 2).max(1);
        let id: String = "0123456789".chars().cycle().take(id).collect();
        format!("{head}{id}\"}}").into_bytes()
    })
}
/// A live record's time-to-live.
pub const TTL: Duration = Duration::from_secs(24 * 3600);
/// A claim's lease.
pub const LEASE: Duration = Duration::from_secs(30);
/// Keys kept from a fill, for replays and the read-back check.
pub const SAMPLE: usize = 5_000;
/// Keys a PostgreSQL statement or a Redis pipeline carries.
const BATCH: usize = 10_000;

/// What a fill writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A completed record within its time-to-live: what a replay finds.
    Record,
    /// A completed record past its time-to-live (1 ms), its outcome still kept: what prune
    /// turns into a tombstone (S33).
    Expired,
    /// A tombstone (S33): a completed record past its time-to-live whose outcome a prune has
    /// dropped; a prune deletes it once the store's tombstone setting has passed too.
    Tombstone,
}

impl Kind {
    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "record" => Some(Kind::Record),
            "expired" => Some(Kind::Expired),
            "tombstone" => Some(Kind::Tombstone),
            _ => None,
        }
    }

    /// Makes the template record of this kind in `store` through its API; its key. A tombstone's
    /// template is a completed record past its time-to-live that `Records::prune` has turned into
    /// a tombstone (the store holding nothing else, the prune touches only it).
    pub async fn template<S: Store + Records>(self, store: &S) -> Result<IdempotencyKey, String> {
        let ttl = match self {
            Kind::Record => TTL,
            Kind::Expired | Kind::Tombstone => Duration::from_millis(1),
        };
        let key = fresh_key();
        call(store, key, ttl).await;
        if self != Kind::Record {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if self == Kind::Tombstone {
            let deleted = store.prune(usize::MAX).await.map_err(|e| e.to_string())?;
            if deleted != 0 {
                return Err(format!(
                    "the tombstone template: prune deleted {deleted} record(s) instead of keeping a tombstone"
                ));
            }
        }
        Ok(key)
    }
}

/// A random key, as a derived key is (the key space's order is unrelated to time).
pub fn fresh_key() -> IdempotencyKey {
    IdempotencyKey::from_uuid(Uuid::from_u128(fastrand::u128(..)))
}

/// A first call's store work: a claim that makes the record, its completion.
pub async fn call<S: Store>(store: &S, key: IdempotencyKey, ttl: Duration) {
    let req = ClaimRequest::new(key, TOOL, FINGERPRINT, LeaseToken::new(), LEASE, ttl);
    let claim = store.claim(&req).await.expect("claim");
    assert_eq!(claim, Claim::Acquired { takeover: None });
    let written = store
        .complete(key, req.token, Outcome::from(outcome()), ttl)
        .await
        .expect("complete");
    assert_eq!(written, Written::Applied);
}

/// `n` random keys, every `n / SAMPLE`th kept.
struct Keys {
    rng: fastrand::Rng,
    left: usize,
    every: usize,
    sample: Vec<IdempotencyKey>,
}

impl Keys {
    fn new(n: usize) -> Self {
        Keys {
            rng: fastrand::Rng::new(),
            left: n,
            every: (n / SAMPLE).max(1),
            sample: Vec::new(),
        }
    }

    /// Up to `max` more keys.
    fn batch(&mut self, max: usize) -> Vec<Uuid> {
        let take = max.min(self.left);
        let out: Vec<Uuid> = (0..take)
            .map(|_| Uuid::from_u128(self.rng.u128(..)))
            .collect();
        for (i, u) in out.iter().enumerate() {
            if (self.left - i).is_multiple_of(self.every) && self.sample.len() < SAMPLE {
                self.sample.push(IdempotencyKey::from_uuid(*u));
            }
        }
        self.left -= take;
        out
    }
}

/// SQLite: copies the template's row under `n` random keys with prepared inserts, a transaction
/// per million rows, on a connection of its own (the store closed meanwhile). Returns a sample of the keys.
pub fn sqlite(
    path: &std::path::Path,
    template: &IdempotencyKey,
    n: usize,
) -> rusqlite::Result<Vec<IdempotencyKey>> {
    let mut conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    // This connection's own settings, for the fill only: the store's are its own.
    conn.pragma_update(None, "synchronous", "OFF")?;
    conn.pragma_update(None, "cache_size", -1_000_000)?;
    let columns: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('records') ORDER BY cid")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let rest: Vec<String> = columns.iter().filter(|c| *c != "key").cloned().collect();
    let insert = format!(
        "INSERT INTO records (key, {cols}) SELECT ?1, {cols} FROM records WHERE key = ?2",
        cols = rest.join(", ")
    );
    let mut keys = Keys::new(n);
    // A transaction per million rows, each checkpointed: the WAL stays at a million rows' pages
    // rather than the whole file's.
    loop {
        let tx = conn.transaction()?;
        let mut added = 0;
        {
            let mut stmt = tx.prepare_cached(&insert)?;
            while added < 1_000_000 {
                let batch = keys.batch(BATCH);
                if batch.is_empty() {
                    break;
                }
                added += batch.len();
                for u in batch {
                    let key = IdempotencyKey::from_uuid(u);
                    assert_eq!(stmt.execute([key.as_str(), template.as_str()])?, 1);
                }
            }
        }
        tx.commit()?;
        conn.pragma_update(None, "wal_checkpoint", "TRUNCATE")?;
        if added == 0 {
            return Ok(keys.sample);
        }
    }
}

/// PostgreSQL: copies the template's row of `table` (`schema.table`, unquoted names) under `n`
/// random keys, 10,000 a statement (`INSERT … SELECT` over `unnest` of the keys), then `VACUUM
/// ANALYZE`s it (what autovacuum does to a table that grew). Returns a sample of the keys.
pub async fn postgres(
    client: &tokio_postgres::Client,
    schema: &str,
    table: &str,
    template: &IdempotencyKey,
    n: usize,
) -> Result<Vec<IdempotencyKey>, tokio_postgres::Error> {
    let columns: Vec<String> = client
        .query(
            "SELECT column_name::text FROM information_schema.columns
              WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position",
            &[&schema, &table],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let rest: Vec<String> = columns
        .iter()
        .filter(|c| *c != "key")
        .map(|c| format!("\"{c}\""))
        .collect();
    let t = format!("\"{schema}\".\"{table}\"");
    let insert = client
        .prepare(&format!(
            "INSERT INTO {t} (key, {cols})
             SELECT k, {tpl} FROM {t} AS tpl, unnest($1::uuid[]) AS k WHERE tpl.key = $2",
            cols = rest.join(", "),
            tpl = rest
                .iter()
                .map(|c| format!("tpl.{c}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .await?;
    let mut keys = Keys::new(n);
    loop {
        let batch = keys.batch(BATCH);
        if batch.is_empty() {
            break;
        }
        let added = client
            .execute(&insert, &[&batch, &template.as_uuid()])
            .await?;
        assert_eq!(added as usize, batch.len());
    }
    client.batch_execute(&format!("VACUUM ANALYZE {t}")).await?;
    Ok(keys.sample)
}

/// Redis: `DUMP`s the template's hash (`<prefix>rec:<key>`) and `RESTORE`s it under `n` random
/// keys with the template's remaining time-to-live, 10,000 a pipeline. Returns a sample.
pub async fn redis(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    template: &IdempotencyKey,
    n: usize,
) -> redis::RedisResult<Vec<IdempotencyKey>> {
    let name = format!("{prefix}rec:{}", template.as_str());
    let dump: Vec<u8> = redis::cmd("DUMP").arg(&name).query_async(conn).await?;
    let pttl: i64 = redis::cmd("PTTL").arg(&name).query_async(conn).await?;
    // -1: no time-to-live (restored without one).
    let ttl = pttl.max(0);
    let mut keys = Keys::new(n);
    loop {
        let batch = keys.batch(BATCH);
        if batch.is_empty() {
            break;
        }
        let mut pipe = redis::pipe();
        for u in &batch {
            pipe.cmd("RESTORE")
                .arg(format!("{prefix}rec:{}", u.hyphenated()))
                .arg(ttl)
                .arg(&dump)
                .ignore();
        }
        pipe.query_async::<()>(conn).await?;
    }
    Ok(keys.sample)
}

/// The memory store has no bulk path: `n` records made by calls (claim and complete), with the
/// kind's time-to-live; for tombstones, then turned into tombstones by one `Records::prune`.
/// Returns a sample of the keys.
pub async fn memory<S: Store + Records>(
    store: &S,
    kind: Kind,
    n: usize,
) -> Result<Vec<IdempotencyKey>, String> {
    let ttl = match kind {
        Kind::Record => TTL,
        Kind::Expired | Kind::Tombstone => Duration::from_millis(1),
    };
    let mut keys = Keys::new(n);
    loop {
        let batch = keys.batch(BATCH);
        if batch.is_empty() {
            break;
        }
        for u in batch {
            call(store, IdempotencyKey::from_uuid(u), ttl).await;
        }
    }
    if kind != Kind::Record {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if kind == Kind::Tombstone {
        let deleted = store.prune(usize::MAX).await.map_err(|e| e.to_string())?;
        assert_eq!(deleted, 0, "a fresh tombstone is kept, not deleted");
    }
    Ok(keys.sample)
}
