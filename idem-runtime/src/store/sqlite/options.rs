//! A store's settings: `Synchronous` and the builder that opens a store.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::SqliteStore;
use super::conn::Shared;
use super::open::open_connection;
use crate::error::StoreError;

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
    pub(super) fn pragma(self) -> &'static str {
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
    pub(super) path: PathBuf,
    pub(super) synchronous: Synchronous,
    pub(super) busy_timeout: Duration,
    pub(super) read_only: bool,
    pub(super) vfs: Option<String>,
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

    /// Opens an existing store for reading only (default: no), as an operator's reads do: a
    /// missing file is an error, not created; nothing is migrated or switched to WAL, and a
    /// store of an older schema is refused with what to do. Writes through it fail.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Opens the file through the SQLite VFS registered as `name` instead of the default one.
    /// For tests: the power-cut tests open the store through a VFS that simulates a power loss
    /// (`tests/crashvfs`); a VFS of your own must keep SQLite's durability and locking.
    #[doc(hidden)]
    pub fn vfs(mut self, name: impl Into<String>) -> Self {
        self.vfs = Some(name.into());
        self
    }

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
