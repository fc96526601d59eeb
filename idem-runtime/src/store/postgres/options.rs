//! The PostgreSQL store's options: where it connects, which schema and table, its pool.

use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

use super::PostgresStore;
use super::sql::Sql;
use crate::error::{StoreError, StoreErrorKind};
use crate::store::redacted_url;

/// Configures a [`PostgresStore`]: where it connects and which table it uses.
#[must_use]
#[derive(Clone)]
pub struct PostgresStoreBuilder {
    pub(super) url: String,
    pub(super) schema: Option<String>,
    pub(super) table: String,
    pub(super) max_connections: usize,
    pub(super) connect_timeout: Duration,
    pub(super) read_only: bool,
    pub(super) prepared_statements: bool,
    pub(super) tombstones: Duration,
}

impl std::fmt::Debug for PostgresStoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStoreBuilder")
            .field("url", &redacted_url(&self.url))
            .field("schema", &self.schema)
            .field("table", &self.table)
            .field("max_connections", &self.max_connections)
            .field("connect_timeout", &self.connect_timeout)
            .field("read_only", &self.read_only)
            .field("prepared_statements", &self.prepared_statements)
            .finish()
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

    /// How long a tombstone (S33: a completed record past its time-to-live, its outcome
    /// dropped) is kept past that time-to-live before a prune may delete it; default
    /// [`DEFAULT_TOMBSTONES`](crate::store::DEFAULT_TOMBSTONES) (400 days). Until then a repeat
    /// of its key is answered "done on DATE; its result is no longer kept", never run.
    pub fn tombstones(mut self, keep: Duration) -> Self {
        self.tombstones = keep;
        self
    }

    /// Whether statements are prepared once per connection under a name (default `true`).
    /// `false` sends each unnamed, with its parameter types, in one round trip: for PgBouncer in
    /// transaction mode older than 1.21 or with `max_prepared_statements = 0`, and other poolers
    /// that do not track prepared statements (see the [module docs](PostgresStore#pgbouncer)).
    pub fn prepared_statements(mut self, prepared: bool) -> Self {
        self.prepared_statements = prepared;
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

    /// Opens existing tables for reading only (default: no), as an operator's reads do: nothing
    /// is created or migrated; missing tables, or tables of another schema version, are an
    /// error that says what to do.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Opens the pool, then creates or migrates the tables (unless [`read_only`](Self::read_only)).
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
        if self.read_only {
            let store = PostgresStore {
                pool,
                sql: Sql::new(self.schema.as_deref(), &self.table)?,
                prepared: self.prepared_statements,
                tombstones: self.tombstones,
            };
            store.check_schema().await?;
            return Ok(store);
        }
        Ok(
            PostgresStore::from_pool(pool, self.schema.as_deref(), &self.table)
                .await?
                .with_prepared_statements(self.prepared_statements)
                .with_tombstones(self.tombstones),
        )
    }
}
