//! Operations on callers' threads: what may run there without making them wait, and how a
//! caller waits for the connection without blocking.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{MutexGuard, TryLockError};
use std::time::Duration;

use rusqlite::Connection;

use super::conn::{Access, Db, Open};
use super::error::is_busy;
use crate::error::StoreError;

/// Where [`Db::try_inline`] left an operation.
pub(super) enum Inline<T> {
    Done(Result<T, StoreError>),
    /// The connection is taken for a moment: try again once [`Db::freed`] is told.
    Wait,
    /// Run it on the connection thread (nothing was changed).
    Thread,
}

impl Db {
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
    pub(super) fn try_inline<T>(
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
    pub(super) fn spin_for_lock(&self) -> Option<MutexGuard<'_, Option<Open>>> {
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
pub(super) const SPIN_FOR_LOCK: Duration = Duration::from_micros(10);

/// The connection held by an operation on a caller's thread; dropped (also by a panic), it puts
/// the busy timeout back, lets go of the connection and then tells the next waiter.
pub(super) struct Held<'a> {
    pub(super) db: &'a Db,
    pub(super) guard: Option<MutexGuard<'a, Option<Open>>>,
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
