//! A store's settings: `Synchronous` and the builder that opens a store.

use std::path::PathBuf;
use std::time::Duration;

/// SQLite's `synchronous` setting: how hard each commit waits for the disk.
///
/// Both keep every commit across a process crash (`kill -9`, a panic that aborts); they differ
/// on a power loss or an operating-system crash, measured with a file layer that loses what was
/// not synced (`idem-runtime/tests/power_sqlite.rs`, `docs/reliability.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Synchronous {
    /// Every commit is on disk before it returns: a claim before its body runs, an outcome
    /// before it is acknowledged. Across a power loss nothing acknowledged is lost and nothing
    /// runs twice (measured: over 500 cuts at every sync and between calls, any part of the unsynced
    /// writes lost or torn: 0 double runs, 0 lost outcomes). The default.
    #[default]
    Full,
    /// Commits are not synced: the WAL is synced only when the store checkpoints it (every 1000
    /// WAL pages, about 155 calls of small outcomes). Several times faster; every commit survives
    /// a process crash, but **a power loss may lose every commit since the last checkpoint**: a
    /// lost claim whose body had run **runs the operation again** under the same key, and a
    /// lost outcome is no longer replayed (measured: a cut losing what was not synced lost the
    /// last 108 of 1,500 calls, 107 of which ran again; over 260 cuts, 146 double runs and 160
    /// lost outcomes of 546 calls made again). The store cannot notice the loss when it opens:
    /// what would tell it is what was lost. Choose it only where running an operation again
    /// after a power loss is harmless: its provider deduplicates by the idempotency key (sent
    /// again, the same key), or its effect is idempotent, or the machine neither loses power
    /// unannounced (a UPS, a battery-backed disk cache) nor crashes its kernel. How much of that window a real cut
    /// loses depends on the kernel's writeback (Linux writes pages dirty for 30 s by default)
    /// and the disk's cache; the measurement assumes the worst.
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

/// Settings of a [`SqliteStore`](super::SqliteStore); [`SqliteStore::builder`](super::SqliteStore::builder) starts one.
#[must_use]
#[derive(Debug, Clone)]
pub struct SqliteStoreBuilder {
    pub(super) path: PathBuf,
    pub(super) synchronous: Synchronous,
    pub(super) busy_timeout: Duration,
    pub(super) read_only: bool,
    pub(super) vfs: Option<String>,
    pub(super) tombstones: Duration,
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
    /// How long a tombstone (S33: a completed record past its time-to-live, its outcome
    /// dropped) is kept past that time-to-live before a prune may delete it; default
    /// [`DEFAULT_TOMBSTONES`](crate::store::DEFAULT_TOMBSTONES) (400 days). Until then a repeat
    /// of its key is answered "done on DATE; its result is no longer kept", never run; after it,
    /// the key is absent and a repeat runs the operation again. `Duration::MAX` keeps them until
    /// an operator forgets them (`idemkit forget`).
    pub fn tombstones(mut self, keep: Duration) -> Self {
        self.tombstones = keep;
        self
    }

    #[doc(hidden)]
    pub fn vfs(mut self, name: impl Into<String>) -> Self {
        self.vfs = Some(name.into());
        self
    }
}
