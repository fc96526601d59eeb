//! S30, S31: a settle pass or a settler cut off mid-verify (a timeout, a death) gives its record
//! back or leaves it listed once its lease lapses; a caller that died leaves a record operators
//! read as ambiguous and the settler settles without a caller.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::records::{HOUR, claim_raw};
use super::settle::{NOTE, ambiguous, answers, receipt};
use super::{Receipt, StoreUnderTest, fingerprint_of, key_of};
use crate::settle::{Pass, Settled, Settler};
use crate::store::{
    Claim, ClaimRequest, Count, LeaseToken, Record, RecordFilter, RecordState, Records,
};
use crate::{IdempotencyKey, Verified};

/// Polls `store`'s record of `order` (every 20 ms, for at most 20 s) until `done` holds.
async fn until_record<S: Records>(store: &S, order: u64, done: impl Fn(&Record) -> bool) -> Record {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let record = store.get(&key_of(order)).await.unwrap().expect("kept");
        if done(&record) {
            return record;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never came to pass: {record:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn is_ambiguous(record: &Record) -> bool {
    matches!(record.state, RecordState::Ambiguous { .. })
}

/// The records `store` lists as ambiguous.
async fn listed_ambiguous(store: &impl Records) -> Vec<IdempotencyKey> {
    let filter = RecordFilter::new().state(crate::store::StateKind::Ambiguous);
    let listed = store.list(&filter).await.unwrap();
    listed.into_iter().map(|r| r.key).collect()
}

/// S31 (issue 52 #3): a caller whose process died leaves its record Running with its lease
/// lapsed; without any caller coming back, operators read it as ambiguous (listed, counted, a
/// note that says its holder's lease lapsed), a settle pass reports it, and the settler settles
/// it by verify. Failed before: it read as running, and no pass saw it.
pub async fn s31_a_dead_callers_record_is_reported_and_settled_without_a_caller<
    S: StoreUnderTest,
>(
    store: S,
) {
    let store = Arc::new(store);
    let _dead = claim_raw(&*store, "charge", 31, Duration::from_millis(100), HOUR).await;
    let record = until_record(&*store, 31, is_ambiguous).await;
    let RecordState::Ambiguous { note } = &record.state else {
        unreachable!()
    };
    assert!(
        note.contains("lease lapsed") && note.contains("may have started"),
        "{note}"
    );
    assert_eq!(listed_ambiguous(&*store).await, vec![key_of(31)]);
    assert_eq!(
        store.counts().await.unwrap(),
        vec![Count::new("charge", crate::store::StateKind::Ambiguous, 1)]
    );
    // `idemkit settle`: reported, as a settler without its verify would.
    let reporting = Settler::new(store.clone());
    let report = reporting.run_once(&Pass::new()).await.unwrap();
    assert_eq!(
        report.records,
        vec![(key_of(31), "charge".to_owned(), Settled::NoVerify)]
    );
    assert_eq!(report.exit_code(), 4);
    let asked = Arc::new(AtomicU32::new(0));
    let settler = Settler::new(store.clone()).verify(
        "charge",
        answers(Verified::Applied(receipt()), asked.clone()),
    );
    let report = settler.run_once(&Pass::new()).await.unwrap();
    assert_eq!(
        report.records,
        vec![(key_of(31), "charge".to_owned(), Settled::Applied)]
    );
    let record = store.get(&key_of(31)).await.unwrap().unwrap();
    assert!(
        matches!(record.state, RecordState::Completed { .. }),
        "{record:?}"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1);
}

/// S31, S30: a caller that took an ambiguous record over and died leaves it Running with a
/// lapsed lease: it reads as the ambiguous record it was, its note kept through the takeover,
/// and a settler's Unknown answer keeps that note.
pub async fn s31_a_lapsed_takeover_of_an_ambiguous_record_reads_with_its_note<S: StoreUnderTest>(
    store: S,
) {
    let store = Arc::new(store);
    ambiguous(&*store, "charge", 32).await;
    let req = ClaimRequest::new(
        key_of(32),
        "charge",
        fingerprint_of(4200),
        LeaseToken::new(),
        Duration::from_millis(100),
        HOUR,
    );
    assert_eq!(
        store.claim(&req).await.unwrap(),
        Claim::Acquired {
            takeover: Some(crate::store::Takeover::Ambiguous)
        }
    );
    let record = until_record(&*store, 32, is_ambiguous).await;
    assert_eq!(
        record.state,
        RecordState::Ambiguous {
            note: NOTE.to_owned()
        }
    );
    assert_eq!(listed_ambiguous(&*store).await, vec![key_of(32)]);
    let settler = Settler::new(store.clone())
        .verify(
            "charge",
            answers(Verified::<Receipt>::Unknown, Arc::new(AtomicU32::new(0))),
        )
        .operator_after(None);
    let report = settler.run_once(&Pass::new()).await.unwrap();
    assert!(
        matches!(report.records[0].2, Settled::Unknown { answers: 1, .. }),
        "{report:?}"
    );
    let record = store.get(&key_of(32)).await.unwrap().unwrap();
    assert_eq!(
        record.state,
        RecordState::Ambiguous {
            note: NOTE.to_owned()
        }
    );
}

/// A settler whose verify never answers and tells when it was asked.
fn hanging<S: StoreUnderTest>(
    store: Arc<S>,
    entered: tokio::sync::oneshot::Sender<()>,
    lease: Duration,
) -> Settler {
    let entered = Mutex::new(Some(entered));
    Settler::new(store)
        .lease(lease)
        .verify("charge", move |_key| {
            if let Some(tx) = entered.lock().unwrap().take() {
                let _ = tx.send(());
            }
            std::future::pending::<Result<Verified<Receipt>, String>>()
        })
}

/// S30 (issue 52 #1): a settle pass cut off mid-verify (a timeout around `run_once`) gives the
/// record back at once: it is ambiguous and listed again, with its note, long before the
/// settler's lease (a minute) would lapse, and the next pass settles it. Failed before: the
/// record stayed Running under the settler's token, and no pass listed it.
pub async fn s30_a_pass_cut_off_mid_verify_gives_the_record_back_at_once<S: StoreUnderTest>(
    store: S,
) {
    let store = Arc::new(store);
    ambiguous(&*store, "charge", 33).await;
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel();
    let settler = hanging(store.clone(), entered_tx, Duration::from_secs(60));
    let pass = Pass::new();
    let cut = tokio::time::timeout(Duration::from_millis(300), settler.run_once(&pass)).await;
    assert!(cut.is_err(), "the pass was cut off");
    entered_rx.await.expect("verify was asked before the cut");
    let record = until_record(&*store, 33, is_ambiguous).await;
    assert_eq!(
        record.state,
        RecordState::Ambiguous {
            note: NOTE.to_owned()
        },
        "as it was before the settler's claim"
    );
    assert_eq!(listed_ambiguous(&*store).await, vec![key_of(33)]);
    let settler = Settler::new(store.clone()).verify(
        "charge",
        answers(Verified::Applied(receipt()), Arc::new(AtomicU32::new(0))),
    );
    let report = settler.run_once(&Pass::new()).await.unwrap();
    assert_eq!(report.records[0].2, Settled::Applied);
}

/// S30: a settler that dies mid-verify (its pass never dropped: nothing gives the claim back)
/// leaves the record ambiguous and listed, with its note, as soon as its lease lapses; the next
/// pass settles it. Failed before: the record stayed Running, and no pass listed it.
pub async fn s30_a_settler_that_dies_mid_verify_leaves_the_record_listed_once_its_lease_lapses<
    S: StoreUnderTest,
>(
    store: S,
) {
    let store = Arc::new(store);
    ambiguous(&*store, "charge", 34).await;
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel();
    let settler = hanging(store.clone(), entered_tx, Duration::from_millis(400));
    let pass = Pass::new();
    let mut dying = Box::pin(settler.run_once(&pass));
    let mut entered_rx = entered_rx;
    std::future::poll_fn(|cx| {
        use std::future::Future as _;
        if dying.as_mut().poll(cx).is_ready() {
            panic!("verify never answers");
        }
        std::pin::Pin::new(&mut entered_rx).poll(cx)
    })
    .await
    .expect("verify was asked");
    // The process dies here: its pass is never polled nor dropped again.
    std::mem::forget(dying);
    let held = store.get(&key_of(34)).await.unwrap().unwrap();
    assert!(
        matches!(held.state, RecordState::Running { .. }),
        "the settler holds it while its lease is live: {held:?}"
    );
    let record = until_record(&*store, 34, is_ambiguous).await;
    assert_eq!(
        record.state,
        RecordState::Ambiguous {
            note: NOTE.to_owned()
        }
    );
    assert_eq!(listed_ambiguous(&*store).await, vec![key_of(34)]);
    let settler = Settler::new(store.clone()).verify(
        "charge",
        answers(Verified::Applied(receipt()), Arc::new(AtomicU32::new(0))),
    );
    let report = settler.run_once(&Pass::new()).await.unwrap();
    assert_eq!(report.records[0].2, Settled::Applied);
}
