//! S32, S34: the settler's bounds (the operator bound across callers' retries, the age bound
//! from when the operation was first made) and a pass's report of the oldest unknown it left.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::settle::{ambiguous, answers, call, receipt, runtime};
use super::{Receipt, StoreUnderTest, key_of};
use crate::Verified;
use crate::settle::{Pass, Settled, Settler};
use crate::store::Records;

/// S32 (issue 52 #2): the operator bound counts across callers' retries. Three passes whose
/// verify answers Unknown, with a caller's retry between each (its own verify answering Unknown,
/// its takeover rewriting `created`): every answer is counted with the record, the settler's
/// `operator_after_unknowns(3)` fires, and when the operation was first made stays as it was.
/// Failed before: each caller's mark dropped the count kept in the note (answers 1 every pass,
/// never needing an operator).
pub async fn s32_the_operator_bound_counts_across_callers_retries<S: StoreUnderTest>(store: S) {
    let store = Arc::new(store);
    ambiguous(&*store, "charge", 35).await;
    let made = store.get(&key_of(35)).await.unwrap().unwrap().first_made;
    assert!(made > std::time::UNIX_EPOCH);
    let settler = Settler::new(store.clone())
        .verify(
            "charge",
            answers(Verified::<Receipt>::Unknown, Arc::new(AtomicU32::new(0))),
        )
        .operator_after(None)
        .operator_after_unknowns(3);
    let idem = runtime(store.clone());
    let runs = AtomicU32::new(0);
    let mut seen = Vec::new();
    let mut since = None;
    for _pass in 1..=3u32 {
        let report = settler.run_once(&Pass::new()).await.unwrap();
        let Settled::Unknown {
            answers,
            needs_operator,
            ..
        } = report.records[0].2
        else {
            panic!("{report:?}");
        };
        seen.push((answers, needs_operator));
        let record = store.get(&key_of(35)).await.unwrap().unwrap();
        assert_eq!(record.unknowns, answers);
        assert_eq!(record.first_made, made, "made: unchanged by every takeover");
        since = since.or(record.unknown_since);
        assert_eq!(
            record.unknown_since, since,
            "since the first Unknown answer"
        );
        // A caller retries: takes the record over, asks its verify (Unknown), keeps it.
        assert!(call(&idem, 35, &runs).await.is_err());
        let record = store.get(&key_of(35)).await.unwrap().unwrap();
        assert_eq!(record.unknowns, answers + 1, "the caller's answer counts");
        assert_eq!(record.first_made, made);
    }
    assert_eq!(seen, vec![(1, false), (3, true), (5, true)]);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        3,
        "each caller asked verify, ran no body"
    );
}

/// S32: the settler's age bound (`operator_after`) counts from when the operation was first
/// made, which a caller's takeover does not move. Failed before: the caller's takeover rewrote
/// `created`, from which the age was taken.
pub async fn s32_the_age_bound_counts_from_when_the_operation_was_first_made<S: StoreUnderTest>(
    store: S,
) {
    let store = Arc::new(store);
    ambiguous(&*store, "charge", 36).await;
    let made = store.get(&key_of(36)).await.unwrap().unwrap().first_made;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // A caller retries, and keeps it ambiguous.
    let idem = runtime(store.clone());
    let runs = AtomicU32::new(0);
    assert!(call(&idem, 36, &runs).await.is_err());
    let record = store.get(&key_of(36)).await.unwrap().unwrap();
    assert_eq!(record.first_made, made);
    assert!(record.created > made, "the takeover restarted `created`");
    let settler = Settler::new(store.clone())
        .verify(
            "charge",
            answers(Verified::<Receipt>::Unknown, Arc::new(AtomicU32::new(0))),
        )
        .operator_after(Duration::from_secs(1));
    let report = settler.run_once(&Pass::new()).await.unwrap();
    assert!(
        matches!(
            report.records[0].2,
            Settled::Unknown {
                answers: 2,
                needs_operator: true,
                ..
            }
        ),
        "{report:?}"
    );
}

/// S34: a pass reports the record it left with its outcome unknown that has waited longest (an
/// ambiguous record never expires by time): its key and when its operation was first made, in
/// the report and its summary; a pass that settles every record reports none.
pub async fn s34_a_pass_reports_the_oldest_unknown_it_left<S: StoreUnderTest>(store: S) {
    let store = Arc::new(store);
    ambiguous(&*store, "charge", 1).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    ambiguous(&*store, "charge", 2).await;
    let first_made = store
        .get(&key_of(1))
        .await
        .unwrap()
        .expect("kept")
        .first_made;
    // No verify function here: both are left for an operator.
    let report = Settler::new(store.clone())
        .run_once(&Pass::new())
        .await
        .unwrap();
    assert_eq!(report.count("no_verify"), 2);
    assert_eq!(report.oldest_unknown, Some((key_of(1), first_made)));
    assert!(report.oldest_unknown_age().is_some());
    let summary = report.summary();
    assert!(
        summary.contains("the oldest unknown outcome has waited")
            && summary.contains(&key_of(1).to_string()),
        "{summary}"
    );
    let asked = Arc::new(AtomicU32::new(0));
    let settler = Settler::new(store.clone()).verify(
        "charge",
        answers(Verified::Applied(receipt()), asked.clone()),
    );
    let report = settler.run_once(&Pass::new()).await.unwrap();
    assert_eq!(report.count("applied"), 2);
    assert_eq!(report.oldest_unknown, None, "none left");
    assert!(!report.summary().contains("oldest unknown"));
}
