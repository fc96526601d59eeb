//! A claim given back unused ([`Store::restore`], S27) and a claim sent again under its own token
//! (its answer lost): the rows of a store that keeps what a claim replaced. This crate's four
//! stores run them (`restore_conformance_tests!`); a store that takes [`Store::restore`]'s
//! default (keep as ambiguous) does not pass them, and need not.

use std::time::Duration;

use super::{LEASE, StoreUnderTest, fingerprint_of, key_of};
use crate::store::{
    Claim, ClaimRequest, Existing, ExistingState, LeaseToken, Outcome, RecordState, Records,
    Takeover, Written,
};

/// The rows of [`Store::restore`](crate::Store::restore) and of a claim sent again under its token, for a store's test
/// file: `idem_runtime::restore_conformance_tests!(fresh_store);`.
#[macro_export]
macro_rules! restore_conformance_tests {
    ($make:path) => {
        $crate::conformance_tests!(@rows $make;
            s27_a_new_record_given_back_is_absent,
            s27_a_taken_over_ambiguous_record_given_back_is_ambiguous_as_it_was,
            s27_a_taken_over_expired_holder_given_back_is_that_holders_again,
            s27_a_claim_is_given_back_only_under_its_token_and_before_its_end,
            s27_a_holders_record_brought_back_keeps_an_unknown_outcome_when_given_back,
            a_claim_sent_again_under_its_token_is_the_same_claim
        );
    };
}

const NOTE: &str = "this store cannot give a claim back";
const LONG: Duration = Duration::from_secs(60);

fn req(order: u64, token: LeaseToken, lease: Duration) -> ClaimRequest<'static> {
    ClaimRequest::new(
        key_of(order),
        "charge",
        fingerprint_of(4200),
        token,
        lease,
        LONG,
    )
}

async fn state(store: &impl StoreUnderTest, order: u64) -> Option<RecordState> {
    Records::get(store, &key_of(order))
        .await
        .unwrap()
        .filter(|r| r.is_live())
        .map(|r| r.state)
}

/// S27: a new record whose claim is given back is absent: the next claim makes a new one.
pub async fn s27_a_new_record_given_back_is_absent(store: impl StoreUnderTest) {
    let token = LeaseToken::new();
    let claim = store.claim(&req(270, token, LEASE)).await.unwrap();
    assert_eq!(claim, Claim::Acquired { takeover: None });
    let given = store.restore(key_of(270), token, NOTE, LONG).await.unwrap();
    assert_eq!(given, Written::Applied);
    assert_eq!(
        state(&store, 270).await,
        None,
        "a new record given back is absent"
    );
    let next = store
        .claim(&req(270, LeaseToken::new(), LEASE))
        .await
        .unwrap();
    assert_eq!(next, Claim::Acquired { takeover: None });
}

/// S27: an ambiguous record taken over and given back is ambiguous again, with its own note:
/// the next claim takes it over from ambiguity, as before.
pub async fn s27_a_taken_over_ambiguous_record_given_back_is_ambiguous_as_it_was(
    store: impl StoreUnderTest,
) {
    let first = LeaseToken::new();
    let _ = store.claim(&req(271, first, LEASE)).await.unwrap();
    let marked = store
        .mark_ambiguous(key_of(271), first, "timed out after send", LONG)
        .await
        .unwrap();
    assert_eq!(marked, Written::Applied);
    let second = LeaseToken::new();
    let took = store.claim(&req(271, second, LEASE)).await.unwrap();
    assert_eq!(
        took,
        Claim::Acquired {
            takeover: Some(Takeover::Ambiguous)
        }
    );
    let given = store
        .restore(key_of(271), second, NOTE, LONG)
        .await
        .unwrap();
    assert_eq!(given, Written::Applied);
    assert_eq!(
        state(&store, 271).await,
        Some(RecordState::Ambiguous {
            note: "timed out after send".into()
        }),
        "given back, the record is ambiguous as it was"
    );
    let third = store
        .claim(&req(271, LeaseToken::new(), LEASE))
        .await
        .unwrap();
    assert_eq!(
        third,
        Claim::Acquired {
            takeover: Some(Takeover::Ambiguous)
        },
        "its ambiguity is still there to take over"
    );
    // The holder that gave it back writes nothing any more.
    let late = store
        .complete(key_of(271), second, Outcome::from(b"\"late\""), LONG)
        .await
        .unwrap();
    assert_eq!(late, Written::Fenced);
}

