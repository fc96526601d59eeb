//! `SqliteStore` on its own: the file it makes, what survives reopening it, pruning in bounded
//! batches, concurrent openers of a new file, and async callers kept off SQLite's waits.
//! (The protocol rows S1–S13 are in `sqlite_conformance.rs`, processes in `sqlite_processes.rs`.)

use idem_runtime::Records;
use std::time::Duration;

use idem_runtime::store::{
    Claim, ClaimRequest, LeaseToken, OperationIds, Outcome, RecordState, Takeover, Written,
};
use idem_runtime::{Fingerprint, IdempotencyKey, SqliteStore, Store, Synchronous};
use uuid::Uuid;

fn key(n: u128) -> IdempotencyKey {
    IdempotencyKey::from_uuid(Uuid::from_u128(n))
}

fn request(n: u128, ttl: Duration) -> ClaimRequest<'static> {
    ClaimRequest::new(
        key(n),
        "charge",
        Fingerprint([n as u8; 32]),
        LeaseToken::new(),
        Duration::from_secs(30),
        ttl,
    )
}

const DAY: Duration = Duration::from_secs(24 * 3600);

#[tokio::test]
async fn a_new_store_creates_its_directory_and_a_wal_file_marked_with_idemkits_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/state/idemkit.db");
    let store = SqliteStore::builder(&path)
        .synchronous(Synchronous::Normal)
        .busy_timeout(Duration::from_secs(1))
        .open()
        .unwrap();
    assert_eq!(store.path(), path);
    assert_eq!(
        store.claim(&request(1, DAY)).await.unwrap(),
        Claim::Acquired { takeover: None }
    );

    let conn = rusqlite::Connection::open(&path).unwrap();
    let pragma = |name: &str| -> String {
        conn.query_row(&format!("SELECT * FROM pragma_{name}"), [], |r| {
            r.get::<_, rusqlite::types::Value>(0)
        })
        .map(|v| format!("{v:?}"))
        .unwrap()
    };
    assert_eq!(pragma("journal_mode"), "Text(\"wal\")");
    // That it is this build's schema version exactly is checked inside the crate
    // (`store/sqlite/tests.rs`): the statements are not public.
    assert_ne!(pragma("user_version"), "Integer(0)");
    // "idkt", the mark of an idemkit file: part of the file format.
    assert_eq!(
        pragma("application_id"),
        format!("Integer({})", 0x6964_6b74)
    );
}

#[tokio::test]
async fn a_lazily_opened_store_creates_its_file_at_the_first_operation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemkit.db");
    let store = SqliteStore::builder(&path).open_lazily();
    assert!(!path.exists(), "nothing is opened before it is needed");
    assert_eq!(
        store.claim(&request(1, DAY)).await.unwrap(),
        Claim::Acquired { takeover: None }
    );
    assert!(path.is_file());
}

#[tokio::test]
async fn outcomes_ambiguous_records_and_operation_ids_survive_reopening_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemkit.db");
    let minted = Uuid::new_v4();
    {
        let store = SqliteStore::open(&path).unwrap();
        let (done, unsure) = (request(1, DAY), request(2, DAY));
        assert_eq!(
            store.claim(&done).await.unwrap(),
            Claim::Acquired { takeover: None }
        );
        assert_eq!(
            store
                .complete(
                    done.key,
                    done.token,
                    Outcome::from(&b"{\"receipt\":1}"[..]),
                    DAY
                )
                .await
                .unwrap(),
            Written::Applied
        );
        assert_eq!(
            store.claim(&unsure).await.unwrap(),
            Claim::Acquired { takeover: None }
        );
        let marked = store
            .mark_ambiguous(unsure.key, unsure.token, "timed out", DAY)
            .await
            .unwrap();
        assert_eq!(marked, Written::Applied);
        assert_eq!(
            store.operation_id("plan-42/step-3", minted).await.unwrap(),
            minted
        );
    }
    let store = SqliteStore::open(&path).unwrap();
    let done = store
        .get(&key(1))
        .await
        .unwrap()
        .expect("the completed record");
    assert_eq!(
        (done.tool.as_str(), done.fingerprint, done.state),
        (
            "charge",
            Fingerprint([1; 32]),
            RecordState::Completed {
                outcome: b"{\"receipt\":1}".to_vec()
            }
        )
    );
    assert!(done.expires_in > DAY - Duration::from_secs(60) && done.expires_in <= DAY);
    let unsure = store
        .get(&key(2))
        .await
        .unwrap()
        .expect("the ambiguous record");
    assert_eq!(
        unsure.state,
        RecordState::Ambiguous {
            note: "timed out".into()
        }
    );
    assert_eq!(
        store
            .operation_id("plan-42/step-3", Uuid::new_v4())
            .await
            .unwrap(),
        minted
    );
}

