//! The embedded default store: one SQLite file, shared by the processes of one machine, that
//! keeps every claim and outcome across a crash (`kill -9`) and a restart.
//!
//! ```no_run
//! # fn main() -> Result<(), idem_runtime::StoreError> {
//! use idem_runtime::Idem;
//! use idem_runtime::store::sqlite::{SqliteStore, Synchronous};
//! use std::time::Duration;
//!
//! let store = SqliteStore::builder("/var/lib/my-agent/idemkit.db")
//!     .synchronous(Synchronous::Full)            // the default: an outcome survives power loss
//!     .busy_timeout(Duration::from_secs(5))
//!     .open()?;
//! Idem::new(store).install().expect("installed once, at start-up");
//! # Ok(()) }
//! ```
//!
//! With no runtime installed, the first side-effect call opens [`default_path`] instead.
//!
//! # How it keeps the contract
//!
//! - **One statement per transition** (see [`sql`]): a claim is one `INSERT … ON CONFLICT DO
//!   UPDATE … WHERE … RETURNING`, so two processes racing for a key cannot both take it; every
//!   holder's write names its lease token, so a holder whose lease was taken over changes nothing.
//! - **The clock** is the process's wall clock ([`SystemTime`]), passed into every statement as
//!   unix milliseconds. SQLite's own `unixepoch('subsec')` reads the same operating-system clock,
//!   so processes on one machine agree either way; passing it in keeps `now` one value per
//!   operation, visible in the statement's parameters and in its comments.
//! - **Durability**: WAL with `synchronous=FULL` by default, so a completed outcome is on disk
//!   before `complete` returns; `Synchronous::Normal` may lose the last commits on power loss
//!   (not on a process crash) and is faster.
//! - **Async callers never block**: every call runs on tokio's blocking pool
//!   (`spawn_blocking`) over one connection per store. SQLite lets one writer in at a time
//!   anyway, and a mutex hands the connection over at once where a second connection would wait
//!   in SQLite's busy handler, which sleeps in steps of milliseconds.
//! - **Schema version** in `PRAGMA user_version`, the file marked as idemkit's by
//!   `PRAGMA application_id`; [`sql::MIGRATIONS`] brings an older file up to date in one
//!   transaction, and a file from a newer idemkit is refused, not touched.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::types::ValueRef;
use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, named_params};
use uuid::Uuid;

use super::{
    Claim, ClaimRequest, Existing, ExistingState, LeaseToken, Record, RecordState, Store, Written,
};
use crate::error::{StoreError, StoreErrorKind};
use crate::fingerprint::Fingerprint;
use crate::idem::Idem;
use crate::key::IdempotencyKey;

/// The environment variable that overrides where the default store lives.
pub const DEFAULT_PATH_ENV: &str = "IDEMKIT_DB";

/// Where the default store lives: `$IDEMKIT_DB` if set, else `.idemkit/idemkit.db` under the
/// current directory; made absolute, so a later change of directory does not split the store.
///
/// Why the working directory and not a per-user directory (`$XDG_STATE_HOME`): keys are derived
/// from a tool's name and fields, so two unrelated projects of one user that both have a
/// `charge(customer_id, period)` tool would derive the same keys, and a per-user store would
/// replay one project's payment as the other's. A store beside the project, like `target/` or
/// `.venv/`, is found again when the agent restarts there, is easy to see and to delete, and
/// shares nothing by accident; set `IDEMKIT_DB` to share one deliberately.
pub fn default_path() -> Result<PathBuf, String> {
    let path = match std::env::var_os(DEFAULT_PATH_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(".idemkit").join("idemkit.db"),
    };
    std::path::absolute(&path).map_err(|e| {
        format!(
            "the default store path `{}` cannot be made absolute ({e}); set {DEFAULT_PATH_ENV} to an absolute path",
            path.display()
        )
    })
}

/// The runtime used when none is installed or scoped: a [`SqliteStore`] at [`default_path`],
/// opened by the first call that needs it (on the blocking pool), so a failure to open it is
/// that call's [`Error::Store`](crate::Error::Store), naming the file, and the next call tries again.
pub(crate) fn default_runtime() -> Result<Idem, String> {
    let path = default_path()?;
    tracing::info!(
        path = %path.display(),
        "no runtime installed; recording outcomes in the default SQLite store (set {DEFAULT_PATH_ENV} to move it)"
    );
    Ok(Idem::new(SqliteStore::builder(path).open_lazily()))
}

