//! The store a growth run measures, with what it takes to fill it, size it, and clean it up.

use std::path::PathBuf;
use std::time::Duration;

use idem_runtime::{IdempotencyKey, MemoryStore, PostgresStore, Records, RedisStore, SqliteStore};

/// A Redis store's grace: expired records stay until prune removes them.
const GRACE: Duration = Duration::from_secs(3600);

use super::fill::{self, Kind};

/// One store under measurement, with a raw connection to the same data for its bulk path.
#[allow(clippy::large_enum_variant)] // one per run of the bench
pub enum Bench {
    Memory(MemoryStore),
    Sqlite {
        /// `None` while the fill writes the file on a connection of its own.
        store: Option<SqliteStore>,
        path: PathBuf,
    },
    Postgres {
        store: PostgresStore,
        url: String,
        client: tokio_postgres::Client,
        schema: String,
        table: String,
    },
    Redis {
        store: RedisStore,
        url: String,
        conn: redis::aio::MultiplexedConnection,
        prefix: String,
    },
}

fn url(ours: &str, test: &str) -> Result<String, String> {
    std::env::var(ours)
        .or_else(|_| std::env::var(test))
        .map_err(|_| format!("set {ours} (or {test}) to measure that store"))
}

const SCHEMA: &str = "idemkit_growth";

/// Runs a prune, timed.
async fn timed(
    prune: impl std::future::Future<Output = Result<usize, idem_runtime::StoreError>>,
) -> Result<(usize, Duration), String> {
    let t = std::time::Instant::now();
    let n = prune.await.map_err(|e| e.to_string())?;
    Ok((n, t.elapsed()))
}

impl Bench {
    pub async fn open(name: &str, n: usize) -> Result<Bench, String> {
        let tag = format!("{n}_{:08x}", fastrand::u32(..));
        Ok(match name {
            "memory" => Bench::Memory(MemoryStore::new()),
            "sqlite" => {
                let path = std::env::temp_dir().join(format!("growth-{tag}.db"));
                // The library's defaults: `synchronous=FULL`, WAL.
                let store = SqliteStore::open(&path).map_err(|e| e.to_string())?;
                Bench::Sqlite {
                    store: Some(store),
                    path,
                }
            }
            "postgres" => {
                let url = url("IDEMKIT_GROWTH_POSTGRES_URL", "IDEMKIT_TEST_POSTGRES_URL")?;
                let table = format!("g_{tag}");
                let store = PostgresStore::builder(&url)
                    .schema(SCHEMA)
                    .table(&table)
                    .connect()
                    .await
                    .map_err(|e| e.to_string())?;
                let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::spawn(connection);
                Bench::Postgres {
                    store,
                    url,
                    client,
                    schema: SCHEMA.to_owned(),
                    table,
                }
            }
            "redis" => {
                let url = url("IDEMKIT_GROWTH_REDIS_URL", "IDEMKIT_TEST_REDIS_URL")?;
                let prefix = format!("growth:{tag}:");
                // A grace of an hour: expired records stay until prune removes them.
                let store = RedisStore::builder(&url)
                    .prefix(&prefix)
                    .expiry_grace(GRACE)
                    .connect()
                    .await
                    .map_err(|e| e.to_string())?;
                let mut conn = redis::Client::open(url.as_str())
                    .map_err(|e| e.to_string())?
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(|e| e.to_string())?;
                // A pipeline of 10,000 restores may wait behind the server's snapshot (`save`).
                conn.set_response_timeout(Duration::from_secs(300));
                Bench::Redis {
                    store,
                    url,
                    conn,
                    prefix,
                }
            }
            _ => {
                return Err(format!(
                    "no store `{name}`: memory, sqlite, postgres, redis"
                ));
            }
        })
    }

    fn sqlite(&self) -> &SqliteStore {
        match self {
            Bench::Sqlite { store: Some(s), .. } => s,
            _ => unreachable!("an open SQLite store"),
        }
    }

