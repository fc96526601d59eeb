//! The embedded default store: one SQLite file, shared by the processes of one machine, that
//! keeps every claim and outcome across a crash (`kill -9`) and a restart.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Sender};
use std::time::Duration;

use rusqlite::Connection;

use crate::error::{StoreError, StoreErrorKind};

mod conn;
mod error;
mod group;
mod inline;
mod open;
mod options;
mod records;
mod rows;
mod sql;
#[cfg(test)]
mod tests;
mod transitions;
mod wal;

use self::conn::{Access, Db, Job, Reply, Shared, Slot};
use self::group::{again, serve};
use self::inline::Inline;
pub use self::options::{SqliteStoreBuilder, Synchronous};

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
pub fn default_path() -> Result<PathBuf, StoreError> {
    let path = match std::env::var_os(DEFAULT_PATH_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(".idemkit").join("idemkit.db"),
    };
    std::path::absolute(&path).map_err(|e| {
        StoreError::unavailable(format!(
            "the default store path `{}` cannot be made absolute ({e}); set {DEFAULT_PATH_ENV} to an absolute path",
            path.display()
        ))
        .with_source(e)
    })
}

/// Keeps records in one SQLite file, shared safely by the processes of one machine.
///
/// Cheap to clone; clones share one connection. Its source (`sql.rs`) has every statement it
/// runs.
///
/// ```no_run
/// # fn main() -> Result<(), idem_runtime::StoreError> {
/// use idem_runtime::{Idem, SqliteStore, Synchronous};
/// use std::time::Duration;
///
/// let store = SqliteStore::builder("/var/lib/my-agent/idemkit.db")
///     .synchronous(Synchronous::Full)            // the default: an outcome survives power loss
///     .busy_timeout(Duration::from_secs(5))
///     .open()?;
/// Idem::new(store).install().expect("installed once, at start-up");
/// # Ok(()) }
/// ```
///
/// With no runtime installed, the first side-effect call opens [`default_path`] instead.
///
/// # How it keeps the contract
///
/// - **One statement per transition** (in `sql.rs`): a claim is one `INSERT … ON CONFLICT DO
///   UPDATE … WHERE … RETURNING`, so two processes racing for a key cannot both take it; every
///   holder's write names its lease token, so a holder whose lease was taken over changes nothing.
/// - **The clock** is the process's wall clock ([`std::time::SystemTime`]), passed into every
///   statement as unix milliseconds. SQLite's own `unixepoch('subsec')` reads the same
///   operating-system clock, so processes on one machine agree either way; passing it in keeps
///   `now` one value per operation, visible in the statement's parameters and in its comments. What
///   a step of a process's clock does: a lease end written by a clock **ahead** (a holder whose
///   clock jumped forward, then died) is capped at the holder's own lease (kept with the record)
///   from the claimer's clock when a claimer finds it (`CAP_LEASE` in `sql.rs`), so the key frees
///   within that lease, not after the jump; never at the claimer's lease, so callers of one key may
///   use different lease lengths (S23). A claimer whose clock is ahead by more than the holder's
///   lease takes a live holder's key over early: the holder's next renewal (within a third of its
///   lease) is then refused and stops it (S13), and its late write is fenced (S11).
/// - **After `fork()`** the child opens the file anew on first use, with its own thread; the
///   parent's connection is never used (nor closed) in the child.
/// - **A deleted or replaced file** (`git clean -xdf`) is noticed by the next operation (one
///   `stat` each), which fails closed saying so, rather than record into an unlinked file.
/// - **Durability**: WAL with `synchronous=FULL` by default, so a claim is on disk before its
///   body runs and an outcome before `complete` returns: nothing acknowledged is lost to a power
///   cut (measured with a crash VFS). `Synchronous::Normal` is faster and keeps every commit
///   across a process crash, but a power loss may lose the commits since its last checkpoint,
///   and an operation whose claim is lost runs again (see [`Synchronous::Normal`]).
/// - **Async callers never block**: one connection per store, and a thread of the store's own
///   for what may wait: a commit under `synchronous=FULL` (an fsync), a wait for another
///   process's write lock (up to the busy timeout), opening the file, a checkpoint. What cannot
///   wait runs at once on the caller's thread, with no busy wait: a read, and under
///   `synchronous=NORMAL` a write (no fsync at commit); if another process holds the write
///   lock, it goes to the thread. SQLite lets one writer in at a time anyway, and a mutex hands
///   the connection over at once where a second connection would wait in SQLite's busy handler,
///   which sleeps in steps of milliseconds.
/// - **Group commit**: writes that queue up for the thread while it is busy (many callers under
///   `synchronous=FULL`) run as one transaction with one commit, so one fsync serves them all.
///   Each caller is answered only once that commit is on disk; a write that fails is undone
///   alone (a claim is a savepoint inside the group), and a commit that fails fails every write
///   of the group.
/// - **Schema version** in `PRAGMA user_version`, the file marked as idemkit's by
///   `PRAGMA application_id`; `MIGRATIONS` (in `sql.rs`) brings an older file up to date in one
///   transaction, and a file from a newer idemkit is refused, not touched.
#[derive(Clone)]
pub struct SqliteStore {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.shared.db.path)
            .field("synchronous", &self.shared.db.settings.synchronous)
            .field("busy_timeout", &self.shared.db.settings.busy_timeout)
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
            read_only: false,
            vfs: None,
            tombstones: crate::store::DEFAULT_TOMBSTONES,
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.shared.db.path
    }

    /// This process's connection and thread: after a `fork()`, the child's own, opened on first
    /// use. The parent's are left untouched in the child (never used, never closed: closing an
    /// inherited SQLite connection is as unsafe as using it).
    fn here(&self) -> &Shared {
        let generation = crate::store::fork_generation();
        let mut shared = &*self.shared;
        while shared.generation != generation {
            shared = shared.forked.get_or_init(|| {
                tracing::debug!(path = %shared.db.path.display(), "forked: opening the store anew in this process");
                std::mem::forget(Arc::clone(&shared.db));
                Arc::new(Shared::new(shared.db.settings.clone()))
            });
        }
        shared
    }

    /// Runs `op` on the connection: on the caller's thread when it cannot make it wait (see
    /// [`Db::try_inline`]), else on the store's connection thread, awaited without blocking.
    /// `op` may be called twice: a first try that found the write lock taken changed nothing.
    async fn run<T: Send + 'static>(
        &self,
        access: Access,
        mut op: impl FnMut(&mut Connection, &Path) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let here = self.here();
        let db = &here.db;
        // An operation on the caller's thread returns without yielding: count it against the
        // task's budget, as tokio's own resources do, so a loop of them lets other tasks run.
        tokio::task::consume_budget().await;
        loop {
            match db.try_inline(&mut op, access) {
                Inline::Done(result) => return result,
                Inline::Thread => break,
                Inline::Wait => {
                    let freed = db.freed.notified();
                    let mut freed = std::pin::pin!(freed);
                    // Listening before trying again, so a release in between is not missed.
                    freed.as_mut().enable();
                    match db.try_inline(&mut op, access) {
                        Inline::Done(result) => return result,
                        Inline::Thread => break,
                        Inline::Wait => freed.await,
                    }
                }
            }
        }
        let jobs = Self::jobs(here)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        db.queued.fetch_add(1, Ordering::SeqCst);
        let job = Job {
            access,
            run: Box::new(move |slot: Slot<'_>| -> Reply {
                let result = match slot {
                    Slot::Run(conn, path) => {
                        std::panic::catch_unwind(AssertUnwindSafe(|| op(conn, path))).map_err(
                            |panic| {
                                panic
                                    .downcast_ref::<&str>()
                                    .map(|s| (*s).to_owned())
                                    .or_else(|| panic.downcast_ref::<String>().cloned())
                                    .unwrap_or_else(|| "no message".to_owned())
                            },
                        )
                    }
                    Slot::Fail(e) => Ok(Err(e)),
                };
                Box::new(move |db: &Db, group_failed: Option<&StoreError>| {
                    let result = match group_failed {
                        Some(e) => Ok(Err(again(e))),
                        None => result,
                    };
                    if db.queued.fetch_sub(1, Ordering::SeqCst) == 1 {
                        db.freed.notify_one();
                    }
                    let _ = tx.send(result);
                })
            }),
        };
        if jobs.send(job).is_err() && db.queued.fetch_sub(1, Ordering::SeqCst) == 1 {
            db.freed.notify_one();
        }
        let why = match rx.await {
            Ok(Ok(result)) => return result,
            Ok(Err(panic)) => format!("it panicked ({panic})"),
            Err(_) => "the store's connection thread is gone".to_owned(),
        };
        Err(StoreError::new(
            StoreErrorKind::Other,
            format!(
                "an operation on the store {} did not finish: {why}",
                self.path().display()
            ),
        ))
    }

    /// The connection thread's queue, starting the thread if needed.
    fn jobs(here: &Shared) -> Result<&Sender<Job>, StoreError> {
        if let Some(jobs) = here.jobs.get() {
            return Ok(jobs);
        }
        let (tx, rx) = mpsc::channel::<Job>();
        let db = Arc::clone(&here.db);
        std::thread::Builder::new()
            .name("idemkit-sqlite".to_owned())
            .spawn(move || serve(&db, &rx))
            .map_err(|e| {
                StoreError::unavailable(format!(
                    "cannot start a thread for the store {}: {e}",
                    here.db.path.display()
                ))
                .with_source(e)
            })?;
        // Another caller may have started one meanwhile: then this queue is dropped here, and
        // its thread ends at once.
        let _ = here.jobs.set(tx);
        Ok(here.jobs.get().expect("set above"))
    }
}