#[tokio::test]
async fn prune_deletes_expired_records_in_bounded_batches_and_keeps_live_ones() {
    let dir = tempfile::tempdir().unwrap();
    // S33: tombstones kept for no time past their time-to-live, so a prune may delete them.
    let store = SqliteStore::builder(dir.path().join("idemkit.db"))
        .tombstones(Duration::ZERO)
        .open()
        .unwrap();
    for n in 1..=5 {
        // Completed with a time-to-live of zero: expired as soon as written (a running or
        // ambiguous record never expires by time, S34), a tombstone kept for no time (S33).
        let req = request(n, DAY);
        assert_eq!(
            store.claim(&req).await.unwrap(),
            Claim::Acquired { takeover: None }
        );
        let done = Outcome::from(b"{}".as_slice());
        assert_eq!(
            store
                .complete(key(n), req.token, done, Duration::ZERO)
                .await
                .unwrap(),
            Written::Applied
        );
    }
    assert_eq!(
        store.claim(&request(6, DAY)).await.unwrap(),
        Claim::Acquired { takeover: None }
    );

    assert_eq!(store.prune(2).await.unwrap(), 2);
    assert_eq!(store.prune(10).await.unwrap(), 3);
    assert_eq!(store.prune(10).await.unwrap(), 0);
    assert!(
        store.get(&key(6)).await.unwrap().is_some(),
        "the live record stays"
    );
}

/// S33: with the default tombstone setting a prune keeps a completed record past its
/// time-to-live, as a tombstone: a claim of its key answers it, never runs it.
#[tokio::test]
async fn s33_prune_keeps_a_tombstone_until_its_setting_passes() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("idemkit.db")).unwrap();
    let req = request(1, DAY);
    assert_eq!(
        store.claim(&req).await.unwrap(),
        Claim::Acquired { takeover: None }
    );
    let done = Outcome::from(b"{}".as_slice());
    assert_eq!(
        store
            .complete(key(1), req.token, done, Duration::ZERO)
            .await
            .unwrap(),
        Written::Applied
    );
    assert_eq!(store.prune(10).await.unwrap(), 0, "a tombstone is kept");
    assert!(matches!(
        store.claim(&request(1, DAY)).await.unwrap(),
        Claim::Existing(e) if matches!(e.state, idem_runtime::store::ExistingState::Tombstone { .. })
    ));
}

#[test]
fn eight_threads_opening_one_new_file_at_once_all_get_a_working_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemkit.db");
    let start = std::sync::Barrier::new(8);
    let stores: Vec<SqliteStore> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    SqliteStore::open(&path)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().expect("every opener succeeds"))
            .collect()
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let req = request(1, DAY);
        assert_eq!(
            stores[0].claim(&req).await.unwrap(),
            Claim::Acquired { takeover: None }
        );
        // Each under a token of its own: a claim under the same token is the same claim.
        for store in &stores[1..] {
            assert!(
                matches!(
                    store.claim(&request(1, DAY)).await.unwrap(),
                    Claim::Existing(_)
                ),
                "one file, one record"
            );
        }
    });
}

#[tokio::test(flavor = "current_thread")]
async fn a_claim_waiting_for_another_writer_leaves_the_async_runtime_free() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemkit.db");
    let store = SqliteStore::open(&path).unwrap();
    // Another connection (another process, say) holds the write lock.
    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();

    let claim = tokio::spawn({
        let store = store.clone();
        async move { store.claim(&request(1, DAY)).await }
    });
    // The runtime has one thread: had the claim waited on it, this task could not run until
    // the claim gave up.
    let other = tokio::spawn(async { "ran meanwhile" });
    assert_eq!(other.await.unwrap(), "ran meanwhile");
    assert!(
        !claim.is_finished(),
        "the claim is still waiting for the lock"
    );

    blocker.execute_batch("COMMIT").unwrap();
    assert_eq!(
        claim.await.unwrap().unwrap(),
        Claim::Acquired { takeover: None }
    );
}