/// SQLite's `synchronous` setting: how hard each commit waits for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Synchronous {
    /// Every commit is on disk before it returns: an outcome survives a power loss.
    #[default]
    Full,
    /// Commits survive a process crash but the last ones may be lost on power loss (the
    /// operation then runs again once, under the same key); several times faster.
    Normal,
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

/// Settings of a [`SqliteStore`]; [`SqliteStore::builder`] starts one.
#[must_use]
#[derive(Debug, Clone)]
pub struct SqliteStoreBuilder {
    path: PathBuf,
    synchronous: Synchronous,
    busy_timeout: Duration,
}

impl SqliteStoreBuilder {
    /// How hard commits wait for the disk (default [`Synchronous::Full`]).
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// How long a statement waits for another process's write to finish before failing as
    /// unavailable (default 5 s).
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Opens the file now (creating it and its directory if missing, migrating an older schema).
    /// Blocks: call it at start-up, not on an async worker thread.
    pub fn open(self) -> Result<SqliteStore, StoreError> {
        let store = self.open_lazily();
        {
            let mut conn = store.shared.lock();
            *conn = Some(open_connection(&store.shared.path, &store.shared.settings)?);
        }
        Ok(store)
    }

    /// The store, opened by its first operation (on the blocking pool); until one succeeds,
    /// each operation tries again and fails with why.
    pub fn open_lazily(self) -> SqliteStore {
        SqliteStore {
            shared: Arc::new(Shared {
                path: self.path.clone(),
                settings: self,
                conn: Mutex::new(None),
                claims: AtomicU32::new(0),
            }),
        }
    }
}

/// Keeps records in one SQLite file, shared safely by the processes of one machine.
///
/// Cheap to clone; clones share one connection. See the [module docs](self) for how it keeps
/// the store contract, and [`sql`] for every statement it runs.
#[derive(Clone)]
pub struct SqliteStore {
    shared: Arc<Shared>,
}

struct Shared {
    path: PathBuf,
    settings: SqliteStoreBuilder,
    /// `None` until opened (lazily, or again after a failed open).
    conn: Mutex<Option<Connection>>,
    /// Claims since the last opportunistic prune.
    claims: AtomicU32,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Option<Connection>> {
        // A panic mid-operation leaves SQLite's own transaction to roll back: the connection
        // is still sound.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.shared.path)
            .field("synchronous", &self.shared.settings.synchronous)
            .field("busy_timeout", &self.shared.settings.busy_timeout)
            .finish()
    }
}

/// Every `PRUNE_EVERY` claims, a store deletes up to `PRUNE_BATCH` expired records, so the file
/// does not grow without bound in programs that never call [`Store::prune`].
const PRUNE_EVERY: u32 = 512;
const PRUNE_BATCH: usize = 256;

impl SqliteStore {
    /// Opens (or creates) the store at `path` with the default settings.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, StoreError> {
        Self::builder(path).open()
    }

    /// Starts the settings of a store at `path`.
    pub fn builder(path: impl Into<PathBuf>) -> SqliteStoreBuilder {
        SqliteStoreBuilder {
            path: path.into(),
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Runs `op` on the connection on tokio's blocking pool, opening the file first if needed.
    async fn run<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut Connection, &Path) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let shared = Arc::clone(&self.shared);
        let task = tokio::task::spawn_blocking(move || {
            let mut guard = shared.lock();
            if guard.is_none() {
                *guard = Some(open_connection(&shared.path, &shared.settings)?);
            }
            let conn = guard.as_mut().expect("opened above");
            op(conn, &shared.path)
        });
        match task.await {
            Ok(result) => result,
            Err(e) => Err(StoreError::new(
                StoreErrorKind::Other,
                format!(
                    "an operation on the store {} did not finish: {e}",
                    self.path().display()
                ),
            )),
        }
    }
}

