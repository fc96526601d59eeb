//! The connection and what shares it: the store's state per process (`Shared`), the
//! connection behind its mutex (`Db`), an open connection (`Open`), and what is handed to it:
//! an operation's kind of access (`Access`) and a job for the connection thread (`Job`). The
//! store's files build on this one and on `options` (settings) and `error` (SQLite's failures),
//! one way: `open` opens, `inline` and `group` run operations on callers' threads and the
//! connection thread, `transitions` and `records` are the store's operations, `rows` decodes
//! what they read.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, OnceLock};

use rusqlite::Connection;

use super::options::{SqliteStoreBuilder, Synchronous};
use super::wal::count_wal_frames;
use crate::error::StoreError;

pub(super) struct Shared {
    /// The fork generation (see [`super::fork_generation`]) this connection and thread belong to.
    pub(super) generation: u64,
    /// The store's own connection and thread in a forked child, opened there on first use: a
    /// child has no connection thread, and must not use its parent's connection.
    pub(super) forked: OnceLock<Arc<Shared>>,
    pub(super) db: Arc<Db>,
    /// The connection thread's queue; the thread is started by the first operation that needs
    /// it, and ends when the last clone of the store is dropped (its queue then disconnects).
    pub(super) jobs: OnceLock<Sender<Job>>,
    /// Claims since the last opportunistic prune.
    pub(super) claims: AtomicU32,
}

impl Shared {
    /// Not opened yet: the first operation opens the file.
    pub(super) fn new(settings: SqliteStoreBuilder) -> Self {
        Shared {
            generation: crate::store::fork_generation(),
            forked: OnceLock::new(),
            db: Arc::new(Db {
                path: settings.path.clone(),
                settings,
                conn: Mutex::new(None),
                queued: AtomicUsize::new(0),
                #[cfg(test)]
                grouped: AtomicUsize::new(0),
                freed: tokio::sync::Notify::new(),
                spinning: AtomicBool::new(false),
            }),
            jobs: OnceLock::new(),
            claims: AtomicU32::new(0),
        }
    }
}

/// The connection, shared by the store's connection thread and its callers' threads.
pub(super) struct Db {
    pub(super) path: PathBuf,
    pub(super) settings: SqliteStoreBuilder,
    /// `None` until opened (lazily, or again after a failed open).
    pub(super) conn: Mutex<Option<Open>>,
    /// Jobs handed to the connection thread and not finished yet.
    pub(super) queued: AtomicUsize,
    /// Told (one waiter at a time) when an operation on a caller's thread lets go of the
    /// connection, and when the connection thread's queue empties.
    pub(super) freed: tokio::sync::Notify,
    /// Operations committed in groups of two or more (see [`Db::run_group`]): what the tests
    /// of group commit count; not in other builds.
    #[cfg(test)]
    pub(super) grouped: AtomicUsize,
    /// Whether a caller is spinning for the connection (see [`Db::spin_for_lock`]).
    pub(super) spinning: AtomicBool,
}

/// An open connection.
pub(super) struct Open {
    pub(super) conn: Connection,
    /// The file it opened (device and inode), to notice the file deleted or replaced.
    pub(super) file: Option<(u64, u64)>,
    /// Under `synchronous=NORMAL`, the frames (pages) in the WAL after this connection's last
    /// commit, as SQLite reports them to [`count_wal_frames`]; it decides when to checkpoint
    /// (see [`Db::try_inline`]). Declared after `conn`: dropped after the connection is closed.
    pub(super) wal_frames: Option<Box<AtomicU32>>,
}

impl Open {
    /// Under `synchronous=NORMAL`, replaces SQLite's automatic checkpoint on `conn` with a count
    /// of the WAL's frames: the store checkpoints on its own thread instead.
    pub(super) fn new(conn: Connection, synchronous: Synchronous) -> Self {
        let wal_frames = (synchronous == Synchronous::Normal).then(|| {
            let frames = Box::new(AtomicU32::new(0));
            let arg: *const AtomicU32 = &*frames;
            // SAFETY: the hook only stores into the `AtomicU32` behind `arg`, which lives on the
            // heap as long as `Open` holds it: after `conn` (fields drop in order), so for as
            // long as SQLite may call the hook. Nothing else sets this connection's WAL hook.
            unsafe {
                rusqlite::ffi::sqlite3_wal_hook(
                    conn.handle(),
                    Some(count_wal_frames),
                    arg.cast_mut().cast(),
                );
            }
            frames
        });
        Open {
            conn,
            file: None,
            wal_frames,
        }
    }

    /// Fails when the file at `path` is no longer the one this connection opened: deleted,
    /// moved away or replaced (say by `git clean -xdf`) while the process ran. SQLite would go on
    /// writing to the unlinked file, and a process started later would find an empty store and
    /// run every operation again; so the store fails closed instead. One `stat` per operation.
    pub(super) fn still_there(&self, path: &Path) -> Result<(), StoreError> {
        let Some(opened) = self.file else {
            return Ok(());
        };
        let now = file_id(path);
        if now == Some(opened) {
            return Ok(());
        }
        let what = if now.is_none() {
            "was deleted or moved away"
        } else {
            "was replaced by another file"
        };
        Err(StoreError::unavailable(format!(
            "the store's file {} {what} while this process had it open (a `git clean -xdf`, or a `rm -r .idemkit`?); \
             the outcomes recorded so far are in the file this process still has open, so it refuses to go on rather \
             than record into a store that the next process will not see. Put the file back, or restart the process \
             to start from the file now at that path (operations recorded only in the old file may then run again)",
            path.display()
        )))
    }

    /// Whether the WAL has grown to [`CHECKPOINT_PAGES`] under `synchronous=NORMAL`.
    pub(super) fn wants_checkpoint(&self) -> bool {
        self.wal_frames
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed) >= CHECKPOINT_PAGES)
    }
}

/// An operation handed to the connection thread.
pub(super) struct Job {
    pub(super) access: Access,
    /// Runs the operation (or takes the error that kept it from running) and keeps its result;
    /// returns what sends that result, once its writes are committed.
    pub(super) run: Box<dyn FnOnce(Slot<'_>) -> Reply + Send>,
}

/// What the connection thread hands a [`Job`].
pub(super) enum Slot<'c> {
    /// The open connection, maybe inside a group's transaction (see [`Db::run_group`]).
    Run(&'c mut Connection, &'c Path),
    /// The operation cannot run: the file did not open, or its group's transaction did not
    /// start.
    Fail(StoreError),
}

/// Sends a job's result: its own, or the error of the group commit it was part of.
pub(super) type Reply = Box<dyn FnOnce(&Db, Option<&StoreError>) + Send>;

/// What an operation does to the file, which decides where it may run (see [`Db::try_inline`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// Reads only: no commit, so no fsync.
    Read,
    /// Writes a record or two.
    Write,
    /// Writes that may take long whatever the settings (a batch of deletes): always on the
    /// connection thread.
    Long,
}

/// Under `synchronous=NORMAL` the store checkpoints the WAL itself, on the connection thread,
/// once it holds this many pages (SQLite's automatic checkpoint, which it replaces on that
/// connection, uses the same figure); see [`Db::try_inline`] for why.
pub(super) const CHECKPOINT_PAGES: u32 = 1000;

/// The device and inode of the file at `path` (`None` where there is none, or off Unix).
pub(super) fn file_id(path: &Path) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}
