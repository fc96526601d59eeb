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
//!   operation, visible in the statement's parameters and in its comments. What a step of a
//!   process's clock does: a lease end written by a clock **ahead** (a holder whose clock
//!   jumped forward, then died) is capped at one lease from the claimer's clock when a claimer
//!   finds it ([`sql::CAP_LEASE`]), so the key frees within a lease, not after the jump; a
//!   claimer whose clock is ahead by more than a lease takes a live holder's key over early: the
//!   holder's next renewal (within a third of its lease) is then refused and stops it (S13),
//!   and its late write is fenced (S11). Callers of one key are assumed to use one lease length.
//! - **After `fork()`** the child opens the file anew on first use, with its own thread; the
//!   parent's connection is never used (nor closed) in the child.
//! - **A deleted or replaced file** (`git clean -xdf`) is noticed by the next operation (one
//!   `stat` each), which fails closed saying so, rather than record into an unlinked file.
//! - **Durability**: WAL with `synchronous=FULL` by default, so a completed outcome is on disk
//!   before `complete` returns; `Synchronous::Normal` may lose the last commits on power loss
//!   (not on a process crash) and is faster.
//! - **Async callers never block**: one connection per store, and a thread of the store's own
//!   for what may wait: a commit under `synchronous=FULL` (an fsync), a wait for another
//!   process's write lock (up to the busy timeout), opening the file, a checkpoint. What cannot
//!   wait runs at once on the caller's thread, with no busy wait: a read, and under
//!   `synchronous=NORMAL` a write (no fsync at commit); if another process holds the write
//!   lock, it goes to the thread. SQLite lets one writer in at a time anyway, and a mutex hands
//!   the connection over at once where a second connection would wait in SQLite's busy handler,
//!   which sleeps in steps of milliseconds.
//! - **Group commit**: writes that queue up for the thread while it is busy (many callers under
//!   `synchronous=FULL`) run as one transaction with one commit, so one fsync serves them all.
//!   Each caller is answered only once that commit is on disk; a write that fails is undone
//!   alone (a claim is a savepoint inside the group), and a commit that fails fails every write
//!   of the group.
//! - **Schema version** in `PRAGMA user_version`, the file marked as idemkit's by
//!   `PRAGMA application_id`; [`sql::MIGRATIONS`] brings an older file up to date in one
//!   transaction, and a file from a newer idemkit is refused, not touched.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
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
/// opened by the first call that needs it (on the store's own thread), so a failure to open it is
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

/// Keeps records in one SQLite file, shared safely by the processes of one machine.
///
/// Cheap to clone; clones share one connection. See the [module docs](self) for how it keeps
/// the store contract, and [`sql`] for every statement it runs.
#[derive(Clone)]
pub struct SqliteStore {
    shared: Arc<Shared>,
}

struct Shared {
    /// The fork generation (see [`super::fork_generation`]) this connection and thread belong to.
    generation: u64,
    /// The store's own connection and thread in a forked child, opened there on first use: a
    /// child has no connection thread, and must not use its parent's connection.
    forked: OnceLock<Arc<Shared>>,
    db: Arc<Db>,
    /// The connection thread's queue; the thread is started by the first operation that needs
    /// it, and ends when the last clone of the store is dropped (its queue then disconnects).
    jobs: OnceLock<Sender<Job>>,
    /// Claims since the last opportunistic prune.
    claims: AtomicU32,
}