/// The statements, each one state transition (see the state machine in [`crate::store`]).
///
/// `:now` is the caller's clock in unix milliseconds; `:lease_until` and `:expires_at` are
/// `:now` plus the lease and the time-to-live, computed (saturating) by the caller.
#[doc(hidden)]
pub mod sql {
    /// `application_id` of an idemkit file ("idkt"): a file with another one is not ours.
    pub const APPLICATION_ID: i64 = 0x6964_6b74;

    /// The schema this build writes; `MIGRATIONS[v]` brings version `v` to `v + 1`.
    pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

    /// Migrations, in order; each runs in the transaction that also sets `user_version`. Never
    /// edit a released one: add the next.
    pub const MIGRATIONS: &[&str] = &[
        // v0 → v1: the records and the operation ids.
        "CREATE TABLE records (
            key         TEXT    NOT NULL PRIMARY KEY,                        -- the idempotency key (UUID text)
            tool        TEXT    NOT NULL,                                    -- for operators
            fingerprint BLOB    NOT NULL CHECK (length(fingerprint) = 32),   -- SHA-256 of the other arguments
            state       TEXT    NOT NULL CHECK (state IN ('running', 'completed', 'ambiguous')),
            token       BLOB    CHECK (length(token) = 16),                  -- the lease holder, while running
            lease_until INTEGER,                                             -- unix ms; past it, a retry takes over
            outcome     BLOB,                                                -- the outcome (JSON), once completed
            note        TEXT,                                                -- why it is ambiguous
            expires_at  INTEGER NOT NULL,                                    -- unix ms; past it, the record is absent
            CHECK ((state = 'running') = (token IS NOT NULL AND lease_until IS NOT NULL)),
            CHECK ((state = 'completed') = (outcome IS NOT NULL))
        ) STRICT;
        CREATE INDEX records_by_expiry ON records (expires_at);
        CREATE TABLE operations (
            name TEXT NOT NULL PRIMARY KEY,
            id   BLOB NOT NULL CHECK (length(id) = 16)                      -- a UUID v4, minted once
        ) STRICT;",
    ];

    /// absent | expired → running (a new record);
    /// running with the lease expired | ambiguous, same fingerprint → running (takeover).
    /// Returns the token only when the caller took the record.
    pub const CLAIM: &str = "
        INSERT INTO records (key, tool, fingerprint, state, token, lease_until, expires_at)
        VALUES (:key, :tool, :fingerprint, 'running', :token, :lease_until, :expires_at)
        ON CONFLICT (key) DO UPDATE SET
            tool = excluded.tool, fingerprint = excluded.fingerprint, state = 'running',
            token = excluded.token, lease_until = excluded.lease_until,
            outcome = NULL, note = NULL, expires_at = excluded.expires_at
        WHERE records.expires_at <= :now
           OR (records.fingerprint = excluded.fingerprint
               AND (records.state = 'ambiguous'
                    OR (records.state = 'running' AND records.lease_until <= :now)))
        RETURNING token";

    /// The live record a claim did not take (read in the claim's transaction).
    pub const LIVE: &str = "
        SELECT tool, fingerprint, state, token, lease_until, outcome, note, expires_at
        FROM records WHERE key = :key AND expires_at > :now";

    /// running, held by :token, not expired → completed.
    pub const COMPLETE: &str = "
        UPDATE records SET state = 'completed', outcome = :outcome, token = NULL, lease_until = NULL,
                           expires_at = :expires_at
        WHERE key = :key AND state = 'running' AND token = :token AND expires_at > :now";

    /// running, held by :token, not expired → ambiguous (the next same-fingerprint claim takes it).
    pub const MARK_AMBIGUOUS: &str = "
        UPDATE records SET state = 'ambiguous', note = :note, token = NULL, lease_until = NULL,
                           expires_at = :expires_at
        WHERE key = :key AND state = 'running' AND token = :token AND expires_at > :now";

    /// running, held by :token, not expired → absent (it did not happen: a later call may run).
    pub const RELEASE: &str = "
        DELETE FROM records
        WHERE key = :key AND state = 'running' AND token = :token AND expires_at > :now";

    /// expired → absent, at most :limit rows, oldest first.
    pub const PRUNE: &str = "
        DELETE FROM records WHERE key IN (
            SELECT key FROM records WHERE expires_at <= :now ORDER BY expires_at LIMIT :limit)";

    /// absent → :id; present → unchanged. Returns the stored id either way.
    pub const OPERATION_ID: &str = "
        INSERT INTO operations (name, id) VALUES (:name, :id)
        ON CONFLICT (name) DO UPDATE SET name = excluded.name
        RETURNING id";
}

fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn remaining(until: i64, now: i64) -> Duration {
    Duration::from_millis(u64::try_from(until.saturating_sub(now)).unwrap_or(0))
}

#[async_trait::async_trait]
impl Store for SqliteStore {
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let (key, tool, fingerprint, token) =
            (req.key, req.tool.to_owned(), req.fingerprint, req.token);
        let (lease, ttl) = (ms(req.lease), ms(req.ttl));
        let prune =
            self.shared.claims.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1;
        self.run(move |conn, path| {
            let now = now_ms();
            let claim = (|| {
                // IMMEDIATE: the write lock first, so the claim and the read of what it did not
                // take see one state, whatever other processes do.
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let took: Option<Vec<u8>> = tx
                    .prepare_cached(sql::CLAIM)?
                    .query_row(
                        named_params! {
                            ":key": key.as_str(), ":tool": tool, ":fingerprint": fingerprint.0,
                            ":token": token.0.as_bytes(), ":now": now,
                            ":lease_until": now.saturating_add(lease), ":expires_at": now.saturating_add(ttl),
                        },
                        |row| row.get(0),
                    )
                    .optional()?;
                let live = match took {
                    Some(_) => None,
                    None => tx.prepare_cached(sql::LIVE)?.query_row(
                        named_params! { ":key": key.as_str(), ":now": now },
                        |row| Ok(decode(row, &key, path)),
                    ).optional()?,
                };
                tx.commit()?;
                Ok::<_, rusqlite::Error>((took, live))
            })();
            let (took, live) = claim.map_err(|e| sql_error(path, "claim a key in", e))?;
            if prune {
                // Best effort: a failed prune leaves expired rows for the next one.
                if let Err(e) = prune_expired(conn, now, PRUNE_BATCH) {
                    tracing::debug!(error = %e, "opportunistic prune failed");
                }
            }
            match (took, live) {
                (Some(t), _) if t == token.0.as_bytes() => Ok(Claim::Acquired),
                (Some(_), _) => Err(corrupt(path, &key, "token", "the claim returned another holder's token")),
                (None, Some(rec)) => {
                    let rec = rec?;
                    let state = match rec.state {
                        RecordState::Running { lease_remaining, .. } => ExistingState::Running { lease_remaining },
                        RecordState::Completed { outcome } => ExistingState::Completed { outcome },
                        RecordState::Ambiguous { .. } => ExistingState::Ambiguous,
                    };
                    Ok(Claim::Existing(Existing { fingerprint: rec.fingerprint, state }))
                }
                (None, None) => Err(corrupt(path, &key, "expires_at", "the claim neither took the record nor found it live")),
            }
        })
        .await
    }

    async fn complete(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        outcome: &[u8],
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        let (key, outcome, ttl) = (*key, outcome.to_vec(), ms(ttl));
        self.run(move |conn, path| {
            let now = now_ms();
            let changed = conn
                .prepare_cached(sql::COMPLETE)
                .and_then(|mut st| {
                    st.execute(named_params! {
                        ":key": key.as_str(), ":token": token.0.as_bytes(), ":outcome": outcome,
                        ":now": now, ":expires_at": now.saturating_add(ttl),
                    })
                })
                .map_err(|e| sql_error(path, "record an outcome in", e))?;
            Ok(Written::from_changed(changed))
        })
        .await
    }

    async fn release(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
    ) -> Result<Written, StoreError> {
        let key = *key;
        self.run(move |conn, path| {
            let changed = conn
                .prepare_cached(sql::RELEASE)
                .and_then(|mut st| {
                    st.execute(named_params! { ":key": key.as_str(), ":token": token.0.as_bytes(), ":now": now_ms() })
                })
                .map_err(|e| sql_error(path, "release a key in", e))?;
            Ok(Written::from_changed(changed))
        })
        .await
    }

    async fn mark_ambiguous(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        let (key, note, ttl) = (*key, note.to_owned(), ms(ttl));
        self.run(move |conn, path| {
            let now = now_ms();
            let changed = conn
                .prepare_cached(sql::MARK_AMBIGUOUS)
                .and_then(|mut st| {
                    st.execute(named_params! {
                        ":key": key.as_str(), ":token": token.0.as_bytes(), ":note": note,
                        ":now": now, ":expires_at": now.saturating_add(ttl),
                    })
                })
                .map_err(|e| sql_error(path, "mark a key ambiguous in", e))?;
            Ok(Written::from_changed(changed))
        })
        .await
    }

    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        let key = *key;
        self.run(move |conn, path| {
            let rec = conn
                .prepare_cached(sql::LIVE)
                .and_then(|mut st| {
                    st.query_row(
                        named_params! { ":key": key.as_str(), ":now": now_ms() },
                        |row| Ok(decode(row, &key, path)),
                    )
                    .optional()
                })
                .map_err(|e| sql_error(path, "read a record from", e))?;
            rec.transpose()
        })
        .await
    }

    async fn prune(&self, limit: usize) -> Result<usize, StoreError> {
        self.run(move |conn, path| {
            prune_expired(conn, now_ms(), limit)
                .map_err(|e| sql_error(path, "prune expired records from", e))
        })
        .await
    }

    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError> {
        let name = name.to_owned();
        self.run(move |conn, path| {
            let id: Vec<u8> = conn
                .prepare_cached(sql::OPERATION_ID)
                .and_then(|mut st| {
                    st.query_row(named_params! { ":name": name, ":id": fresh.as_bytes() }, |row| row.get(0))
                })
                .map_err(|e| sql_error(path, "store an operation id in", e))?;
            Uuid::from_slice(&id).map_err(|_| {
                StoreError::corrupt(format!(
                    "the operation id of `{name}` in {} is {} bytes, not a 16-byte UUID; \
                     delete that row (`DELETE FROM operations WHERE name = '{name}'`) or restore the file from a backup",
                    path.display(),
                    id.len()
                ))
            })
        })
        .await
    }
}

