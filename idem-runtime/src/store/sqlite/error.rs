//! SQLite's failures as the store's: what each means and what to do about it.

use std::path::Path;

use rusqlite::ErrorCode;

use super::DEFAULT_PATH_ENV;
use crate::error::{StoreError, StoreErrorKind};

/// Whether a store error is SQLite's "busy" or "locked".
pub(super) fn is_busy(e: &StoreError) -> bool {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<rusqlite::Error>())
        .and_then(rusqlite::Error::sqlite_error_code)
        .is_some_and(|code| matches!(code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked))
}

/// A SQLite failure while doing `what` (e.g. "claim a key in") the file at `path`, as a
/// [`StoreError`] that names the file and says what to do.
pub(super) fn sql_error(path: &Path, what: &str, e: rusqlite::Error) -> StoreError {
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