impl Shared {
    /// Not opened yet: the first operation opens the file.
    fn new(settings: SqliteStoreBuilder) -> Self {
        Shared {
            generation: super::fork_generation(),
            forked: OnceLock::new(),
            db: Arc::new(Db {
                path: settings.path.clone(),
                settings,
                conn: Mutex::new(None),
                queued: AtomicUsize::new(0),
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
struct Db {
    path: PathBuf,
    settings: SqliteStoreBuilder,
    /// `None` until opened (lazily, or again after a failed open).
    conn: Mutex<Option<Open>>,
    /// Jobs handed to the connection thread and not finished yet.
    queued: AtomicUsize,
    /// Told (one waiter at a time) when an operation on a caller's thread lets go of the
    /// connection, and when the connection thread's queue empties.
    freed: tokio::sync::Notify,
    /// Operations committed in groups of two or more (see [`Db::run_group`]); for tests.
    grouped: AtomicUsize,
    /// Whether a caller is spinning for the connection (see [`Db::spin_for_lock`]).
    spinning: AtomicBool,
}

/// An open connection.
struct Open {
    conn: Connection,
    /// The file it opened (device and inode), to notice the file deleted or replaced.
    file: Option<(u64, u64)>,
    /// Under `synchronous=NORMAL`, the frames (pages) in the WAL after this connection's last
    /// commit, as SQLite reports them to [`count_wal_frames`]; it decides when to checkpoint
    /// (see [`Db::try_inline`]). Declared after `conn`: dropped after the connection is closed.
    wal_frames: Option<Box<AtomicU32>>,
}

impl Open {
    /// Under `synchronous=NORMAL`, replaces SQLite's automatic checkpoint on `conn` with a count
    /// of the WAL's frames: the store checkpoints on its own thread instead.
    fn new(conn: Connection, synchronous: Synchronous) -> Self {
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
    fn still_there(&self, path: &Path) -> Result<(), StoreError> {
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
    fn wants_checkpoint(&self) -> bool {
        self.wal_frames
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed) >= CHECKPOINT_PAGES)
    }
}

/// SQLite's WAL hook, called after each commit of the connection with the frames in the WAL.
unsafe extern "C" fn count_wal_frames(
    frames: *mut std::ffi::c_void,
    _db: *mut rusqlite::ffi::sqlite3,
    _name: *const std::ffi::c_char,
    n: std::ffi::c_int,
) -> std::ffi::c_int {
    // SAFETY: `frames` is the `AtomicU32` registered in `Open::new`, alive while the hook is.
    let frames = unsafe { &*frames.cast::<AtomicU32>() };
    frames.store(u32::try_from(n).unwrap_or(0), Ordering::Relaxed);
    rusqlite::ffi::SQLITE_OK
}

/// An operation handed to the connection thread.
struct Job {
    access: Access,
    /// Runs the operation (or takes the error that kept it from running) and keeps its result;
    /// returns what sends that result, once its writes are committed.
    run: Box<dyn FnOnce(Slot<'_>) -> Reply + Send>,
}

/// What the connection thread hands a [`Job`].
enum Slot<'c> {
    /// The open connection, maybe inside a group's transaction (see [`Db::run_group`]).
    Run(&'c mut Connection, &'c Path),
    /// The operation cannot run: the file did not open, or its group's transaction did not
    /// start.
    Fail(StoreError),
}

/// Sends a job's result: its own, or the error of the group commit it was part of.
type Reply = Box<dyn FnOnce(&Db, Option<&StoreError>) + Send>;

/// At most this many writes share one commit (see [`Db::run_group`]).
const MAX_GROUP: usize = 64;

/// A claim's transaction: its own (IMMEDIATE: the write lock first, so the claim and the read
/// of what it did not take see one state, whatever other processes do), or, inside a group's
/// transaction (which holds the write lock already), a savepoint, so that a claim that fails is
/// undone alone.
enum Scope<'c> {
    Own(rusqlite::Transaction<'c>),
    InGroup(rusqlite::Savepoint<'c>),
}

impl<'c> Scope<'c> {
    fn begin(conn: &'c mut Connection) -> rusqlite::Result<Self> {
        if conn.is_autocommit() {
            conn.transaction_with_behavior(TransactionBehavior::Immediate)
                .map(Scope::Own)
        } else {
            conn.savepoint().map(Scope::InGroup)
        }
    }

    fn commit(self) -> rusqlite::Result<()> {
        match self {
            Scope::Own(tx) => tx.commit(),
            Scope::InGroup(sp) => sp.commit(),
        }
    }
}

impl std::ops::Deref for Scope<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        match self {
            Scope::Own(tx) => tx,
            Scope::InGroup(sp) => sp,
        }
    }
}

/// The same error again, for each job of a group that it failed.
fn again(e: &StoreError) -> StoreError {
    StoreError::new(e.kind(), e.to_string())
}

/// Every job told `e` without running.
fn fail_all(jobs: Vec<Job>, e: &StoreError) -> Vec<Reply> {
    jobs.into_iter()
        .map(|job| (job.run)(Slot::Fail(again(e))))
        .collect()
}

/// What an operation does to the file, which decides where it may run (see [`Db::try_inline`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
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
const CHECKPOINT_PAGES: u32 = 1000;

/// Where [`Db::try_inline`] left an operation.
enum Inline<T> {
    Done(Result<T, StoreError>),
    /// The connection is taken for a moment: try again once [`Db::freed`] is told.
    Wait,
    /// Run it on the connection thread (nothing was changed).
    Thread,
}

impl Db {
    fn lock(&self) -> MutexGuard<'_, Option<Open>> {
        // A panic mid-operation leaves SQLite's own transaction to roll back: the connection
        // is still sound.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether writes may run on callers' threads, the store checkpointing the WAL itself
    /// (see [`Db::try_inline`]).
    fn writes_inline(&self) -> bool {
        self.settings.synchronous == Synchronous::Normal
    }

    /// Runs jobs on the connection, opening the file first if needed, with the busy timeout:
    /// may block, so only on the connection thread.
    ///
    /// Writes that queued up meanwhile run as one group: one transaction and one commit for
    /// all, so under `synchronous=FULL` one fsync serves many callers instead of one each. Each
    /// result is sent only once the group is committed; if the commit fails, every job of the
    /// group gets its error (nothing of the group was written). Inside the group a claim is a
    /// savepoint and every other write one statement, so a write that fails is undone alone and
    /// the others go on; should SQLite roll back the whole transaction after an error (it does
    /// for some I/O errors), the rest of the group does not run and every job gets an error.
    fn run_group(&self, group: Vec<Job>) {
        // The replies go out once the connection is let go of.
        let (replies, failed) = self.run_jobs(group);
        for reply in replies {
            reply(self, failed.as_ref());
        }
    }

    /// [`Db::run_group`]'s work under the connection's lock: the replies to send, and the
    /// error that failed the whole group, if one did.
    fn run_jobs(&self, jobs: Vec<Job>) -> (Vec<Reply>, Option<StoreError>) {
        let mut guard = self.lock();
        if guard.is_none() {
            match open_connection(&self.path, &self.settings) {
                Ok(open) => *guard = Some(open),
                Err(e) => return (fail_all(jobs, &e), None),
            }
        }
        let open = guard.as_mut().expect("opened above");
        if let Err(e) = open.still_there(&self.path) {
            return (fail_all(jobs, &e), None);
        }
        if jobs.iter().any(|job| job.access != Access::Read) && open.wants_checkpoint() {
            // Before the write, so that the write which then starts the WAL over (and syncs its
            // header, see `try_inline`) is this one, here.
            if let Err(e) = open
                .conn
                .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
            {
                tracing::debug!(error = %e, "checkpoint failed; the next write tries again");
            }
        }
        let path = self.path.as_path();
        let conn = &mut open.conn;
        if jobs.len() == 1 {
            let replies = jobs.into_iter().map(|job| (job.run)(Slot::Run(conn, path)));
            return (replies.collect(), None);
        }
        if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
            let e = sql_error(path, "start a group of writes in", e);
            return (fail_all(jobs, &e), None);
        }
        let count = jobs.len();
        let mut lost = None;
        let mut replies = Vec::with_capacity(count);
        for job in jobs {
            if lost.is_none() && conn.is_autocommit() {
                lost = Some(StoreError::unavailable(format!(
                    "SQLite rolled back a group of writes to the store at {} after one of them failed; retry",
                    path.display()
                )));
            }
            replies.push(match &lost {
                None => (job.run)(Slot::Run(conn, path)),
                Some(e) => (job.run)(Slot::Fail(again(e))),
            });
        }
        let failed = match lost {
            Some(e) => Some(e),
            None => conn
                .execute_batch("COMMIT")
                .err()
                .map(|e| sql_error(path, "commit a group of writes to", e)),
        };
        if failed.is_some() && !conn.is_autocommit() {
            if let Err(e) = conn.execute_batch("ROLLBACK") {
                tracing::debug!(error = %e, "rolling back a failed group of writes failed");
            }
        } else if failed.is_none() {
            self.grouped.fetch_add(count, Ordering::Relaxed);
        }
        (replies, failed)
    }

    /// Runs `op` on the caller's thread if it cannot make that thread wait; else says whether
    /// to wait for the connection (never blocking) or to hand `op` to the connection thread.
    ///
    /// Why this cannot hold an async worker thread for long:
    /// - It only runs what does not sync: reads, and writes under `synchronous=NORMAL`, where a
    ///   WAL commit writes to the operating system's cache without an fsync. A commit under
    ///   `FULL` waits for the disk (milliseconds, or as long as a failing disk takes): always on
    ///   the connection thread.
    /// - It never waits for a lock that may be held long. The connection's mutex is only tried:
    ///   if a job of the connection thread holds it (perhaps waiting for another process), or
    ///   is queued for it, this does not wait here; if another caller's operation (one of
    ///   these) holds it, one caller at a time tries again for at most [`SPIN_FOR_LOCK`]. And
    ///   SQLite's busy handler is off for the attempt, so a write lock held by another
    ///   connection fails the statement at once with `SQLITE_BUSY`, before it changed anything
    ///   (a busy `BEGIN IMMEDIATE` or autocommit statement has no effect; a claim's transaction
    ///   is rolled back when dropped), and the operation runs again, from the start, on the
    ///   connection thread with the busy timeout.
    /// - The other syncs of `NORMAL` are checkpoints (an fsync of the WAL and of the database)
    ///   and the first write after a complete checkpoint (it starts the WAL over and syncs its
    ///   header). SQLite's automatic checkpoint would run them in whichever commit crosses
    ///   1000 pages, so under `NORMAL` its WAL hook is replaced by [`count_wal_frames`]: once
    ///   the WAL holds [`CHECKPOINT_PAGES`], the next write goes to the connection thread, which
    ///   checkpoints and then writes. (Another process's checkpoint can still make a write here
    ///   start the WAL over: one fsync of one page, now and then.)
    /// - The first open, and an opportunistic prune of up to [`PRUNE_BATCH`] rows, run on the
    ///   connection thread too.
    ///
    /// Under `NORMAL`, nearly every operation runs on callers' threads, so a caller that finds
    /// the connection taken (by another caller's short operation, or by a job) waits, without
    /// blocking, for [`Db::freed`], rather than queue for the connection thread: once callers
    /// join that queue, each woken caller joins it again before it empties, and every operation
    /// would pay two thread hand-overs. Under `FULL`, writes keep the thread busy, and a read
    /// queues behind them.
    fn try_inline<T>(
        &self,
        op: &mut impl FnMut(&mut Connection, &Path) -> Result<T, StoreError>,
        access: Access,
    ) -> Inline<T> {
        // What to do if the connection is taken.
        let taken = match access {
            Access::Long => return Inline::Thread,
            Access::Write if !self.writes_inline() => return Inline::Thread,
            _ if self.writes_inline() => Inline::Wait,
            _ => Inline::Thread,
        };
        if self.queued.load(Ordering::SeqCst) > 0 {
            return taken;
        }
        let guard = match self.conn.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => match self.spin_for_lock() {
                Some(guard) => guard,
                None => return taken,
            },
        };
        let mut held = Held {
            db: self,
            guard: Some(guard),
        };
        let guard = held.guard.as_mut().expect("set above");
        let Some(open) = guard.as_mut() else {
            return Inline::Thread; // Not opened yet: opening may wait.
        };
        if let Err(e) = open.still_there(&self.path) {
            return Inline::Done(Err(e));
        }
        if access != Access::Read && open.wants_checkpoint() {
            return Inline::Thread;
        }
        if open.conn.busy_timeout(Duration::ZERO).is_err() {
            return Inline::Thread;
        }
        let result = op(&mut open.conn, &self.path);
        match result {
            Err(e) if is_busy(&e) => Inline::Thread,
            result => Inline::Done(result),
        }
        // `held` puts the busy timeout back, lets go of the connection, tells a waiter.
    }

    /// Under `NORMAL`, with no job queued for the connection thread, the connection is held by
    /// another caller's operation, which takes tens of microseconds and never waits (see
    /// [`Db::try_inline`]). Waiting for it asynchronously costs a thread wake-up and sleep
    /// per operation when callers on several worker threads contend; one caller at a time
    /// instead tries the lock again for up to [`SPIN_FOR_LOCK`], as adaptive mutexes do.
    /// `None`: not got (the others wait for [`Db::freed`]).
    fn spin_for_lock(&self) -> Option<MutexGuard<'_, Option<Open>>> {
        let idle = || self.queued.load(Ordering::SeqCst) == 0;
        if !self.writes_inline() || !idle() || self.spinning.swap(true, Ordering::Acquire) {
            return None;
        }
        let started = std::time::Instant::now();
        let got = loop {
            match self.conn.try_lock() {
                Ok(guard) => break Some(guard),
                Err(TryLockError::Poisoned(p)) => break Some(p.into_inner()),
                Err(TryLockError::WouldBlock) if idle() && started.elapsed() < SPIN_FOR_LOCK => {
                    std::hint::spin_loop();
                }
                Err(TryLockError::WouldBlock) => break None,
            }
        };
        self.spinning.store(false, Ordering::Release);
        got
    }
}

/// How long [`Db::spin_for_lock`] tries: less than one operation (~25 µs under `NORMAL`).
const SPIN_FOR_LOCK: Duration = Duration::from_micros(10);

/// The connection held by an operation on a caller's thread; dropped (also by a panic), it puts
/// the busy timeout back, lets go of the connection and then tells the next waiter.
struct Held<'a> {
    db: &'a Db,
    guard: Option<MutexGuard<'a, Option<Open>>>,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(mut guard) = self.guard.take() {
            let restored = guard.as_ref().is_none_or(|open| {
                open.conn
                    .busy_timeout(self.db.settings.busy_timeout)
                    .is_ok()
            });
            if !restored {
                // Never seen (it fails only on a closed handle); a connection without its busy
                // timeout would fail at once under contention, so the next operation reopens.
                *guard = None;
            }
        }
        self.db.freed.notify_one();
    }
}

