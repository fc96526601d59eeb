//! PostgreSQL's failures as the store's: what each means, and which may be sent again.

use deadpool_postgres::PoolError;
use tokio_postgres::error::SqlState;

use crate::error::{StoreError, StoreErrorKind};

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
