//! S23 on one SQLite file shared by two handles (two processes' worth of connections): a claimer
//! with a short lease caps a lease end that lies further ahead than *the holder's* lease (clock
//! skew), never further ahead than its own, so it cannot take over a live holder with a longer
//! lease while that holder renews (issue 30 #1: two runs at once).

#![cfg(feature = "sqlite")]

use std::time::Duration;

use idem_runtime::store::{Claim, ClaimRequest, Existing, ExistingState, LeaseToken, Written};
use idem_runtime::{Fingerprint, IdempotencyKey, SqliteStore, Store};

fn key() -> IdempotencyKey {
    IdempotencyKey::derive("charge", &[("order", &23u64)])
}

fn claim(token: LeaseToken, lease: Duration) -> ClaimRequest<'static> {
    ClaimRequest::new(
        key(),
        "charge",
        Fingerprint::of(&4200u64).unwrap(),
        token,
        lease,
        Duration::from_secs(3600),
    )
}

/// The lease left on the live record, as a claim that did not take it sees it.
async fn lease_left(store: &SqliteStore, token: LeaseToken, lease: Duration) -> Duration {
    match store.claim(&claim(token, lease)).await.unwrap() {
        Claim::Existing(Existing {
            state: ExistingState::Running { lease_remaining },
            ..
        }) => lease_remaining,
        other => panic!("the holder's lease is live, yet the claim got {other:?}"),
    }
}

/// A holder with a 10 s lease renewing through the store, and a claimer with a 300 ms lease on
/// another handle of the same file: the claimer never takes the key over.
#[tokio::test]
async fn s23_a_short_lease_claimer_never_takes_over_a_long_lease_holder_that_renews() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemkit.db");
    let (a, b) = (
        SqliteStore::open(&path).unwrap(),
        SqliteStore::open(&path).unwrap(),
    );
    // The holder's lease is long beside the claimer's so that a slow disk or a loaded machine
    // (real time, fsyncs) cannot bring it near the thresholds below.
    let (long, short) = (Duration::from_secs(10), Duration::from_millis(300));
    let (holder, claimer) = (LeaseToken::new(), LeaseToken::new());
    assert_eq!(
        a.claim(&claim(holder, long)).await.unwrap(),
        Claim::Acquired { takeover: None }
    );
    for _ in 0..3 {
        let left = lease_left(&b, claimer, short).await;
        assert!(
            left > Duration::from_secs(5),
            "the holder's 10 s lease, not the claimer's 300 ms: {left:?} left"
        );
        // Past the claimer's lease: a cap by it would have ended the holder's lease by now.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let left = lease_left(&b, claimer, short).await;
        assert!(left > Duration::from_secs(4), "{left:?} left");
        assert_eq!(
            a.renew(key(), holder, long).await.unwrap(),
            Written::Applied,
            "the holder still holds its key"
        );
    }
}

/// A lease end written by a clock ahead (more than the holder's lease from now) is still capped,
/// at the holder's lease, so a dead holder's key frees within its lease; a record written before
/// the lease length was kept (`lease_ms` NULL) is capped at the claimer's lease, as before.
#[tokio::test]
async fn s23_a_lease_end_ahead_of_the_holders_lease_is_capped_at_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemkit.db");
    let store = SqliteStore::open(&path).unwrap();
    let (lease, short) = (Duration::from_secs(2), Duration::from_millis(300));
    let holder = LeaseToken::new();
    assert_eq!(
        store.claim(&claim(holder, lease)).await.unwrap(),
        Claim::Acquired { takeover: None }
    );
    let conn = rusqlite::Connection::open(&path).unwrap();
    // The holder's clock was an hour ahead when it wrote its lease end.
    let ahead = "UPDATE records SET lease_until = lease_until + 3600000";
    conn.execute(ahead, []).unwrap();
    let left = lease_left(&store, LeaseToken::new(), short).await;
    assert!(
        left > Duration::from_millis(1500) && left <= lease,
        "capped at the holder's 2 s lease: {left:?} left"
    );

    conn.execute(ahead, []).unwrap();
    conn.execute("UPDATE records SET lease_ms = NULL", [])
        .unwrap();
    let left = lease_left(&store, LeaseToken::new(), short).await;
    assert!(
        left <= short,
        "a record without the holder's lease: capped at the claimer's, as before ({left:?} left)"
    );
}
