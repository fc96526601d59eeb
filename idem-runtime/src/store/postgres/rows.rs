//! Rows decoded into records, PostgreSQL's errors said as store errors, identifiers checked and quoted.

use std::time::Duration;

use deadpool_postgres::PoolError;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use uuid::Uuid;

use crate::error::{StoreError, StoreErrorKind};
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use crate::store::{
    Decision, Existing, ExistingState, LeaseToken, Record, RecordState, Resolution,
};

pub(super) enum Migration {
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
            _ if pg_serialization_failure(&e) => Migration::Raced(e),
            _ => Migration::Pg(e),
        }
    }
}

pub(super) enum Failed {
    Pg(tokio_postgres::Error),
    Pool(PoolError),
}

impl Failed {
    /// Whether the connection went away (terminated backend, reset socket, server restart), so
    /// the same statement may succeed on a fresh one.
    pub(super) fn connection_lost(&self) -> bool {
        match self {
            Failed::Pg(e) => pg_connection_lost(e),
            Failed::Pool(PoolError::Backend(e)) => pg_connection_lost(e),
            Failed::Pool(_) => false,
        }
    }

    /// Whether the server rolled the statement back as a serialization failure or a deadlock,
    /// so that sending it again may succeed.
    pub(super) fn serialization_failure(&self) -> bool {
        matches!(self, Failed::Pg(e) if pg_serialization_failure(e))
    }
}

/// SQLSTATE `40001` (serialization failure, SERIALIZABLE or REPEATABLE READ) or `40P01`
/// (deadlock): the transaction did nothing and may be tried again.
pub(super) fn pg_serialization_failure(e: &tokio_postgres::Error) -> bool {
    matches!(e.code(), Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE
        || *c == SqlState::T_R_DEADLOCK_DETECTED)
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Pg(e) => write!(f, "{e}"),
            Failed::Pool(e) => write!(f, "{e}"),
        }
    }
}

pub(super) fn pg_connection_lost(e: &tokio_postgres::Error) -> bool {
    use std::error::Error as _;
    e.is_closed()
        || matches!(e.code(), Some(c) if *c == SqlState::ADMIN_SHUTDOWN
            || *c == SqlState::CRASH_SHUTDOWN
            || *c == SqlState::CANNOT_CONNECT_NOW)
        || e.source().is_some_and(|s| s.is::<std::io::Error>())
}

pub(super) fn pg_error(e: tokio_postgres::Error, what: &str) -> StoreError {
    let kind =
        if e.as_db_error().is_none() || pg_connection_lost(&e) || pg_serialization_failure(&e) {
            // A conflict still there after the retries is contention: calling again is safe.
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

pub(super) fn pool_error(e: PoolError) -> StoreError {
    StoreError::unavailable(format!(
        "no PostgreSQL connection could be had: {e}; check the URL, that the server is up, and that it accepts this role"
    ))
    .with_source(e)
}

pub(super) fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

pub(super) fn fingerprint_of(bytes: &[u8]) -> Result<Fingerprint, StoreError> {
    <[u8; 32]>::try_from(bytes).map(Fingerprint).map_err(|_| {
        StoreError::corrupt(format!(
            "a row's fingerprint has {} bytes, not 32; the row was not written by idemkit: delete it",
            bytes.len()
        ))
    })
}

/// Reads `fingerprint, state, outcome, lease_remaining_us`.
pub(super) fn existing_of(row: &Row) -> Result<Existing, StoreError> {
    let fingerprint = fingerprint_of(row.try_get(0).map_err(corrupt_row)?)?;
    let state: &str = row.try_get(1).map_err(corrupt_row)?;
    let outcome: Option<Vec<u8>> = row.try_get(2).map_err(corrupt_row)?;
    let lease_us: i64 = row.try_get(3).map_err(corrupt_row)?;
    let state = match (state, outcome) {
        ("running", _) => ExistingState::Running {
            lease_remaining: Duration::from_micros(lease_us.max(0) as u64),
        },
        ("completed", Some(outcome)) => ExistingState::Completed {
            outcome: outcome.into(),
        },
        ("ambiguous", _) => ExistingState::Ambiguous,
        (state, _) => return Err(bad_state(state)),
    };
    Ok(Existing { fingerprint, state })
}

/// Reads `RECORD_COLUMNS`: `tool, fingerprint, state, token, outcome, note,
/// lease_remaining_us, expires_in_us, created, updated, tenant, key, resolution, resolved_at,
/// resolution_note`.
pub(super) fn record_of(row: &Row) -> Result<Record, StoreError> {
    let tool: String = row.try_get(0).map_err(corrupt_row)?;
    let fingerprint = fingerprint_of(row.try_get(1).map_err(corrupt_row)?)?;
    let state: &str = row.try_get(2).map_err(corrupt_row)?;
    let token: Uuid = row.try_get(3).map_err(corrupt_row)?;
    let outcome: Option<Vec<u8>> = row.try_get(4).map_err(corrupt_row)?;
    let note: Option<String> = row.try_get(5).map_err(corrupt_row)?;
    let lease_us: i64 = row.try_get(6).map_err(corrupt_row)?;
    let expires_us: i64 = row.try_get(7).map_err(corrupt_row)?;
    let created: std::time::SystemTime = row.try_get(8).map_err(corrupt_row)?;
    let updated: std::time::SystemTime = row.try_get(9).map_err(corrupt_row)?;
    let tenant: Option<String> = row.try_get(10).map_err(corrupt_row)?;
    let key: Uuid = row.try_get(11).map_err(corrupt_row)?;
    let decision: Option<&str> = row.try_get(12).map_err(corrupt_row)?;
    let resolved_at: Option<std::time::SystemTime> = row.try_get(13).map_err(corrupt_row)?;
    let resolution_note: Option<String> = row.try_get(14).map_err(corrupt_row)?;
    let resolution = match decision {
        None => None,
        Some(word) => Some(Resolution::new(
            Decision::from_stored(word.as_bytes()).ok_or_else(|| bad_state(word))?,
            resolved_at
                .unwrap_or(std::time::UNIX_EPOCH)
                .max(std::time::UNIX_EPOCH),
            resolution_note,
        )),
    };
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
        key: IdempotencyKey::from_uuid(key),
        tool,
        fingerprint,
        state,
        expires_in: Duration::from_micros(expires_us.max(0) as u64),
        // Before the epoch: written before schema 2 (its default), unknown.
        created: created.max(std::time::UNIX_EPOCH),
        updated: updated.max(std::time::UNIX_EPOCH),
        tenant,
        resolution,
    })
}

pub(super) fn bad_state(state: &str) -> StoreError {
    StoreError::corrupt(format!(
        "a row is in state `{state}` without what that state needs (a completed row needs an outcome); \
         the row was not written by idemkit: delete it"
    ))
}

pub(super) fn corrupt_row(e: tokio_postgres::Error) -> StoreError {
    StoreError::corrupt(
        "a row does not have the columns idemkit wrote; was the table altered by hand?",
    )
    .with_source(e)
}

/// Checks a table or schema name: letters, digits and `_`, not starting with a digit, at most 40
/// characters (so the derived names fit PostgreSQL's 63).
pub(super) fn identifier(name: &str) -> Result<String, StoreError> {
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

pub(super) fn quote(ident: &str) -> String {
    format!("\"{ident}\"")
}