fn prune_expired(conn: &Connection, now: i64, limit: usize) -> rusqlite::Result<usize> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    conn.prepare_cached(sql::PRUNE)?
        .execute(named_params! { ":now": now, ":limit": limit })
}

/// Reads a row of [`sql::LIVE`], refusing anything this build did not write.
fn decode(
    row: &rusqlite::Row<'_>,
    key: &IdempotencyKey,
    path: &Path,
) -> Result<Record, StoreError> {
    let bad = |column: &str, what: &str| corrupt(path, key, column, what);
    let col = |i: usize| row.get_ref(i).map_err(|e| bad("?", &e.to_string()));
    let text = |i: usize, name: &str| match col(i)? {
        ValueRef::Text(t) => std::str::from_utf8(t)
            .map(str::to_owned)
            .map_err(|_| bad(name, "is not UTF-8")),
        other => Err(bad(name, &format!("is {:?}, not text", other.data_type()))),
    };
    let blob = |i: usize, name: &str, len: Option<usize>| match col(i)? {
        ValueRef::Blob(b) if len.is_none_or(|n| b.len() == n) => Ok(b.to_vec()),
        ValueRef::Blob(b) => Err(bad(
            name,
            &format!("is {} bytes, not {}", b.len(), len.unwrap_or(0)),
        )),
        other => Err(bad(
            name,
            &format!("is {:?}, not a blob", other.data_type()),
        )),
    };
    let int = |i: usize, name: &str| match col(i)? {
        ValueRef::Integer(n) => Ok(n),
        other => Err(bad(
            name,
            &format!("is {:?}, not an integer", other.data_type()),
        )),
    };
    let now = now_ms();
    let tool = text(0, "tool")?;
    let fingerprint = Fingerprint(
        blob(1, "fingerprint", Some(32))?
            .try_into()
            .expect("length checked"),
    );
    let state = match text(2, "state")?.as_str() {
        "running" => {
            let token = Uuid::from_slice(&blob(3, "token", Some(16))?).expect("length checked");
            RecordState::Running {
                token: LeaseToken(token),
                lease_remaining: remaining(int(4, "lease_until")?, now),
            }
        }
        "completed" => RecordState::Completed {
            outcome: blob(5, "outcome", None)?,
        },
        "ambiguous" => RecordState::Ambiguous {
            note: match col(6)? {
                ValueRef::Null => String::new(),
                _ => text(6, "note")?,
            },
        },
        other => {
            return Err(bad(
                "state",
                &format!("is `{other}`, not running, completed or ambiguous"),
            ));
        }
    };
    Ok(Record {
        tool,
        fingerprint,
        state,
        expires_in: remaining(int(7, "expires_at")?, now),
    })
}