    pub async fn template(&self, kind: Kind) -> Result<IdempotencyKey, String> {
        match self {
            Bench::Memory(s) => kind.template(s).await,
            Bench::Sqlite { .. } => kind.template(self.sqlite()).await,
            Bench::Postgres { store, .. } => kind.template(store).await,
            Bench::Redis { store, .. } => kind.template(store).await,
        }
    }

    /// Fills the store with `n` records of `kind` (copies of `template`); a sample of their keys.
    pub async fn fill(
        &mut self,
        kind: Kind,
        template: &IdempotencyKey,
        n: usize,
    ) -> Result<Vec<IdempotencyKey>, String> {
        match self {
            Bench::Memory(s) => fill::memory(s, kind, n).await,
            Bench::Sqlite { store, path } => {
                drop(store.take());
                let sample = fill::sqlite(path, template, n).map_err(|e| e.to_string())?;
                *store = Some(SqliteStore::open(&*path).map_err(|e| e.to_string())?);
                Ok(sample)
            }
            Bench::Postgres {
                client,
                schema,
                table,
                ..
            } => fill::postgres(client, schema, table, template, n)
                .await
                .map_err(|e| e.to_string()),
            Bench::Redis { conn, prefix, .. } => fill::redis(conn, prefix, template, n)
                .await
                .map_err(|e| e.to_string()),
        }
    }