/// The connection thread: runs jobs in order until the store is dropped, the writes that
/// queued up meanwhile as one group (see [`Db::run_group`]).
fn serve(db: &Db, jobs: &Receiver<Job>) {
    let mut next = None;
    while let Some(first) = next.take().or_else(|| jobs.recv().ok()) {
        let mut group = vec![first];
        if group[0].access == Access::Write {
            while group.len() < MAX_GROUP {
                match jobs.try_recv() {
                    Ok(job) if job.access == Access::Write => group.push(job),
                    Ok(job) => {
                        next = Some(job);
                        break;
                    }
                    Err(_) => break,
                }
            }
        }
        db.run_group(group);
    }
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
        let generation = super::fork_generation();
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

    /// running, its lease ending further ahead than :cap (now + a lease: written by a clock
    /// ahead of this one) → running, the lease ending at :cap.
    pub const CAP_LEASE: &str = "
        UPDATE records SET lease_until = :cap
        WHERE key = :key AND state = 'running' AND lease_until > :cap";

    /// running, held by :token, not expired → running, the lease ending at :lease_until; the
    /// expiry moved to the lease end if that is later.
    pub const RENEW: &str = "
        UPDATE records SET lease_until = :lease_until, expires_at = max(expires_at, :lease_until)
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
        let (lease, ttl, req_lease) = (ms(req.lease), ms(req.ttl), req.lease);
        let prune =
            self.here().claims.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1;
        // A claim that also prunes (up to `PRUNE_BATCH` rows) runs on the store's thread.
        let access = if prune { Access::Long } else { Access::Write };
        self.run(access, move |conn, path| {
            let now = now_ms();
            let claim = (|| {
                // The write lock first (see `Scope`).
                let tx = Scope::begin(conn)?;
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
                let mut live = match took {
                    Some(_) => None,
                    None => tx.prepare_cached(sql::LIVE)?.query_row(
                        named_params! { ":key": key.as_str(), ":now": now },
                        |row| Ok(decode(row, &key, path)),
                    ).optional()?,
                };
                // A lease end further ahead than one lease from now was written by a clock
                // ahead of this one: capped, so a dead holder's key frees within a lease here.
                if let Some(Ok(Record { state: RecordState::Running { lease_remaining, .. }, .. })) = &mut live
                    && ms(*lease_remaining) > lease
                {
                    let cap = now.saturating_add(lease);
                    tx.prepare_cached(sql::CAP_LEASE)?
                        .execute(named_params! { ":key": key.as_str(), ":cap": cap })?;
                    tracing::warn!(%key, ahead_ms = ms(*lease_remaining) - lease, "a lease ends further ahead than one lease from now (a clock ahead of this one?); capped");
                    *lease_remaining = req_lease;
                }
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
        self.run(Access::Write, move |conn, path| {
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

    async fn renew(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> Result<Written, StoreError> {
        let (key, lease) = (*key, ms(lease));
        self.run(Access::Write, move |conn, path| {
            let now = now_ms();
            let changed = conn
                .prepare_cached(sql::RENEW)
                .and_then(|mut st| {
                    st.execute(named_params! {
                        ":key": key.as_str(), ":token": token.0.as_bytes(), ":now": now,
                        ":lease_until": now.saturating_add(lease),
                    })
                })
                .map_err(|e| sql_error(path, "renew a lease in", e))?;
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
        self.run(Access::Write, move |conn, path| {
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
        self.run(Access::Write, move |conn, path| {
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
        self.run(Access::Read, move |conn, path| {
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
        self.run(Access::Long, move |conn, path| {
            prune_expired(conn, now_ms(), limit)
                .map_err(|e| sql_error(path, "prune expired records from", e))
        })
        .await
    }

    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError> {
        let name = name.to_owned();
        self.run(Access::Write, move |conn, path| {
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

/// The device and inode of the file at `path` (`None` where there is none, or off Unix).
fn file_id(path: &Path) -> Option<(u64, u64)> {
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

/// Opens the file (see [`open_once`]), trying again while another opener holds the lock, up to
/// the busy timeout. SQLite answers some lock upgrades of a first open (switching a new file to
/// WAL while another connection reads it) with "locked" at once, without its busy handler, to
/// avoid a deadlock; several processes starting together on a new file hit exactly that.
fn open_connection(path: &Path, settings: &SqliteStoreBuilder) -> Result<Open, StoreError> {
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
    if path.is_dir() {
        return Err(StoreError::unavailable(format!(
            "the store's path {p} is a directory, not a file; set {DEFAULT_PATH_ENV} (or the store's path) to a file, \
             such as {}",
            path.join("idemkit.db").display()
        )));
    }
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

/// The operations that run on callers' threads (`synchronous=NORMAL`, reads): the suite, a
/// write lock held by another connection, the busy timeout, the store's own checkpoints.
#[cfg(test)]
mod tests {
    use super::*;

    fn request(n: u128, ttl: Duration) -> ClaimRequest<'static> {
        ClaimRequest {
            key: IdempotencyKey::from_uuid(Uuid::from_u128(n)),
            tool: "charge",
            fingerprint: Fingerprint([n as u8; 32]),
            token: LeaseToken::new(),
            lease: Duration::from_secs(30),
            ttl,
        }
    }

    const DAY: Duration = Duration::from_secs(24 * 3600);

    fn normal(dir: &tempfile::TempDir, busy_timeout: Duration) -> SqliteStore {
        SqliteStore::builder(dir.path().join("idemkit.db"))
            .synchronous(Synchronous::Normal)
            .busy_timeout(busy_timeout)
            .open()
            .unwrap()
    }

    /// Another connection (another process, say) holding the write lock.
    fn blocker(store: &SqliteStore) -> Connection {
        let blocker = Connection::open(store.path()).unwrap();
        blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
        blocker
    }

    #[tokio::test(flavor = "current_thread")]
    async fn under_normal_a_claim_meeting_another_writer_waits_off_the_async_thread_then_succeeds()
    {
        let dir = tempfile::tempdir().unwrap();
        let store = normal(&dir, Duration::from_secs(5));
        let blocker = blocker(&store);
        let claim = tokio::spawn({
            let store = store.clone();
            async move { store.claim(&request(1, DAY)).await }
        });
        // One thread: had the claim waited on it, this task could not run before it gave up.
        let other = tokio::spawn(async { "ran meanwhile" });
        assert_eq!(other.await.unwrap(), "ran meanwhile");
        assert!(!claim.is_finished(), "the claim waits for the lock");
        blocker.execute_batch("COMMIT").unwrap();
        assert_eq!(claim.await.unwrap().unwrap(), Claim::Acquired);
        // And the next ones run at once again.
        assert_eq!(
            store.claim(&request(2, DAY)).await.unwrap(),
            Claim::Acquired
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn under_normal_the_busy_timeout_still_applies_and_a_caller_can_stop_waiting_sooner() {
        let dir = tempfile::tempdir().unwrap();
        let store = normal(&dir, Duration::from_millis(300));
        assert_eq!(
            store.claim(&request(1, DAY)).await.unwrap(),
            Claim::Acquired
        );
        let blocker = blocker(&store);
        let started = std::time::Instant::now();
        let err = store.claim(&request(2, DAY)).await.unwrap_err();
        assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
        assert!(err.to_string().contains("busy timeout"), "{err}");
        assert!(
            started.elapsed() >= Duration::from_millis(250),
            "waited the busy timeout (after a first try that did not wait): {:?}",
            started.elapsed()
        );
        // A caller's own timeout ends its wait; the statement gives up later, on the thread.
        let started = std::time::Instant::now();
        let late = tokio::time::timeout(
            Duration::from_millis(50),
            store.complete(&request(1, DAY).key, LeaseToken::new(), b"{}", DAY),
        )
        .await;
        assert!(late.is_err(), "timed out");
        assert!(started.elapsed() < Duration::from_millis(250));
        blocker.execute_batch("ROLLBACK").unwrap();
        // A read and a write on the caller's thread, with the busy timeout put back after each.
        assert!(store.get(&request(1, DAY).key).await.unwrap().is_some());
        assert_eq!(
            store.claim(&request(3, DAY)).await.unwrap(),
            Claim::Acquired
        );
        let blocker = blocker_after_waiting(&store).await;
        let started = std::time::Instant::now();
        assert!(store.claim(&request(4, DAY)).await.is_err());
        assert!(started.elapsed() >= Duration::from_millis(250));
        drop(blocker);
    }

    /// The blocker, once the store's jobs left on its thread (the timed-out `complete`) ended.
    async fn blocker_after_waiting(store: &SqliteStore) -> Connection {
        while store.shared.db.queued.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        blocker(store)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn under_normal_the_store_checkpoints_its_wal() {
        let dir = tempfile::tempdir().unwrap();
        let store = normal(&dir, Duration::from_secs(5));
        let claims = 3 * CHECKPOINT_PAGES as u128;
        for n in 1..=claims {
            assert_eq!(
                store.claim(&request(n, DAY)).await.unwrap(),
                Claim::Acquired
            );
        }
        // Without checkpoints the WAL would hold every page written: ~3 a claim.
        let wal = std::fs::metadata(dir.path().join("idemkit.db-wal"))
            .unwrap()
            .len();
        assert!(
            wal < u64::from(2 * CHECKPOINT_PAGES) * 4096,
            "the WAL is {wal} bytes"
        );
        let frames = store
            .shared
            .db
            .lock()
            .as_ref()
            .unwrap()
            .wal_frames
            .as_ref()
            .unwrap()
            .load(Ordering::Relaxed);
        assert!(
            frames > 0 && frames < 2 * CHECKPOINT_PAGES,
            "{frames} frames"
        );
    }

    fn full(dir: &tempfile::TempDir) -> SqliteStore {
        SqliteStore::builder(dir.path().join("idemkit.db"))
            .synchronous(Synchronous::Full)
            .open()
            .unwrap()
    }

    /// Waits until `n` jobs are queued for the store's connection thread.
    async fn queued(store: &SqliteStore, n: usize) {
        while store.shared.db.queued.load(Ordering::SeqCst) < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn rows(store: &SqliteStore, sql: &str) -> i64 {
        Connection::open(store.path())
            .unwrap()
            .query_row(sql, [], |r| r.get(0))
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn under_full_writes_that_queue_up_share_one_commit_and_each_gets_its_answer() {
        let dir = tempfile::tempdir().unwrap();
        let store = full(&dir);
        // Another writer holds the lock: the thread's first claim waits, the others queue.
        let held = blocker(&store);
        let claims: Vec<_> = (1..=16u128)
            .map(|n| {
                let store = store.clone();
                tokio::spawn(async move { store.claim(&request(n, DAY)).await })
            })
            .collect();
        queued(&store, 16).await;
        assert_eq!(store.shared.db.grouped.load(Ordering::Relaxed), 0);
        held.execute_batch("COMMIT").unwrap();
        for claim in claims {
            assert_eq!(claim.await.unwrap().unwrap(), Claim::Acquired);
        }
        // The fifteen queued behind the first (which the thread may have taken alone) were one
        // group, one commit.
        assert!(store.shared.db.grouped.load(Ordering::Relaxed) >= 15);
        // Answered only once committed: another connection sees every record.
        let running = "SELECT count(*) FROM records WHERE state = 'running'";
        assert_eq!(rows(&store, running), 16);
        // Two claims of one key in one group: the first takes it, the second sees it held.
        let held = blocker(&store);
        let same = request(100, DAY);
        let other = ClaimRequest {
            token: LeaseToken::new(),
            ..same
        };
        let first = tokio::spawn({
            let store = store.clone();
            async move { store.claim(&same).await }
        });
        queued(&store, 1).await;
        let second = tokio::spawn({
            let store = store.clone();
            async move { store.claim(&other).await }
        });
        queued(&store, 2).await;
        let third = tokio::spawn({
            let store = store.clone();
            async move { store.claim(&request(101, DAY)).await }
        });
        queued(&store, 3).await;
        held.execute_batch("COMMIT").unwrap();
        assert_eq!(first.await.unwrap().unwrap(), Claim::Acquired);
        assert!(matches!(
            second.await.unwrap().unwrap(),
            Claim::Existing(Existing {
                state: ExistingState::Running { .. },
                ..
            })
        ));
        assert_eq!(third.await.unwrap().unwrap(), Claim::Acquired);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn under_full_a_write_that_fails_in_a_group_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store = full(&dir);
        assert_eq!(
            store.claim(&request(1, DAY)).await.unwrap(),
            Claim::Acquired
        );
        // A damaged operation id (as a bad copy could leave), written by the lock's holder.
        let held = blocker(&store);
        held.execute_batch(
            "PRAGMA ignore_check_constraints = ON;
                 INSERT INTO operations (name, id) VALUES ('damaged', x'00');",
        )
        .unwrap();
        // The thread takes a first claim and waits for the lock; the rest queue behind it.
        let plug = tokio::spawn({
            let store = store.clone();
            async move { store.claim(&request(2, DAY)).await }
        });
        queued(&store, 1).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let damaged = tokio::spawn({
            let store = store.clone();
            async move { store.operation_id("damaged", Uuid::new_v4()).await }
        });
        queued(&store, 2).await;
        let claims: Vec<_> = (3..=5u128)
            .map(|n| {
                let store = store.clone();
                tokio::spawn(async move { store.claim(&request(n, DAY)).await })
            })
            .collect();
        queued(&store, 5).await;
        let fresh = tokio::spawn({
            let store = store.clone();
            async move { store.operation_id("fresh", Uuid::from_u128(7)).await }
        });
        queued(&store, 6).await;
        held.execute_batch("COMMIT").unwrap();
        assert_eq!(plug.await.unwrap().unwrap(), Claim::Acquired);
        let err = damaged.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{err}");
        for claim in claims {
            assert_eq!(claim.await.unwrap().unwrap(), Claim::Acquired);
        }
        assert_eq!(fresh.await.unwrap().unwrap(), Uuid::from_u128(7));
        // The damaged read was one of a committed group (with the plug too, if the thread was
        // slow to take it alone): the others' writes stand.
        assert!(store.shared.db.grouped.load(Ordering::Relaxed) >= 5);
        let running = "SELECT count(*) FROM records WHERE state = 'running'";
        assert_eq!(rows(&store, running), 5);
        let fresh = "SELECT count(*) FROM operations WHERE name = 'fresh'";
        assert_eq!(rows(&store, fresh), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sixteen_callers_under_normal_each_get_their_own_records() {
        let dir = tempfile::tempdir().unwrap();
        let store = normal(&dir, Duration::from_secs(5));
        let tasks: Vec<_> = (0..16u128)
            .map(|t| {
                let store = store.clone();
                tokio::spawn(async move {
                    for i in 0..200u128 {
                        let req = request(t * 1000 + i + 1, DAY);
                        assert_eq!(store.claim(&req).await.unwrap(), Claim::Acquired);
                        let done = store.complete(&req.key, req.token, b"{}", DAY).await;
                        assert_eq!(done.unwrap(), Written::Applied);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let completed = "SELECT count(*) FROM records WHERE state = 'completed'";
        assert_eq!(rows(&store, completed), 16 * 200);
    }
}