fn corrupt(path: &Path, key: &IdempotencyKey, column: &str, what: &str) -> StoreError {
    StoreError::corrupt(format!(
        "the record of key {key} in {} is corrupt: its `{column}` {what}; delete that row \
         (`DELETE FROM records WHERE key = '{key}'`, which forgets whether the operation ran) or restore the file \
         from a backup",
        path.display()
    ))
}

/// A SQLite failure while doing `what` (e.g. "claim a key in") the file at `path`, as a
/// [`StoreError`] that names the file and says what to do.
fn sql_error(path: &Path, what: &str, e: rusqlite::Error) -> StoreError {
    let p = path.display();
    let (kind, advice) = match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => (
            StoreErrorKind::Incompatible,
            format!(
                "it is not a SQLite database (or its header is damaged), so not an idemkit store; \
                 move that file away, or set {DEFAULT_PATH_ENV} (or the store's path) to another file"
            ),
        ),
        Some(ErrorCode::DatabaseCorrupt) => (
            StoreErrorKind::Corrupt,
            "the file is corrupt; restore it from a backup, or move it away to start afresh \
             (records of operations in flight are then lost)"
                .to_owned(),
        ),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => (
            StoreErrorKind::Unavailable,
            "it stayed locked by another connection beyond the busy timeout; retry, or raise the store's \
             `busy_timeout` if many processes write at once"
                .to_owned(),
        ),
        Some(ErrorCode::CannotOpen | ErrorCode::PermissionDenied | ErrorCode::ReadOnly) => (
            StoreErrorKind::Unavailable,
            format!(
                "it cannot be opened for writing; make the file and its directory writable by this user \
                 (SQLite also creates `-wal` and `-shm` files beside it), or set {DEFAULT_PATH_ENV} \
                 (or the store's path) to a writable place"
            ),
        ),
        Some(ErrorCode::DiskFull | ErrorCode::SystemIoFailure) => (
            StoreErrorKind::Unavailable,
            "it could not be written (disk full or I/O error); free space or fix the disk, then retry".to_string(),
        ),
        _ => (
            StoreErrorKind::Other,
            format!("check the file with `sqlite3 {p} 'PRAGMA integrity_check'`"),
        ),
    };
    StoreError::new(
        kind,
        format!("could not {what} the store at {p} ({e}): {advice}"),
    )
    .with_source(e)
}

/// Opens the file (see [`open_once`]), trying again while another opener holds the lock, up to
/// the busy timeout. SQLite answers some lock upgrades of a first open (switching a new file to
/// WAL while another connection reads it) with "locked" at once, without its busy handler, to
/// avoid a deadlock; several processes starting together on a new file hit exactly that.
fn open_connection(path: &Path, settings: &SqliteStoreBuilder) -> Result<Connection, StoreError> {
    let started = std::time::Instant::now();
    loop {
        match open_once(path, settings) {
            Err(e) if is_busy(&e) && started.elapsed() < settings.busy_timeout => {
                std::thread::sleep(Duration::from_millis(fastrand::u64(5..=25)));
            }
            result => return result,
        }
    }
}

/// Whether a store error is SQLite's "busy" or "locked".
fn is_busy(e: &StoreError) -> bool {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<rusqlite::Error>())
        .and_then(rusqlite::Error::sqlite_error_code)
        .is_some_and(|code| matches!(code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked))
}