/// Issue 15, finding 3 (clocks): a lease end further ahead than one lease from the claimer's
/// clock, as a holder whose clock ran an hour ahead writes it, is capped at one lease (the
/// holder's own, S23): if that holder died, its key frees within a lease here, not an hour.
/// (Before: `InFlight` for ~1 h.)
#[tokio::test]
async fn a_lease_end_written_by_a_clock_ahead_is_capped_at_one_lease() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemkit.db");
    let store = SqliteStore::open(&path).unwrap();
    let mut ahead = request(40, DAY);
    ahead.lease = Duration::from_millis(300);
    assert_eq!(
        store.claim(&ahead).await.unwrap(),
        Claim::Acquired { takeover: None }
    );
    // Its holder's clock was an hour ahead when it wrote its lease end.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute("UPDATE records SET lease_until = lease_until + 3600000", [])
        .unwrap();
    let mut here = request(40, DAY);
    here.lease = Duration::from_millis(300);
    here.token = LeaseToken::new();
    match store.claim(&here).await.unwrap() {
        Claim::Existing(e) => assert!(
            matches!(e.state, idem_runtime::store::ExistingState::Running { lease_remaining }
                if lease_remaining <= Duration::from_millis(300)),
            "capped at one lease: {:?}",
            e.state
        ),
        other => panic!("the holder's lease is still live: {other:?}"),
    }
    let record = store.get(&key(40)).await.unwrap().unwrap();
    assert!(
        matches!(record.state, RecordState::Running { lease_remaining, .. } if lease_remaining <= Duration::from_millis(300)),
        "the cap is written: {:?}",
        record.state
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        store.claim(&here).await.unwrap(),
        Claim::Acquired {
            takeover: Some(Takeover::ExpiredHolder)
        },
        "taken over after one lease"
    );
}

/// Issue 15: `IDEMKIT_DB` (or a store's path) naming a directory says so, and what to set.
#[tokio::test]
async fn a_directory_as_the_store_path_is_refused_saying_it_is_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let err = SqliteStore::open(dir.path()).unwrap_err().to_string();
    assert!(err.contains("is a directory, not a file"), "{err}");
    assert!(err.contains("idemkit.db"), "suggests a file in it: {err}");
}

/// Issue 15: the database file deleted (say by `git clean -xdf`) or replaced while the store
/// has it open is noticed, and every operation fails closed saying what happened. (Before: the
/// process went on writing to the unlinked file, and a restarted one started empty.)
#[tokio::test]
async fn a_deleted_or_replaced_database_file_fails_closed_saying_what_happened() {
    for replaced in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".idemkit/idemkit.db");
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(
            store.claim(&request(41, DAY)).await.unwrap(),
            Claim::Acquired { takeover: None }
        );
        std::fs::remove_dir_all(dir.path().join(".idemkit")).unwrap();
        if replaced {
            drop(SqliteStore::open(&path).unwrap());
        }
        let what = if replaced {
            "was replaced"
        } else {
            "was deleted"
        };
        let err = store.claim(&request(42, DAY)).await.unwrap_err();
        assert!(err.to_string().contains(what), "{err}");
        let err = store.get(&key(41)).await.unwrap_err();
        assert!(err.to_string().contains(what), "reads too: {err}");
    }
}

/// Issue 19 (files): a new store's directory and file are readable by their owner only, and so
/// are SQLite's WAL and shared-memory files beside it.
#[cfg(unix)]
#[tokio::test]
async fn a_new_store_is_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state/idemkit/idemkit.db");
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.claim(&request(50, DAY)).await.unwrap(),
        Claim::Acquired { takeover: None }
    );
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(path.parent().unwrap()), 0o700, "the directory");
    assert_eq!(
        mode(path.parent().unwrap().parent().unwrap()),
        0o700,
        "a parent it made"
    );
    assert_eq!(mode(&path), 0o600, "the database file");
    let wal = path.with_extension("db-wal");
    assert!(wal.exists());
    assert_eq!(mode(&wal), 0o600, "the WAL");
}

/// S34: an ambiguous row written before with an expiry (here long past) reads as never
/// expiring: shown, not pruned, and a claim of its key takes it over rather than making a new
/// record. No migration: the stores ignore such a row's expiry.
#[tokio::test]
async fn s34_an_ambiguous_row_written_before_with_an_expiry_never_expires() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemkit.db");
    let store = SqliteStore::open(&path).unwrap();
    let req = request(34, DAY);
    store.claim(&req).await.unwrap();
    let marked = store.mark_ambiguous(key(34), req.token, "timed out", DAY);
    assert_eq!(marked.await.unwrap(), Written::Applied);
    // As an earlier version left it: an expiry, here long past.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    let changed = conn
        .execute(
            "UPDATE records SET expires_at = 1 WHERE key = ?1",
            [key(34).to_string()],
        )
        .unwrap();
    assert_eq!(changed, 1);
    let shown = store.get(&key(34)).await.unwrap().expect("still shown");
    assert!(
        matches!(shown.state, RecordState::Ambiguous { .. }),
        "{shown:?}"
    );
    assert_eq!(shown.expires_in, Duration::MAX);
    assert_eq!(store.prune(100).await.unwrap(), 0, "not pruned");
    assert_eq!(
        store.claim(&request(34, DAY)).await.unwrap(),
        Claim::Acquired {
            takeover: Some(Takeover::Ambiguous)
        },
        "taken over, not made anew"
    );
}
