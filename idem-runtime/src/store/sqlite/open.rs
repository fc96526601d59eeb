//! Opening the file: its directory, that it is ours, WAL and `synchronous`, migrations; and
//! noticing it deleted or replaced later.

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

use std::sync::Arc;

use super::conn::{Open, Shared, file_id};
use super::error::{is_busy, sql_error};
use super::options::SqliteStoreBuilder;
use super::{DEFAULT_PATH_ENV, SqliteStore, sql};
use crate::error::{StoreError, StoreErrorKind};

/// Opens the file (see [`open_once`]), trying again while another opener holds the lock, up to
/// the busy timeout. SQLite answers some lock upgrades of a first open (switching a new file to
/// WAL while another connection reads it) with "locked" at once, without its busy handler, to
/// avoid a deadlock; several processes starting together on a new file hit exactly that.
pub(super) fn open_connection(
    path: &Path,
    settings: &SqliteStoreBuilder,
) -> Result<Open, StoreError> {
    let started = std::time::Instant::now();
    loop {
        let opened = open_once(path, settings).map(|conn| Open {
            file: file_id(path),
            ..Open::new(conn, settings.synchronous)
        });
        match opened {
            Err(e) if is_busy(&e) && started.elapsed() < settings.busy_timeout => {
                std::thread::sleep(Duration::from_millis(fastrand::u64(5..=25)));
            }
            result => return result,
        }
    }
}

/// Opens the file: creates its directory, checks it is ours, sets WAL and `synchronous`,
/// migrates an older schema, refuses a newer one.
pub(super) fn open_once(
    path: &Path,
    settings: &SqliteStoreBuilder,
) -> Result<Connection, StoreError> {
    if settings.read_only {
        return open_read_only(path, settings);
    }
    let p = path.display();
    if path.is_dir() {
        return Err(StoreError::unavailable(format!(
            "the store's path {p} is a directory, not a file; set {DEFAULT_PATH_ENV} (or the store's path) to a file, \
             such as {}",
            path.join("idemkit.db").display()
        )));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        private_dir(dir).map_err(|e| {
            StoreError::unavailable(format!(
                "cannot create the directory {} for the store {p}: {e}; create it (writable by this user), \
                 or set {DEFAULT_PATH_ENV} (or the store's path) to a writable place",
                dir.display()
            ))
            .with_source(e)
        })?;
    }
    private_file(path);
    let opening = |e| sql_error(path, "open", e);
    let conn = match &settings.vfs {
        None => Connection::open(path),
        Some(vfs) => {
            Connection::open_with_flags_and_vfs(path, rusqlite::OpenFlags::default(), vfs.as_str())
        }
    }
    .map_err(opening)?;
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

/// Opens an existing store for reading: nothing created, migrated or switched.
fn open_read_only(path: &Path, settings: &SqliteStoreBuilder) -> Result<Connection, StoreError> {
    use rusqlite::OpenFlags;
    let p = path.display();
    if !path.is_file() {
        return Err(StoreError::unavailable(format!(
            "there is no store at {p} (nothing was created); give the path of an existing store, or set \
             {DEFAULT_PATH_ENV} to where the agent keeps it"
        )));
    }
    let opening = |e| sql_error(path, "open", e);
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = match &settings.vfs {
        None => Connection::open_with_flags(path, flags),
        Some(vfs) => Connection::open_with_flags_and_vfs(path, flags, vfs.as_str()),
    }
    .map_err(opening)?;
    conn.busy_timeout(settings.busy_timeout).map_err(opening)?;
    let (app_id, version) = versions(&conn).map_err(opening)?;
    check_ours(path, app_id, version)?;
    if version < sql::SCHEMA_VERSION {
        return Err(StoreError::new(
            StoreErrorKind::Incompatible,
            format!(
                "the store {p} has schema version {version} (an older idemkit; 0 is an empty file) and was not \
                 changed; reading it needs version {}: open it once for writing with this idemkit (any write, \
                 or the agent itself after an upgrade) to migrate it",
                sql::SCHEMA_VERSION
            ),
        ));
    }
    Ok(conn)
}

pub(super) fn versions(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    let app_id = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
    let version = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    Ok((app_id, version))
}

/// Refuses a file of another application, or of a newer idemkit.
pub(super) fn check_ours(path: &Path, app_id: i64, version: i64) -> Result<(), StoreError> {
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
pub(super) fn migrate(conn: &Connection, path: &Path) -> Result<(), StoreError> {
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
            tracing::debug!(path = %path.display(), version = from + 1, "store schema migrated");
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

/// Creates the store's directory (and its missing parents) readable by this user only: the
/// records hold outcomes (receipts, customer data) and decide what runs again.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
    }
    #[cfg(not(unix))]
    std::fs::create_dir_all(dir)
}

/// Creates the database file readable by this user only (SQLite gives its WAL and shared-memory
/// files the same permissions); an existing file that other users may write is reported, since
/// they could rewrite what replays.
fn private_file(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_file() && meta.mode() & 0o022 != 0 => tracing::warn!(
                path = %path.display(),
                mode = format!("{:o}", meta.mode() & 0o777),
                "the store's file is writable by other users, who could rewrite the outcomes it replays; \
                 make it writable by its owner only (chmod 600)"
            ),
            Ok(_) => {}
            Err(_) => {
                // Made here, empty, so that SQLite opens it with these permissions; a racing
                // opener that made it first is fine.
                let _ = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path);
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

impl SqliteStoreBuilder {
    /// Opens the file now (creating it and its directory if missing, migrating an older schema).
    /// Blocks: call it at start-up, not on an async worker thread.
    pub fn open(self) -> Result<SqliteStore, StoreError> {
        let store = self.open_lazily();
        {
            let db = &store.shared.db;
            let mut conn = db.lock();
            *conn = Some(open_connection(&db.path, &db.settings)?);
        }
        Ok(store)
    }

    /// The store, opened by its first operation (on the store's own thread); until one succeeds,
    /// each operation tries again and fails with why.
    pub fn open_lazily(self) -> SqliteStore {
        SqliteStore {
            shared: Arc::new(Shared::new(self)),
        }
    }
}
