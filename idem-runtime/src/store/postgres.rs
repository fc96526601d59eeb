//! The PostgreSQL store: many agent workers on many machines share one table.
//!
//! Each operation is one short statement on a pooled connection (tokio-postgres +
//! deadpool-postgres). The server's `now()` is the only clock, so workers' clocks may drift
//! freely; the row's lease token is the fence, so a holder whose lease was taken over cannot
//! write; no advisory locks are used, so the store also works behind transaction-pooling proxies
//! (PgBouncer in `transaction` mode).
//!
//! ```no_run
//! # async fn demo() -> Result<(), idem_runtime::StoreError> {
//! use idem_runtime::{Idem, PostgresStore};
//!
//! let store = PostgresStore::builder("postgres://app@db.internal/app")
//!     .schema("idemkit") // optional: a schema of its own (created if missing)
//!     .table("records") // optional: the table's name; tenants may each have their own
//!     .max_connections(8)
//!     .connect()
//!     .await?;
//! let idem = Idem::new(store);
//! # let _ = idem; Ok(()) }
//! ```
//!
//! `connect` creates the tables on first use and migrates them forward (a version table records
//! where the schema stands); a build that finds a newer schema refuses to run rather than guess.
//!
//! No TLS is compiled in. For a server off the machine, build a `deadpool_postgres::Pool` with
//! the TLS connector you trust (`tokio-postgres-rustls`, `postgres-native-tls`) and pass it to
//! [`PostgresStore::from_pool`].
//!
//! # A lost connection
//!
//! When the connection dies under a statement (a terminated backend, a failover, a reset socket),
//! the store sends the statement again on a fresh connection, twice at most, then reports
//! [`StoreErrorKind::Unavailable`]. That is safe because the caller's lease token makes every
//! write repeatable: a claim that already went through finds its own token and is granted again,
//! and a `complete` or `mark_ambiguous` repeated by the same holder writes the same thing again.
//! (Beyond what the memory store does, then: a second `complete` with the same token is applied,
//! not fenced.)
//!
//! # Tables
//!
//! With the default name `idemkit`: `idemkit` (one row per key), `idemkit_operations` (operation
//! ids) and `idemkit_schema` (the schema version). Expired rows are invisible at once and
//! deleted by [`Store::prune`], which a program calls now and then.

use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod};
use tokio_postgres::error::SqlState;
use tokio_postgres::{NoTls, Row};
use uuid::Uuid;

use super::{
    Claim, ClaimRequest, Existing, ExistingState, LeaseToken, Record, RecordState, Store, Written,
};
use crate::error::{StoreError, StoreErrorKind};
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;

/// The schema version this build writes and understands.
const SCHEMA_VERSION: i32 = 1;

/// How often an operation is sent again after the connection it ran on was lost. Every statement
/// is safe to repeat: the caller's lease token recognises a claim or write that already applied.
const RETRIES_ON_LOST_CONNECTION: u32 = 2;

/// How many expired rows one prune statement deletes.
const PRUNE_BATCH: i64 = 1000;

/// Records claims and outcomes in a PostgreSQL table. See the [module docs](self).
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    sql: Sql,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("table", &self.sql.records)
            .finish_non_exhaustive()
    }
}

