//! The operations that run on callers' threads (`synchronous=NORMAL`, reads): the suite, a
//! write lock held by another connection, the busy timeout, the store's own checkpoints.

use uuid::Uuid;

use super::conn::CHECKPOINT_PAGES;
use super::*;
use crate::store::{
    AsyncStore, Claim, ClaimRequest, Existing, ExistingState, LeaseToken, OperationIds, Outcome,
    Records, Written,
};
use crate::{Fingerprint, IdempotencyKey};

fn request(n: u128, ttl: Duration) -> ClaimRequest<'static> {
    ClaimRequest::new(
        IdempotencyKey::from_uuid(Uuid::from_u128(n)),
        "charge",
        Fingerprint([n as u8; 32]),
        LeaseToken::new(),
        Duration::from_secs(30),
        ttl,
    )
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
async fn under_normal_a_claim_meeting_another_writer_waits_off_the_async_thread_then_succeeds() {
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
    assert_eq!(
        claim.await.unwrap().unwrap(),
        Claim::Acquired { takeover: None }
    );
    // And the next ones run at once again.
    assert_eq!(
        store.claim(&request(2, DAY)).await.unwrap(),
        Claim::Acquired { takeover: None }
    );
}

#[tokio::test(flavor = "current_thread")]
async fn under_normal_the_busy_timeout_still_applies_and_a_caller_can_stop_waiting_sooner() {
    let dir = tempfile::tempdir().unwrap();
    let store = normal(&dir, Duration::from_millis(300));
    assert_eq!(
        store.claim(&request(1, DAY)).await.unwrap(),
        Claim::Acquired { takeover: None }
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
        store.complete(
            request(1, DAY).key,
            LeaseToken::new(),
            Outcome::from(&b"{}"[..]),
            DAY,
        ),
    )
    .await;
    assert!(late.is_err(), "timed out");
    assert!(started.elapsed() < Duration::from_millis(250));
    blocker.execute_batch("ROLLBACK").unwrap();
    // A read and a write on the caller's thread, with the busy timeout put back after each.
    assert!(store.get(&request(1, DAY).key).await.unwrap().is_some());
    assert_eq!(
        store.claim(&request(3, DAY)).await.unwrap(),
        Claim::Acquired { takeover: None }
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
            Claim::Acquired { takeover: None }
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
        assert_eq!(
            claim.await.unwrap().unwrap(),
            Claim::Acquired { takeover: None }
        );
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
        ..same.clone()
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
    assert_eq!(
        first.await.unwrap().unwrap(),
        Claim::Acquired { takeover: None }
    );
    assert!(matches!(
        second.await.unwrap().unwrap(),
        Claim::Existing(Existing {
            state: ExistingState::Running { .. },
            ..
        })
    ));
    assert_eq!(
        third.await.unwrap().unwrap(),
        Claim::Acquired { takeover: None }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_full_a_write_that_fails_in_a_group_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = full(&dir);
    assert_eq!(
        store.claim(&request(1, DAY)).await.unwrap(),
        Claim::Acquired { takeover: None }
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
    assert_eq!(
        plug.await.unwrap().unwrap(),
        Claim::Acquired { takeover: None }
    );
    let err = damaged.await.unwrap().unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{err}");
    for claim in claims {
        assert_eq!(
            claim.await.unwrap().unwrap(),
            Claim::Acquired { takeover: None }
        );
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
                    assert_eq!(
                        store.claim(&req).await.unwrap(),
                        Claim::Acquired { takeover: None }
                    );
                    let done = store
                        .complete(req.key, req.token, Outcome::from(&b"{}"[..]), DAY)
                        .await;
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

/// A new file is at this build's schema version and carries idemkit's mark (moved here from
/// `tests/sqlite_store.rs` when the statements stopped being public).
#[test]
fn a_new_file_is_at_this_builds_schema_version_and_marked_as_idemkits() {
    let dir = tempfile::tempdir().unwrap();
    let store = normal(&dir, Duration::from_secs(1));
    let pragma = |name: &str| -> i64 {
        Connection::open(store.path())
            .unwrap()
            .pragma_query_value(None, name, |row| row.get(0))
            .unwrap()
    };
    assert_eq!(pragma("user_version"), super::sql::SCHEMA_VERSION);
    assert_eq!(pragma("application_id"), super::sql::APPLICATION_ID);
}
