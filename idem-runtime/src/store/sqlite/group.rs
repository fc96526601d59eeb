//! The connection thread and group commit: jobs handed to the thread, run in order, the writes
//! that queued up meanwhile as one transaction with one commit.

use std::sync::MutexGuard;
use std::sync::mpsc::Receiver;

use rusqlite::{Connection, TransactionBehavior};

use super::conn::{Access, Db, Job, Open, Reply, Slot};
use super::error::sql_error;
use super::open::open_connection;
use super::options::Synchronous;
use crate::error::StoreError;

/// At most this many writes share one commit (see [`Db::run_group`]).
pub(super) const MAX_GROUP: usize = 64;

/// A claim's transaction: its own (IMMEDIATE: the write lock first, so the claim and the read
/// of what it did not take see one state, whatever other processes do), or, inside a group's
/// transaction (which holds the write lock already), a savepoint, so that a claim that fails is
/// undone alone.
pub(super) enum Scope<'c> {
    Own(rusqlite::Transaction<'c>),
    InGroup(rusqlite::Savepoint<'c>),
}

impl<'c> Scope<'c> {
    pub(super) fn begin(conn: &'c mut Connection) -> rusqlite::Result<Self> {
        if conn.is_autocommit() {
            conn.transaction_with_behavior(TransactionBehavior::Immediate)
                .map(Scope::Own)
        } else {
            conn.savepoint().map(Scope::InGroup)
        }
    }

    pub(super) fn commit(self) -> rusqlite::Result<()> {
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
pub(super) fn again(e: &StoreError) -> StoreError {
    StoreError::new(e.kind(), e.to_string())
}

/// Every job told `e` without running.
pub(super) fn fail_all(jobs: Vec<Job>, e: &StoreError) -> Vec<Reply> {
    jobs.into_iter()
        .map(|job| (job.run)(Slot::Fail(again(e))))
        .collect()
}

impl Db {
    pub(super) fn lock(&self) -> MutexGuard<'_, Option<Open>> {
        // A panic mid-operation leaves SQLite's own transaction to roll back: the connection
        // is still sound.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether writes may run on callers' threads, the store checkpointing the WAL itself
    /// (see [`Db::try_inline`]).
    pub(super) fn writes_inline(&self) -> bool {
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
    pub(super) fn run_group(&self, group: Vec<Job>) {
        // The replies go out once the connection is let go of.
        let (replies, failed) = self.run_jobs(group);
        for reply in replies {
            reply(self, failed.as_ref());
        }
    }

    /// [`Db::run_group`]'s work under the connection's lock: the replies to send, and the
    /// error that failed the whole group, if one did.
    pub(super) fn run_jobs(&self, jobs: Vec<Job>) -> (Vec<Reply>, Option<StoreError>) {
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
            #[cfg(test)]
            self.grouped
                .fetch_add(count, std::sync::atomic::Ordering::Relaxed);
        }
        (replies, failed)
    }
}

/// The connection thread: runs jobs in order until the store is dropped, the writes that
/// queued up meanwhile as one group (see [`Db::run_group`]).
pub(super) fn serve(db: &Db, jobs: &Receiver<Job>) {
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