/// Opens the file: creates its directory, checks it is ours, sets WAL and `synchronous`,
/// migrates an older schema, refuses a newer one.
fn open_once(path: &Path, settings: &SqliteStoreBuilder) -> Result<Connection, StoreError> {
    let p = path.display();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::unavailable(format!(
                "cannot create the directory {} for the store {p}: {e}; create it (writable by this user), \
                 or set {DEFAULT_PATH_ENV} (or the store's path) to a writable place",
                dir.display()
            ))
            .with_source(e)
        })?;
    }
    let opening = |e| sql_error(path, "open", e);
    let conn = Connection::open(path).map_err(opening)?;
    conn.busy_timeout(settings.busy_timeout).map_err(opening)?;
    // SQLite opens a file it may not write read-only without a word: say so now, not at the
    // first claim.
    if conn.is_readonly("main").map_err(opening)? {
        return Err(StoreError::unavailable(format!(
            "the store {p} is read-only for this user; make the file and its directory writable, \
             or set {DEFAULT_PATH_ENV} (or the store's path) to a writable place"
        )));
    }
    // The first read of the file: a file that is not a database fails here.
    let (app_id, version) = versions(&conn).map_err(opening)?;
    check_ours(path, app_id, version)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .map_err(opening)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::unavailable(format!(
            "the store {p} cannot use write-ahead logging (journal mode stays `{mode}`); \
             put it on a local filesystem (not a network share), or set {DEFAULT_PATH_ENV} to a path on one"
        )));
    }
    conn.pragma_update(None, "synchronous", settings.synchronous.pragma())
        .map_err(opening)?;
    if version < sql::SCHEMA_VERSION {
        migrate(&conn, path)?;
    }
    Ok(conn)
}

fn versions(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    let app_id = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
    let version = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    Ok((app_id, version))
}

/// Refuses a file of another application, or of a newer idemkit.
fn check_ours(path: &Path, app_id: i64, version: i64) -> Result<(), StoreError> {
    let p = path.display();
    if app_id != 0 && app_id != sql::APPLICATION_ID {
        return Err(StoreError::new(
            StoreErrorKind::Incompatible,
            format!(
                "{p} is a SQLite database of another application (application_id {app_id:#x}), not an \
                 idemkit store; it was not changed. Set {DEFAULT_PATH_ENV} (or the store's path) to another file"
            ),
        ));
    }
    if version > sql::SCHEMA_VERSION {
        return Err(StoreError::new(
            StoreErrorKind::Incompatible,
            format!(
                "the store {p} has schema version {version}, written by a newer idemkit; this build knows \
                 versions up to {}. It was not changed: upgrade idemkit in this program, or set {DEFAULT_PATH_ENV} \
                 (or the store's path) to another file",
                sql::SCHEMA_VERSION
            ),
        ));
    }
    Ok(())
}

/// Brings the file to [`sql::SCHEMA_VERSION`] in one transaction; concurrent openers wait for
/// the write lock, then find it done.
fn migrate(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let failed = |e| sql_error(path, "create or migrate the tables of", e);
    conn.execute_batch("BEGIN IMMEDIATE").map_err(failed)?;
    let result = (|| {
        let (app_id, version) = versions(conn).map_err(failed)?;
        check_ours(path, app_id, version)?;
        if version == 0 {
            let tables: i64 = conn
                .query_row(
                    "SELECT count(*) FROM sqlite_schema WHERE type = 'table'",
                    [],
                    |r| r.get(0),
                )
                .map_err(failed)?;
            if tables > 0 {
                return Err(StoreError::new(
                    StoreErrorKind::Incompatible,
                    format!(
                        "{} is a SQLite database with {tables} table(s) of its own, not an idemkit store; \
                         it was not changed. Set {DEFAULT_PATH_ENV} (or the store's path) to a new file",
                        path.display()
                    ),
                ));
            }
        }
        for (from, migration) in sql::MIGRATIONS
            .iter()
            .enumerate()
            .skip(usize::try_from(version).unwrap_or(0))
        {
            conn.execute_batch(migration).map_err(failed)?;
            conn.pragma_update(None, "user_version", from as i64 + 1)
                .map_err(failed)?;
            tracing::info!(path = %path.display(), version = from + 1, "store schema migrated");
        }
        conn.pragma_update(None, "application_id", sql::APPLICATION_ID)
            .map_err(failed)?;
        Ok(())
    })();
    match result {
        Ok(()) => conn.execute_batch("COMMIT").map_err(failed),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}
