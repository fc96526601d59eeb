//! The PostgreSQL store: many agent workers on many machines share one table.

use std::future::Future;
use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use crate::error::{StoreError, StoreErrorKind};

mod error;
mod options;
mod records;
mod rows;
mod sql;
mod transitions;

use self::error::{Failed, Migration, pg_error, pool_error};
pub use self::options::PostgresStoreBuilder;
use self::sql::{Sql, quote};

/// The schema version this build writes and understands.
const SCHEMA_VERSION: i32 = 8;

/// How often an operation is sent again after the connection it ran on was lost. Every statement
/// is safe to repeat: the caller's lease token recognises a claim or write that already applied.
const RETRIES_ON_LOST_CONNECTION: u32 = 2;

/// How often an operation is sent again after the server rolled it back as a serialization
/// failure or a deadlock (SERIALIZABLE): it did nothing, so sending it again is safe.
const RETRIES_ON_CONFLICT: u32 = 8;

/// How many expired rows one prune statement deletes.
const PRUNE_BATCH: i64 = 1000;

/// Records claims and outcomes in a PostgreSQL table.
///
/// Each operation is one short statement on a pooled connection (tokio-postgres +
/// deadpool-postgres). The server's `now()` is the only clock, so workers' clocks may drift
/// freely; the row's lease token is the fence, so a holder whose lease was taken over cannot
/// write; no advisory locks, session settings or transactions spanning statements are used.
///
/// ```no_run
/// # async fn demo() -> Result<(), idem_runtime::StoreError> {
/// use idem_runtime::{Idem, PostgresStore};
///
/// let store = PostgresStore::builder("postgres://app@db.internal/app")
///     .schema("idemkit") // optional: a schema of its own (created if missing)
///     .table("records") // optional: the table's name; tenants may each have their own
///     .max_connections(8)
///     .connect()
///     .await?;
/// let idem = Idem::new(store);
/// # let _ = idem; Ok(()) }
/// ```
///
/// `connect` creates the tables on first use and migrates them forward (a version table records
/// where the schema stands); a build that finds a newer schema refuses to run rather than guess.
///
/// No TLS is compiled in. For a server off the machine, build a `deadpool_postgres::Pool` with
/// the TLS connector you trust (`tokio-postgres-rustls`, `postgres-native-tls`) and pass it to
/// [`PostgresStore::from_pool`].
///
/// # SERIALIZABLE
///
/// The store works under any default isolation level, `serializable` included
/// (`default_transaction_isolation` set for the role, the database or the connection). Each
/// statement is a transaction of its own, so a serialization failure (SQLSTATE `40001`, or a
/// deadlock, `40P01`) rolled back all of it: the store sends it again at once, up to
/// 8 times, then reports [`StoreErrorKind::Unavailable`] (calling again is safe).
///
/// # PgBouncer
///
/// - **Session mode**: works as with a direct connection.
/// - **Transaction mode, PgBouncer 1.21 or newer with `max_prepared_statements` > 0** (PgBouncer
///   then tracks protocol-level prepared statements across server connections): works as is.
/// - **Transaction mode otherwise** (older PgBouncer, `max_prepared_statements = 0`, other
///   poolers that hand a client's statements to any server connection): build the store with
///   [`prepared_statements(false)`](PostgresStoreBuilder::prepared_statements). By default the
///   store prepares each statement once per connection under a name, and such a pooler sends the
///   name's use to a server connection that never saw it (`prepared statement "s0" does not
///   exist`) or that has another client's statement of that name (`… already exists`). Without
///   prepared statements each statement goes unnamed with its parameter types, parse and execute
///   in one round trip, which any pooler forwards to one server connection.
/// - **Statement mode**: works too with `prepared_statements(false)` (each statement is a
///   transaction of its own); creating or migrating the tables needs a transaction, so run the
///   first `connect` (or the upgrade) through a direct or session-mode connection.
///
/// Nothing else of the session is relied on: no `SET`, no advisory lock, no `LISTEN`. The test
/// suite runs the conformance rows through PgBouncer in transaction mode
/// (`tests/postgres_pgbouncer.rs`) and under `default_transaction_isolation = serializable`
/// (`tests/postgres_serializable.rs`).
///
/// # Failover
///
/// A claim or outcome is acknowledged when PostgreSQL commits it. With asynchronous streaming
/// replication (the default), a replica promoted after the primary died may lack the last
/// commits: a claim lost so makes the next call run the operation again, an outcome lost so
/// leaves the key running until its lease ends and then ambiguous. The server's
/// `synchronous_commit = remote_apply` with `synchronous_standby_names` naming the replica
/// makes every commit wait until the replica applied it, which closes both for a failover to
/// that replica (a commit the replica never got is never acknowledged; the caller's store error
/// says so). Both are measured in `tests/failover_postgres.rs`; the matrix is in
/// `docs/reliability.md`.
///
/// # A lost connection
///
/// When the connection dies under a statement (a terminated backend, a failover, a reset socket),
/// the store sends the statement again on a fresh connection, twice at most, then reports
/// [`StoreErrorKind::Unavailable`]. That is safe because the caller's lease token makes every
/// write repeatable: a claim that already went through finds its own token and is granted again,
/// and a `complete` or `mark_ambiguous` repeated by the same holder writes the same thing again
/// and is applied (every store answers so); an operator's `resolve` repeated finds its decision
/// standing and answers `Resolved` again, a `forget` repeated finds nothing (`NotFound`).
///
/// # Tables
///
/// With the default name `idemkit`: `idemkit` (one row per key), `idemkit_operations` (operation
/// ids) and `idemkit_schema` (the schema version). Expired rows are invisible at once and
/// deleted by [`Records::prune`](crate::Records::prune), which a program calls now and then.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    sql: Sql,
    /// Named statements prepared once per connection (default), or unnamed ones (PgBouncer).
    prepared: bool,
    /// S33: how long a tombstone is kept past its time-to-live.
    tombstones: std::time::Duration,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("table", &self.sql.records)
            .field("prepared_statements", &self.prepared)
            .finish_non_exhaustive()
    }
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
            read_only: false,
            prepared_statements: true,
            tombstones: crate::store::DEFAULT_TOMBSTONES,
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
        let store = PostgresStore {
            pool,
            sql,
            prepared: true,
            tombstones: crate::store::DEFAULT_TOMBSTONES,
        };
        store.migrate().await?;
        Ok(store)
    }

    /// The same store, keeping a tombstone (S33: a completed record past its time-to-live, its
    /// outcome dropped) for `keep` past that time-to-live before a prune may delete it; default
    /// [`DEFAULT_TOMBSTONES`](crate::store::DEFAULT_TOMBSTONES) (400 days). Until then a repeat
    /// of its key is answered "done on DATE; its result is no longer kept", never run.
    #[must_use]
    pub fn with_tombstones(mut self, keep: std::time::Duration) -> Self {
        self.tombstones = keep;
        self
    }

    /// Whether statements are prepared once per connection under a name (`true`, the default)
    /// or sent unnamed each time (`false`: behind PgBouncer in transaction mode older than 1.21,
    /// see [`PostgresStore`](PostgresStore#pgbouncer)). Creating and migrating the tables never
    /// uses named statements, so a store made by [`from_pool`](Self::from_pool) may switch after.
    #[must_use]
    pub fn with_prepared_statements(mut self, prepared: bool) -> Self {
        self.prepared = prepared;
        self
    }

    /// The rows `sql` answers for `params` (of the PostgreSQL `types`, in order) on `c`.
    async fn rows(
        &self,
        c: &Object,
        sql: &str,
        types: &[Type],
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        if self.prepared {
            let stmt = c.prepare_cached(sql).await?;
            c.query(&stmt, params).await
        } else {
            c.query_typed(sql, &typed(params, types)).await
        }
    }

    /// The row `sql` answers for `params`, if any (the statements it runs answer at most one).
    async fn row(
        &self,
        c: &Object,
        sql: &str,
        types: &[Type],
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, tokio_postgres::Error> {
        Ok(self.rows(c, sql, types, params).await?.into_iter().next())
    }

    /// How many rows `sql` changed.
    async fn changed(
        &self,
        c: &Object,
        sql: &str,
        types: &[Type],
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, tokio_postgres::Error> {
        use futures_util::StreamExt as _;
        if self.prepared {
            let stmt = c.prepare_cached(sql).await?;
            return c.execute(&stmt, params).await;
        }
        let stream = c.query_typed_raw(sql, typed(params, types)).await?;
        let mut stream = std::pin::pin!(stream);
        while let Some(row) = stream.next().await {
            row?;
        }
        Ok(stream.rows_affected().unwrap_or(0))
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
        // Unnamed statements only (`query_typed`, `batch_execute`): safe behind any pooler.
        let tx = client.transaction().await?;
        // Every start runs `CREATE … IF NOT EXISTS` on what exists: no NOTICE ("already exists,
        // skipping") in the program's logs for it; for this transaction only.
        tx.batch_execute("SET LOCAL client_min_messages = warning")
            .await?;
        if let Some((schema, name)) = &self.sql.schema {
            // Only when missing: `CREATE SCHEMA IF NOT EXISTS` needs CREATE on the database even
            // when the schema exists, which a least-privileged role does not have.
            let exists = tx
                .query_typed_opt(
                    "SELECT 1 FROM pg_namespace WHERE nspname = $1",
                    &[(name, Type::TEXT)],
                )
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
            .query_typed_opt(&format!("SELECT version FROM {version_table}"), &[])
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
        let by_created = quote(&format!("{}_created", self.sql.table));
        let outcome_kept = quote(&format!("{}_outcome_kept", self.sql.table));
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
             -- Version 2: when each row was made and last changed, for operators; 'epoch'
             -- (unknown) for rows written before.
             ALTER TABLE {records}
                 ADD COLUMN IF NOT EXISTS created timestamptz NOT NULL DEFAULT 'epoch',
                 ADD COLUMN IF NOT EXISTS updated timestamptz NOT NULL DEFAULT 'epoch';
             CREATE INDEX IF NOT EXISTS {by_created} ON {records} (created);
             -- Version 3: the scope (tenant) a row was made under, for operators (NULL: none,
             -- or written before).
             ALTER TABLE {records} ADD COLUMN IF NOT EXISTS tenant text;
             -- Version 4: an operator's decision (S24): what, when, the note; a row released
             -- by not-applied is expired at once and kept until `kept_until` to show it.
             ALTER TABLE {records}
                 ADD COLUMN IF NOT EXISTS resolution text
                     CHECK (resolution IN ('applied', 'not_applied')),
                 ADD COLUMN IF NOT EXISTS resolved_at timestamptz,
                 ADD COLUMN IF NOT EXISTS resolution_note text,
                 ADD COLUMN IF NOT EXISTS kept_until timestamptz;
             -- Version 5 (S27): what a takeover replaced, kept while the row runs under the
             -- claim that took it over, so that a claim given back unused brings it back
             -- (`prior_state` NULL: the claim made a new record, or the row was written before;
             -- 'unknown': a holder's row brought back, whose own prior is not kept).
             ALTER TABLE {records}
                 ADD COLUMN IF NOT EXISTS prior_state text
                     CHECK (prior_state IN ('running', 'ambiguous', 'unknown')),
                 ADD COLUMN IF NOT EXISTS prior_token uuid,
                 ADD COLUMN IF NOT EXISTS prior_lease_until timestamptz,
                 ADD COLUMN IF NOT EXISTS prior_note text,
                 ADD COLUMN IF NOT EXISTS prior_expires_at timestamptz,
                 ADD COLUMN IF NOT EXISTS prior_created timestamptz,
                 ADD COLUMN IF NOT EXISTS prior_updated timestamptz,
                 ADD COLUMN IF NOT EXISTS prior_tenant text;
             -- Version 6 (S32): what a row keeps through every takeover: when its operation
             -- was first made (NULL in a row written before: its `created`), and the Unknown
             -- answers of verify about it and since when. A takeover also keeps the `note` of
             -- the row it took over (S31).
             ALTER TABLE {records}
                 ADD COLUMN IF NOT EXISTS first_made timestamptz,
                 ADD COLUMN IF NOT EXISTS unknowns integer NOT NULL DEFAULT 0,
                 ADD COLUMN IF NOT EXISTS unknown_since timestamptz;
             -- Version 7 (S28): the arguments a call of a tool with `verify` keeps with its row
             -- (JSON), so a settler asks that verify without the caller; NULL for any other
             -- tool's row, and in a row written before.
             ALTER TABLE {records} ADD COLUMN IF NOT EXISTS arguments bytea;
             -- Version 8 (S33): the completed rows that still keep their outcome, by expiry:
             -- what prune turns into tombstones, found without reading the tombstones already
             -- made (without it each batch of 1,000 read every expired row again).
             CREATE INDEX IF NOT EXISTS {outcome_kept} ON {records} (expires_at)
                 WHERE state = 'completed' AND length(outcome) > 0;
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
        let (mut attempt, mut conflicts) = (0, 0);
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
            if conflicts < RETRIES_ON_CONFLICT && err.serialization_failure() {
                conflicts += 1;
                tracing::debug!(what, conflicts, error = %err, "postgres rolled the statement back as a serialization failure; sending it again");
                continue;
            }
            return Err(match err {
                Failed::Pg(e) => pg_error(e, what),
                Failed::Pool(e) => pool_error(e),
            });
        }
    }
}

impl PostgresStore {
    /// This store's own claim and complete statements, exactly as it prepares them (parameters:
    /// key, tool, fingerprint, token, lease µs, ttl µs; key, token, outcome, ttl µs), for the
    /// benchmark that runs them by hand as its baseline. Not a stable API.
    #[doc(hidden)]
    pub fn __claim_and_complete_statements(&self) -> [&str; 2] {
        [&self.sql.claim, &self.sql.complete]
    }
}

/// `params` paired with their `types`, as `query_typed` takes them.
fn typed<'a>(
    params: &[&'a (dyn ToSql + Sync)],
    types: &[Type],
) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    debug_assert_eq!(params.len(), types.len(), "one type per parameter");
    params.iter().copied().zip(types.iter().cloned()).collect()
}