/// Configures a [`PostgresStore`]: where it connects and which table it uses.
#[must_use]
#[derive(Debug, Clone)]
pub struct PostgresStoreBuilder {
    url: String,
    schema: Option<String>,
    table: String,
    max_connections: usize,
    connect_timeout: Duration,
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user:password@host:port/database`, or the `key=value`
    /// form) with the default table `idemkit`, creating or migrating it.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::builder(url).connect().await
    }

    /// A builder for a store at `url`, to choose the schema, table and pool size.
    pub fn builder(url: impl Into<String>) -> PostgresStoreBuilder {
        PostgresStoreBuilder {
            url: url.into(),
            schema: None,
            table: "idemkit".to_owned(),
            max_connections: 16,
            connect_timeout: Duration::from_secs(5),
        }
    }

    /// A store on a pool you built (for TLS, or a pool shared with the rest of the program), in
    /// `schema` (`None`: the connection's search path) and `table`; creates or migrates the table.
    pub async fn from_pool(
        pool: Pool,
        schema: Option<&str>,
        table: &str,
    ) -> Result<Self, StoreError> {
        let sql = Sql::new(schema, table)?;
        let store = PostgresStore { pool, sql };
        store.migrate().await?;
        Ok(store)
    }

    /// The pool the store runs on.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Creates the tables or brings them to [`SCHEMA_VERSION`], in one transaction. Concurrent
    /// workers starting at once queue on the version table's lock (not an advisory lock).
    async fn migrate(&self) -> Result<(), StoreError> {
        let mut last = None;
        for _ in 0..5 {
            let mut client = self.pool.get().await.map_err(pool_error)?;
            match self.migrate_on(&mut client).await {
                Ok(()) => return Ok(()),
                Err(Migration::Store(e)) => return Err(e),
                // Two workers' `CREATE … IF NOT EXISTS` raced; the loser tries again and finds it.
                Err(Migration::Raced(e)) => last = Some(e),
                Err(Migration::Pg(e)) => return Err(pg_error(e, "creating the tables")),
            }
        }
        Err(pg_error(
            last.expect("a race was recorded"),
            "creating the tables",
        ))
    }

    async fn migrate_on(&self, client: &mut Object) -> Result<(), Migration> {
        let tx = client.transaction().await?;
        if let Some((schema, name)) = &self.sql.schema {
            // Only when missing: `CREATE SCHEMA IF NOT EXISTS` needs CREATE on the database even
            // when the schema exists, which a least-privileged role does not have.
            let exists = tx
                .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[name])
                .await?
                .is_some();
            if !exists {
                tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                    .await?;
            }
        }
        let version_table = &self.sql.version;
        tx.batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {version_table} (
                 singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
                 version integer NOT NULL
             );
             LOCK TABLE {version_table} IN SHARE ROW EXCLUSIVE MODE;"
        ))
        .await?;
        let found: Option<i32> = tx
            .query_opt(&format!("SELECT version FROM {version_table}"), &[])
            .await?
            .map(|row| row.get(0));
        match found {
            Some(v) if v == SCHEMA_VERSION => return Ok(()),
            Some(v) if v > SCHEMA_VERSION => {
                return Err(Migration::Store(StoreError::new(
                    StoreErrorKind::Incompatible,
                    format!(
                        "the table {} is at schema version {v}, newer than this build of idemkit understands \
                         ({SCHEMA_VERSION}); upgrade idemkit on this worker, or point it at another table",
                        self.sql.records
                    ),
                )));
            }
            _ => {}
        }
        // Version 1: one row per key; the token fences writes; expired rows are invisible.
        let (records, operations) = (&self.sql.records, &self.sql.operations);
        let index = quote(&format!("{}_expires_at", self.sql.table));
        tx.batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {records} (
                 key          uuid PRIMARY KEY,
                 tool         text NOT NULL,
                 fingerprint  bytea NOT NULL,
                 state        text NOT NULL CHECK (state IN ('running', 'completed', 'ambiguous')),
                 token        uuid NOT NULL,
                 lease_until  timestamptz NOT NULL,
                 outcome      bytea,
                 note         text,
                 expires_at   timestamptz NOT NULL
             );
             CREATE INDEX IF NOT EXISTS {index} ON {records} (expires_at);
             CREATE TABLE IF NOT EXISTS {operations} (
                 name  text PRIMARY KEY,
                 id    uuid NOT NULL
             );
             INSERT INTO {version_table} (version) VALUES ({SCHEMA_VERSION})
                 ON CONFLICT (singleton) DO UPDATE SET version = EXCLUDED.version;"
        ))
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Runs `op` on a pooled connection; sends it again on a fresh connection when the one it
    /// ran on was lost (every statement here is safe to repeat, see the module docs).
    async fn run<T, F, Fut>(&self, what: &'static str, op: F) -> Result<T, StoreError>
    where
        F: Fn(Object) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let mut attempt = 0;
        loop {
            let outcome = match self.pool.get().await {
                Ok(client) => op(client).await.map_err(Failed::Pg),
                Err(e) => Err(Failed::Pool(e)),
            };
            let err = match outcome {
                Ok(value) => return Ok(value),
                Err(err) => err,
            };
            if attempt < RETRIES_ON_LOST_CONNECTION && err.connection_lost() {
                attempt += 1;
                tracing::warn!(what, attempt, error = %err, "postgres connection lost; sending the statement again");
                continue;
            }
            return Err(match err {
                Failed::Pg(e) => pg_error(e, what),
                Failed::Pool(e) => pool_error(e),
            });
        }
    }
}

impl PostgresStoreBuilder {
    /// The schema that holds the tables (created if missing). Default: the connection's
    /// search path (usually `public`).
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// The records table's name (letters, digits, `_`; at most 40). Default `idemkit`. Its
    /// companions are named after it: `<table>_operations`, `<table>_schema`.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// The pool's size. Default 16.
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// How long opening one connection may take. Default 5 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Opens the pool, then creates or migrates the tables.
    pub async fn connect(self) -> Result<PostgresStore, StoreError> {
        let mut config = tokio_postgres::Config::from_str(&self.url).map_err(|e| {
            StoreError::new(
                StoreErrorKind::Other,
                "the PostgreSQL URL does not parse; expected postgres://user:password@host:port/database",
            )
            .with_source(e)
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(self.connect_timeout);
        }
        if config.get_application_name().is_none() {
            config.application_name("idemkit");
        }
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                // A terminated backend is noticed before its connection is handed out again.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(self.max_connections)
            .build()
            .map_err(|e| {
                StoreError::new(
                    StoreErrorKind::Other,
                    "the connection pool could not be built",
                )
                .with_source(e)
            })?;
        PostgresStore::from_pool(pool, self.schema.as_deref(), &self.table).await
    }
}

#[async_trait::async_trait]
impl Store for PostgresStore {
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let key = req.key.as_uuid();
        let fingerprint = &req.fingerprint.0[..];
        let token = req.token.0;
        let (lease, ttl) = (micros(req.lease), micros(req.ttl));
        // The row may change between the two statements (completed, released, expired); when it
        // turns out to be claimable after all, claim again. Each round trip sees progress by
        // another caller, so a few rounds always settle.
        for _ in 0..8 {
            let acquired = self
                .run("claim", |c| async move {
                    let stmt = c.prepare_cached(&self.sql.claim).await?;
                    c.query_opt(
                        &stmt,
                        &[&key, &req.tool, &fingerprint, &token, &lease, &ttl],
                    )
                    .await
                })
                .await?;
            if acquired.is_some() {
                return Ok(Claim::Acquired);
            }
            let existing = self
                .run("claim", |c| async move {
                    let stmt = c.prepare_cached(&self.sql.existing).await?;
                    c.query_opt(&stmt, &[&key]).await
                })
                .await?;
            let Some(row) = existing else {
                continue; // Gone (released or expired) since the claim: claim again.
            };
            let existing = existing_of(&row)?;
            let same = existing.fingerprint == req.fingerprint;
            match existing.state {
                ExistingState::Ambiguous if same => continue,
                ExistingState::Running { lease_remaining } if same && lease_remaining.is_zero() => {
                    continue;
                }
                _ => return Ok(Claim::Existing(existing)),
            }
        }
        Err(StoreError::unavailable(
            "the record changed under every claim (8 rounds); the table is under heavy contention on this key, retry the call",
        ))
    }

    async fn complete(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        outcome: &[u8],
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        let (key, token, ttl) = (key.as_uuid(), token.0, micros(ttl));
        let n = self
            .run("complete", |c| async move {
                let stmt = c.prepare_cached(&self.sql.complete).await?;
                c.execute(&stmt, &[&key, &token, &outcome, &ttl]).await
            })
            .await?;
        Ok(Written::from_changed(n))
    }

    async fn renew(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> Result<Written, StoreError> {
        let (key, token, lease) = (key.as_uuid(), token.0, micros(lease));
        let n = self
            .run("renew", |c| async move {
                let stmt = c.prepare_cached(&self.sql.renew).await?;
                c.execute(&stmt, &[&key, &token, &lease]).await
            })
            .await?;
        Ok(Written::from_changed(n))
    }

    async fn release(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
    ) -> Result<Written, StoreError> {
        let (key, token) = (key.as_uuid(), token.0);
        let n = self
            .run("release", |c| async move {
                let stmt = c.prepare_cached(&self.sql.release).await?;
                c.execute(&stmt, &[&key, &token]).await
            })
            .await?;
        Ok(Written::from_changed(n))
    }

    async fn mark_ambiguous(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        let (key, token, ttl) = (key.as_uuid(), token.0, micros(ttl));
        let n = self
            .run("mark_ambiguous", |c| async move {
                let stmt = c.prepare_cached(&self.sql.mark_ambiguous).await?;
                c.execute(&stmt, &[&key, &token, &note, &ttl]).await
            })
            .await?;
        Ok(Written::from_changed(n))
    }

    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        let key = key.as_uuid();
        let row = self
            .run("get", |c| async move {
                let stmt = c.prepare_cached(&self.sql.get).await?;
                c.query_opt(&stmt, &[&key]).await
            })
            .await?;
        row.map(|row| record_of(&row)).transpose()
    }

    async fn prune(&self, limit: usize) -> Result<usize, StoreError> {
        let mut pruned = 0usize;
        while pruned < limit {
            let batch = PRUNE_BATCH.min((limit - pruned) as i64);
            let n = self
                .run("prune", |c| async move {
                    let stmt = c.prepare_cached(&self.sql.prune).await?;
                    c.execute(&stmt, &[&batch]).await
                })
                .await? as usize;
            pruned += n;
            if (n as i64) < batch {
                break;
            }
        }
        Ok(pruned)
    }

    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError> {
        let row = self
            .run("operation_id", |c| async move {
                let stmt = c.prepare_cached(&self.sql.operation_id).await?;
                c.query_one(&stmt, &[&name, &fresh]).await
            })
            .await?;
        Ok(row.get(0))
    }
}

/// The statements, with the table names filled in once.
#[derive(Clone)]
struct Sql {
    /// The schema, quoted and as named.
    schema: Option<(String, String)>,
    table: String,
    records: String,
    operations: String,
    version: String,
    claim: String,
    existing: String,
    complete: String,
    renew: String,
    release: String,
    mark_ambiguous: String,
    get: String,
    prune: String,
    operation_id: String,
}

impl Sql {
    fn new(schema: Option<&str>, table: &str) -> Result<Self, StoreError> {
        let table = identifier(table)?;
        let schema = schema.map(identifier).transpose()?.map(|s| (quote(&s), s));
        // The derived names (`<table>_operations`) fit: the checked name has at most 40 bytes.
        let qualify = |name: &str| match &schema {
            Some((s, _)) => format!("{s}.{}", quote(name)),
            None => quote(name),
        };
        let t = qualify(&table);
        let us = "* interval '1 microsecond'";
        Ok(Sql {
            records: t.clone(),
            operations: qualify(&format!("{table}_operations")),
            version: qualify(&format!("{table}_schema")),
            // absent → running; expired → running (a new record); same fingerprint and
            // (lease over, or ambiguous, or already ours: a retried claim) → running (take over).
            // Anything else is left alone and returns no row.
            claim: format!(
                "INSERT INTO {t} AS r (key, tool, fingerprint, state, token, lease_until, expires_at)
                 VALUES ($1, $2, $3, 'running', $4, now() + $5::int8 {us}, now() + $6::int8 {us})
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
            // The live record a claim did not take (none: it went away meanwhile).
            existing: format!(
                "SELECT fingerprint, state, outcome,
                        GREATEST(EXTRACT(EPOCH FROM lease_until - now()) * 1000000, 0)::int8
                   FROM {t} WHERE key = $1 AND expires_at > now()"
            ),
            // running (our token) → completed, kept for ttl; completed by us already → the same
            // (a retry of this statement after a lost reply).
            complete: format!(
                "UPDATE {t} SET state = 'completed', outcome = $3, note = NULL,
                                expires_at = now() + $4::int8 {us}
                  WHERE key = $1 AND token = $2 AND expires_at > now()
                    AND state IN ('running', 'completed')"
            ),
            // running (our token) → running, the lease ending $3 µs from now; the expiry moved
            // to the lease end if that is later.
            renew: format!(
                "UPDATE {t} SET lease_until = now() + $3::int8 {us},
                                expires_at = GREATEST(expires_at, now() + $3::int8 {us})
                  WHERE key = $1 AND token = $2 AND expires_at > now() AND state = 'running'"
            ),
            // running (our token) → absent.
            release: format!(
                "DELETE FROM {t}
                  WHERE key = $1 AND token = $2 AND expires_at > now() AND state = 'running'"
            ),
            // running (our token) → ambiguous, kept for ttl; ambiguous by us already → the same.
            mark_ambiguous: format!(
                "UPDATE {t} SET state = 'ambiguous', note = $3, outcome = NULL,
                                expires_at = now() + $4::int8 {us}
                  WHERE key = $1 AND token = $2 AND expires_at > now()
                    AND state IN ('running', 'ambiguous')"
            ),
            // The live record, for operators.
            get: format!(
                "SELECT tool, fingerprint, state, token, outcome, note,
                        GREATEST(EXTRACT(EPOCH FROM lease_until - now()) * 1000000, 0)::int8,
                        GREATEST(EXTRACT(EPOCH FROM expires_at - now()) * 1000000, 0)::int8
                   FROM {t} WHERE key = $1 AND expires_at > now()"
            ),
            // expired → absent, one batch; rows another pruner holds are skipped, not waited for.
            prune: format!(
                "DELETE FROM {t} WHERE key IN (
                     SELECT key FROM {t} WHERE expires_at <= now()
                      LIMIT $1 FOR UPDATE SKIP LOCKED)"
            ),
            // absent → `fresh`; present → unchanged. Returns the stored id either way (the no-op
            // update makes RETURNING see a row a concurrent caller just inserted).
            operation_id: format!(
                "INSERT INTO {ops} (name, id) VALUES ($1, $2)
                 ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name
                 RETURNING id",
                ops = qualify(&format!("{table}_operations"))
            ),
            schema,
            table,
        })
    }
}

enum Migration {
    Store(StoreError),
    Raced(tokio_postgres::Error),
    Pg(tokio_postgres::Error),
}

impl From<tokio_postgres::Error> for Migration {
    fn from(e: tokio_postgres::Error) -> Self {
        match e.code() {
            Some(c) if *c == SqlState::UNIQUE_VIOLATION || *c == SqlState::DUPLICATE_TABLE => {
                Migration::Raced(e)
            }
            _ => Migration::Pg(e),
        }
    }
}

enum Failed {
    Pg(tokio_postgres::Error),
    Pool(PoolError),
}

impl Failed {
    /// Whether the connection went away (terminated backend, reset socket, server restart), so
    /// the same statement may succeed on a fresh one.
    fn connection_lost(&self) -> bool {
        match self {
            Failed::Pg(e) => pg_connection_lost(e),
            Failed::Pool(PoolError::Backend(e)) => pg_connection_lost(e),
            Failed::Pool(_) => false,
        }
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Pg(e) => write!(f, "{e}"),
            Failed::Pool(e) => write!(f, "{e}"),
        }
    }
}

fn pg_connection_lost(e: &tokio_postgres::Error) -> bool {
    use std::error::Error as _;
    e.is_closed()
        || matches!(e.code(), Some(c) if *c == SqlState::ADMIN_SHUTDOWN
            || *c == SqlState::CRASH_SHUTDOWN
            || *c == SqlState::CANNOT_CONNECT_NOW)
        || e.source().is_some_and(|s| s.is::<std::io::Error>())
}

fn pg_error(e: tokio_postgres::Error, what: &str) -> StoreError {
    let kind = if e.as_db_error().is_none() || pg_connection_lost(&e) {
        StoreErrorKind::Unavailable
    } else if e.code() == Some(&SqlState::UNDEFINED_TABLE)
        || e.code() == Some(&SqlState::UNDEFINED_COLUMN)
    {
        StoreErrorKind::Incompatible
    } else {
        StoreErrorKind::Other
    };
    let said = match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    };
    StoreError::new(
        kind,
        format!(
            "PostgreSQL failed while {what}: {said}; check that the server is up and the role may use the table"
        ),
    )
    .with_source(e)
}

fn pool_error(e: PoolError) -> StoreError {
    StoreError::unavailable(format!(
        "no PostgreSQL connection could be had: {e}; check the URL, that the server is up, and that it accepts this role"
    ))
    .with_source(e)
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn fingerprint_of(bytes: &[u8]) -> Result<Fingerprint, StoreError> {
    <[u8; 32]>::try_from(bytes).map(Fingerprint).map_err(|_| {
        StoreError::corrupt(format!(
            "a row's fingerprint has {} bytes, not 32; the row was not written by idemkit: delete it",
            bytes.len()
        ))
    })
}

/// Reads `fingerprint, state, outcome, lease_remaining_us`.
fn existing_of(row: &Row) -> Result<Existing, StoreError> {
    let fingerprint = fingerprint_of(row.try_get(0).map_err(corrupt_row)?)?;
    let state: &str = row.try_get(1).map_err(corrupt_row)?;
    let outcome: Option<Vec<u8>> = row.try_get(2).map_err(corrupt_row)?;
    let lease_us: i64 = row.try_get(3).map_err(corrupt_row)?;
    let state = match (state, outcome) {
        ("running", _) => ExistingState::Running {
            lease_remaining: Duration::from_micros(lease_us.max(0) as u64),
        },
        ("completed", Some(outcome)) => ExistingState::Completed { outcome },
        ("ambiguous", _) => ExistingState::Ambiguous,
        (state, _) => return Err(bad_state(state)),
    };
    Ok(Existing { fingerprint, state })
}

/// Reads `tool, fingerprint, state, token, outcome, note, lease_remaining_us, expires_in_us`.
fn record_of(row: &Row) -> Result<Record, StoreError> {
    let tool: String = row.try_get(0).map_err(corrupt_row)?;
    let fingerprint = fingerprint_of(row.try_get(1).map_err(corrupt_row)?)?;
    let state: &str = row.try_get(2).map_err(corrupt_row)?;
    let token: Uuid = row.try_get(3).map_err(corrupt_row)?;
    let outcome: Option<Vec<u8>> = row.try_get(4).map_err(corrupt_row)?;
    let note: Option<String> = row.try_get(5).map_err(corrupt_row)?;
    let lease_us: i64 = row.try_get(6).map_err(corrupt_row)?;
    let expires_us: i64 = row.try_get(7).map_err(corrupt_row)?;
    let state = match (state, outcome) {
        ("running", _) => RecordState::Running {
            token: LeaseToken(token),
            lease_remaining: Duration::from_micros(lease_us.max(0) as u64),
        },
        ("completed", Some(outcome)) => RecordState::Completed { outcome },
        ("ambiguous", _) => RecordState::Ambiguous {
            note: note.unwrap_or_default(),
        },
        (state, _) => return Err(bad_state(state)),
    };
    Ok(Record {
        tool,
        fingerprint,
        state,
        expires_in: Duration::from_micros(expires_us.max(0) as u64),
    })
}

fn bad_state(state: &str) -> StoreError {
    StoreError::corrupt(format!(
        "a row is in state `{state}` without what that state needs (a completed row needs an outcome); \
         the row was not written by idemkit: delete it"
    ))
}

fn corrupt_row(e: tokio_postgres::Error) -> StoreError {
    StoreError::corrupt(
        "a row does not have the columns idemkit wrote; was the table altered by hand?",
    )
    .with_source(e)
}

/// Checks a table or schema name: letters, digits and `_`, not starting with a digit, at most 40
/// characters (so the derived names fit PostgreSQL's 63).
fn identifier(name: &str) -> Result<String, StoreError> {
    let ok = !name.is_empty()
        && name.len() <= 40
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(name.to_owned())
    } else {
        Err(StoreError::new(
            StoreErrorKind::Other,
            format!(
                "`{name}` is not a usable table or schema name; use letters, digits and `_` (at most 40, not starting with a digit)"
            ),
        ))
    }
}

fn quote(ident: &str) -> String {
    format!("\"{ident}\"")
}