/// S27: a running record whose holder's lease ran out, taken over and given back, is that
/// holder's again: its token holds (its completion is applied), and the next claim takes it
/// over from an expired holder, as before.
pub async fn s27_a_taken_over_expired_holder_given_back_is_that_holders_again(
    store: impl StoreUnderTest,
) {
    let holder = LeaseToken::new();
    let short = Duration::from_millis(100);
    let _ = store.claim(&req(272, holder, short)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    let claimer = LeaseToken::new();
    let took = store.claim(&req(272, claimer, LEASE)).await.unwrap();
    assert_eq!(
        took,
        Claim::Acquired {
            takeover: Some(Takeover::ExpiredHolder)
        }
    );
    let given = store
        .restore(key_of(272), claimer, NOTE, LONG)
        .await
        .unwrap();
    assert_eq!(given, Written::Applied);
    // Its holder's lease lapsed, as before the takeover: operators read it as the ambiguous
    // record it may be (S31); its holder's token holds (below).
    match state(&store, 272).await {
        Some(RecordState::Ambiguous { note }) => {
            assert!(note.contains("lease lapsed"), "{note}")
        }
        other => panic!("given back, the record is its lapsed holder's again, not {other:?}"),
    }
    let next = LeaseToken::new();
    let again = store.claim(&req(272, next, LEASE)).await.unwrap();
    assert_eq!(
        again,
        Claim::Acquired {
            takeover: Some(Takeover::ExpiredHolder)
        },
        "the holder's lease is over, as it was"
    );
    let given = store.restore(key_of(272), next, NOTE, LONG).await.unwrap();
    assert_eq!(given, Written::Applied);
    let done = store
        .complete(key_of(272), holder, Outcome::from(b"\"done\""), LONG)
        .await
        .unwrap();
    assert_eq!(done, Written::Applied, "the holder's token holds again");
    let replay = store
        .claim(&req(272, LeaseToken::new(), LEASE))
        .await
        .unwrap();
    assert_eq!(
        replay,
        Claim::Existing(Existing::new(
            fingerprint_of(4200),
            ExistingState::Completed {
                outcome: Outcome::from(b"\"done\"")
            }
        ))
    );
}

/// S27: only the holder gives its claim back, and only while it holds it: under another token,
/// or after the holder completed, nothing changes.
pub async fn s27_a_claim_is_given_back_only_under_its_token_and_before_its_end(
    store: impl StoreUnderTest,
) {
    let token = LeaseToken::new();
    let _ = store.claim(&req(273, token, LEASE)).await.unwrap();
    let other = store
        .restore(key_of(273), LeaseToken::new(), NOTE, LONG)
        .await
        .unwrap();
    assert_eq!(other, Written::Fenced);
    let done = store
        .complete(key_of(273), token, Outcome::from(b"\"done\""), LONG)
        .await
        .unwrap();
    assert_eq!(done, Written::Applied);
    let after = store.restore(key_of(273), token, NOTE, LONG).await.unwrap();
    assert_eq!(after, Written::Fenced);
    assert_eq!(
        state(&store, 273).await,
        Some(RecordState::Completed {
            outcome: b"\"done\"".to_vec()
        })
    );
    let never = store
        .restore(key_of(274), LeaseToken::new(), NOTE, LONG)
        .await
        .unwrap();
    assert_eq!(never, Written::Fenced, "no record: nothing to give back");
    assert_eq!(state(&store, 274).await, None);
}

/// Issue 41 (third wave's leftovers): a claim sent again under its own token, after its answer
/// was lost, is the same claim: ours, with what the first one took over (so its unknown outcome
/// is not forgotten), and given back as it was.
pub async fn a_claim_sent_again_under_its_token_is_the_same_claim(store: impl StoreUnderTest) {
    let token = LeaseToken::new();
    let first = store.claim(&req(275, token, LEASE)).await.unwrap();
    assert_eq!(first, Claim::Acquired { takeover: None });
    let again = store.claim(&req(275, token, LEASE)).await.unwrap();
    assert_eq!(
        again,
        Claim::Acquired { takeover: None },
        "a new record claimed again is ours"
    );
    let marked = store
        .mark_ambiguous(key_of(275), token, "reset after send", LONG)
        .await
        .unwrap();
    assert_eq!(marked, Written::Applied);
    let taker = LeaseToken::new();
    let took = store.claim(&req(275, taker, LEASE)).await.unwrap();
    assert_eq!(
        took,
        Claim::Acquired {
            takeover: Some(Takeover::Ambiguous)
        }
    );
    let again = store.claim(&req(275, taker, LEASE)).await.unwrap();
    assert_eq!(
        again,
        Claim::Acquired {
            takeover: Some(Takeover::Ambiguous)
        },
        "a takeover claimed again says what it took over"
    );
    let given = store.restore(key_of(275), taker, NOTE, LONG).await.unwrap();
    assert_eq!(given, Written::Applied);
    assert_eq!(
        state(&store, 275).await,
        Some(RecordState::Ambiguous {
            note: "reset after send".into()
        })
    );
}

/// S27, nested: a holder that took over an ambiguous record, stalled past its lease, was taken
/// over by a claim given back (so its record is its own again), and is then given back itself,
/// leaves the record ambiguous: a store keeps one level of what claims replaced, and where it no
/// longer knows, it keeps the unknown outcome rather than release it.
pub async fn s27_a_holders_record_brought_back_keeps_an_unknown_outcome_when_given_back(
    store: impl StoreUnderTest,
) {
    let first = LeaseToken::new();
    let _ = store.claim(&req(276, first, LEASE)).await.unwrap();
    let marked = store
        .mark_ambiguous(key_of(276), first, "timed out after send", LONG)
        .await
        .unwrap();
    assert_eq!(marked, Written::Applied);
    let holder = LeaseToken::new();
    let short = Duration::from_millis(100);
    let took = store.claim(&req(276, holder, short)).await.unwrap();
    assert_eq!(
        took,
        Claim::Acquired {
            takeover: Some(Takeover::Ambiguous)
        }
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    let claimer = LeaseToken::new();
    let took = store.claim(&req(276, claimer, LEASE)).await.unwrap();
    assert_eq!(
        took,
        Claim::Acquired {
            takeover: Some(Takeover::ExpiredHolder)
        }
    );
    let given = store
        .restore(key_of(276), claimer, NOTE, LONG)
        .await
        .unwrap();
    assert_eq!(given, Written::Applied);
    let given = store
        .restore(key_of(276), holder, NOTE, LONG)
        .await
        .unwrap();
    assert_eq!(given, Written::Applied);
    assert!(
        matches!(
            state(&store, 276).await,
            Some(RecordState::Ambiguous { .. })
        ),
        "the ambiguity the holder took over is still there"
    );
    let next = store
        .claim(&req(276, LeaseToken::new(), LEASE))
        .await
        .unwrap();
    assert_eq!(
        next,
        Claim::Acquired {
            takeover: Some(Takeover::Ambiguous)
        }
    );
}