    /// What [`size`](Self::size) counts.
    pub fn size_measure(&self) -> &'static str {
        match self {
            Bench::Memory(_) => "the process's allocated bytes:",
            Bench::Sqlite { .. } => "the database file (WAL checkpointed):",
            Bench::Postgres { .. } => "pg_total_relation_size (heap, indexes, TOAST):",
            Bench::Redis { .. } => "INFO memory used_memory:",
        }
    }

    /// The store's size in bytes by [`size_measure`](Self::size_measure).
    pub async fn size(&mut self) -> i64 {
        match self {
            Bench::Memory(_) => super::held() as i64,
            Bench::Sqlite { path, .. } => {
                let wal = path.with_extension("db-wal");
                let len = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
                (len(path) + len(&wal)) as i64
            }
            Bench::Postgres {
                client,
                schema,
                table,
                ..
            } => client
                .query_one(
                    "SELECT pg_total_relation_size(format('%I.%I', $1::text, $2::text)::regclass)",
                    &[schema, table],
                )
                .await
                .expect("the table's size")
                .get(0),
            Bench::Redis { conn, .. } => {
                let info: String = redis::cmd("INFO")
                    .arg("memory")
                    .query_async(conn)
                    .await
                    .expect("INFO memory");
                info.lines()
                    .find_map(|l| l.strip_prefix("used_memory:"))
                    .and_then(|v| v.trim().parse().ok())
                    .expect("used_memory")
            }
        }
    }

    /// The durability the store runs with, as its server or file reports it.
    pub async fn durability(&mut self) -> String {
        match self {
            Bench::Memory(_) => "in process, not durable".to_owned(),
            Bench::Sqlite { path, .. } => {
                // The store's own connection is not reachable: its setting is the builder's
                // default, read back from the file's journal mode for the WAL part.
                let conn = rusqlite::Connection::open(&*path).expect("open");
                let mode: String = conn
                    .pragma_query_value(None, "journal_mode", |r| r.get(0))
                    .expect("journal_mode");
                format!("synchronous=FULL (the default), journal_mode={mode}")
            }
            Bench::Postgres { client, .. } => {
                let mut out = Vec::new();
                for setting in [
                    "fsync",
                    "synchronous_commit",
                    "full_page_writes",
                    "shared_buffers",
                ] {
                    let v: String = client
                        .query_one(&format!("SHOW {setting}"), &[])
                        .await
                        .expect("SHOW")
                        .get(0);
                    out.push(format!("{setting}={v}"));
                }
                out.join(", ")
            }
            Bench::Redis { conn, .. } => {
                let mut out = Vec::new();
                for setting in ["appendonly", "appendfsync", "save"] {
                    let v: Vec<String> = redis::cmd("CONFIG")
                        .arg("GET")
                        .arg(setting)
                        .query_async(conn)
                        .await
                        .expect("CONFIG GET");
                    out.push(format!(
                        "{setting}={:?}",
                        v.get(1).cloned().unwrap_or_default()
                    ));
                }
                out.join(", ")
            }
        }
    }

    pub async fn read_back(&self, kind: Kind, sample: &[IdempotencyKey]) {
        match self {
            Bench::Memory(s) => super::read_back(s, kind, sample).await,
            Bench::Sqlite { .. } => super::read_back(self.sqlite(), kind, sample).await,
            Bench::Postgres { store, .. } => super::read_back(store, kind, sample).await,
            Bench::Redis { store, .. } => super::read_back(store, kind, sample).await,
        }
    }

    /// `n` live completed records made by calls (claim and complete, the default time-to-live);
    /// their keys.
    pub async fn live(&self, n: usize) -> Vec<IdempotencyKey> {
        let mut keys = Vec::with_capacity(n);
        for _ in 0..n {
            let key = fill::fresh_key();
            match self {
                Bench::Memory(s) => fill::call(s, key, fill::TTL).await,
                Bench::Sqlite { .. } => fill::call(self.sqlite(), key, fill::TTL).await,
                Bench::Postgres { store, .. } => fill::call(store, key, fill::TTL).await,
                Bench::Redis { store, .. } => fill::call(store, key, fill::TTL).await,
            }
            keys.push(key);
        }
        keys
    }

    /// How many completed records still keep an outcome: SQLite and PostgreSQL count the rows
    /// (every row: `length(outcome) > 0`); Redis checks the sample's hashes (`HSTRLEN`), so its
    /// figure is of `sample` only; the memory store has no view of its map (`None`).
    pub async fn outcomes_kept(&mut self, sample: &[IdempotencyKey]) -> Option<usize> {
        match self {
            Bench::Memory(_) => None,
            Bench::Sqlite { path, .. } => {
                let conn = rusqlite::Connection::open(&*path).expect("open");
                let n: i64 = conn
                    .query_row(
                        "SELECT count(*) FROM records WHERE state = 'completed' AND length(outcome) > 0",
                        [],
                        |r| r.get(0),
                    )
                    .expect("count the outcomes kept");
                Some(n as usize)
            }
            Bench::Postgres {
                client,
                schema,
                table,
                ..
            } => {
                let n: i64 = client
                    .query_one(
                        &format!(
                            "SELECT count(*) FROM \"{schema}\".\"{table}\"
                              WHERE state = 'completed' AND length(outcome) > 0"
                        ),
                        &[],
                    )
                    .await
                    .expect("count the outcomes kept")
                    .get(0);
                Some(n as usize)
            }
            Bench::Redis { conn, prefix, .. } => {
                let mut pipe = redis::pipe();
                for key in sample {
                    pipe.cmd("HSTRLEN")
                        .arg(format!("{prefix}rec:{}", key.as_str()))
                        .arg("outcome");
                }
                let lens: Vec<i64> = pipe.query_async(conn).await.expect("HSTRLEN");
                Some(lens.iter().filter(|l| **l > 0).count())
            }
        }
    }

    /// Prunes through `Records::prune(usize::MAX)` with a store on the same data whose tombstone
    /// setting is `keep` (the memory store, which has no second handle: its own, with tokio's
    /// clock advanced past its default tombstone setting instead); how many it deleted, and the
    /// prune's time (the second store's opening not counted).
    pub async fn prune_with_tombstones(&self, keep: Duration) -> Result<(usize, Duration), String> {
        let err = |e: idem_runtime::StoreError| e.to_string();
        match self {
            Bench::Memory(s) => {
                tokio::time::pause();
                tokio::time::advance(idem_runtime::store::DEFAULT_TOMBSTONES + keep).await;
                timed(s.prune(usize::MAX)).await
            }
            Bench::Sqlite { path, .. } => {
                let store = SqliteStore::builder(path)
                    .tombstones(keep)
                    .open()
                    .map_err(err)?;
                tokio::time::sleep(keep).await;
                timed(store.prune(usize::MAX)).await
            }
            Bench::Postgres { url, table, .. } => {
                let store = PostgresStore::builder(url)
                    .schema(SCHEMA)
                    .table(table)
                    .tombstones(keep)
                    .connect()
                    .await
                    .map_err(err)?;
                tokio::time::sleep(keep).await;
                timed(store.prune(usize::MAX)).await
            }
            Bench::Redis { url, prefix, .. } => {
                let store = RedisStore::builder(url)
                    .prefix(prefix)
                    .expiry_grace(GRACE)
                    .tombstones(keep)
                    .connect()
                    .await
                    .map_err(err)?;
                tokio::time::sleep(keep).await;
                timed(store.prune(usize::MAX)).await
            }
        }
    }

    /// First calls and replays on this store and on `reference` (the same kind of store), in
    /// turn: `[reference, this]`.
    pub async fn latency(
        &self,
        sample: &[IdempotencyKey],
        reference: &Bench,
        small: &[IdempotencyKey],
        calls: usize,
    ) -> [super::Figures; 2] {
        match (reference, self) {
            (Bench::Sqlite { .. }, Bench::Sqlite { .. }) => {
                super::latency((reference.sqlite(), small), (self.sqlite(), sample), calls).await
            }
            (Bench::Postgres { store: a, .. }, Bench::Postgres { store: b, .. }) => {
                super::latency((a, small), (b, sample), calls).await
            }
            (Bench::Redis { store: a, .. }, Bench::Redis { store: b, .. }) => {
                super::latency((a, small), (b, sample), calls).await
            }
            (Bench::Memory(a), Bench::Memory(b)) => {
                super::latency((a, small), (b, sample), calls).await
            }
            _ => unreachable!("two stores of one kind"),
        }
    }

    /// One `Records::prune(usize::MAX)` with the store's own settings (tombstones kept 400
    /// days, the default); how many records it deleted.
    pub async fn prune(&self) -> usize {
        let pruned = match self {
            Bench::Memory(s) => s.prune(usize::MAX).await,
            Bench::Sqlite { .. } => self.sqlite().prune(usize::MAX).await,
            Bench::Postgres { store, .. } => store.prune(usize::MAX).await,
            Bench::Redis { store, .. } => store.prune(usize::MAX).await,
        };
        pruned.expect("prune")
    }

    /// Deletes what the run wrote: the database files, the tables, the keys.
    pub async fn clean(self) {
        match self {
            Bench::Memory(_) => {}
            Bench::Sqlite { store, path } => {
                drop(store);
                for ext in ["db", "db-wal", "db-shm"] {
                    let _ = std::fs::remove_file(path.with_extension(ext));
                }
            }
            Bench::Postgres {
                store,
                client,
                schema,
                table,
                ..
            } => {
                drop(store);
                client
                    .batch_execute(&format!(
                        "DROP TABLE \"{schema}\".\"{table}\", \"{schema}\".\"{table}_operations\", \
                         \"{schema}\".\"{table}_schema\""
                    ))
                    .await
                    .expect("drop the run's tables");
            }
            Bench::Redis {
                store,
                mut conn,
                prefix,
                ..
            } => {
                drop(store);
                let mut cursor = 0u64;
                loop {
                    let (next, names): (u64, Vec<String>) = redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(format!("{prefix}*"))
                        .arg("COUNT")
                        .arg(10_000)
                        .query_async(&mut conn)
                        .await
                        .expect("SCAN");
                    if !names.is_empty() {
                        let _: () = redis::cmd("UNLINK")
                            .arg(&names)
                            .query_async(&mut conn)
                            .await
                            .expect("UNLINK");
                    }
                    cursor = next;
                    if cursor == 0 {
                        break;
                    }
                }
            }
        }
    }
}
