//! S28, one verify per tool: a `#[side_effect(verify = …)]` tool's own verify settles its
//! records kept as ambiguous through `Settler::new(store)`, with nothing listed by hand: the
//! attribute registers the verify under the tool's name, and each call keeps its arguments with
//! its record, which the settler hands back to that verify. On the memory and SQLite stores
//! (the store side, on all four: the conformance row
//! `s28_a_verify_tools_arguments_are_kept_with_its_record_through_takeovers`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use idemkit::store::{ClaimRequest, LeaseToken, OperationIds, RecordState};
use idemkit::{
    Classify, Failure, Fingerprint, Idem, IdempotencyKey, MemoryStore, Pass, Records, SettleStore,
    Settled, Settler, SqliteStore, Store, Verified, side_effect,
};
use serde::{Deserialize, Serialize};

#[derive(Debug)]
enum SmsError {
    /// The gateway's answer was lost: the message may have gone out.
    Timeout,
    Idem(Box<idemkit::Error>),
}

impl std::fmt::Display for SmsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl Classify for SmsError {
    fn classify(&self) -> Failure {
        match self {
            SmsError::Timeout => Failure::Ambiguous,
            SmsError::Idem(_) => Failure::Permanent,
        }
    }
}

impl From<idemkit::Error> for SmsError {
    fn from(e: idemkit::Error) -> Self {
        SmsError::Idem(Box::new(e))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Sent {
    to: String,
    /// Which run of the body sent it (0: found by verify).
    run: u32,
}

/// The fake gateway, per recipient (each test has its own): how often the body ran, what verify
/// answers next, and what verify was asked with (the recipient, the text).
#[derive(Default)]
struct Gateway {
    runs: BTreeMap<String, u32>,
    answers: BTreeMap<String, VecDeque<Verified<Sent>>>,
    asked: Vec<(String, String)>,
}

static GATEWAY: Mutex<Option<Gateway>> = Mutex::new(None);

fn gateway<R>(f: impl FnOnce(&mut Gateway) -> R) -> R {
    f(GATEWAY.lock().unwrap().get_or_insert_with(Gateway::default))
}

fn runs(to: &str) -> u32 {
    gateway(|g| g.runs.get(to).copied().unwrap_or(0))
}

/// Sends a text message; the gateway does not deduplicate, and its first answer is lost.
#[side_effect(key = "to", verify = was_sent, max_attempts = 1)]
async fn send_sms(to: &str, text: String) -> Result<Sent, SmsError> {
    let _ = text;
    let run = gateway(|g| {
        let n = g.runs.entry(to.to_owned()).or_default();
        *n += 1;
        *n
    });
    match run {
        1 => Err(SmsError::Timeout),
        run => Ok(Sent {
            to: to.to_owned(),
            run,
        }),
    }
}

/// The tool's one verify: asks the gateway's log (scripted per recipient; Unknown when empty).
async fn was_sent(to: &str, text: String) -> Result<Verified<Sent>, SmsError> {
    gateway(|g| {
        g.asked.push((to.to_owned(), text));
        Ok(g.answers
            .get_mut(to)
            .and_then(VecDeque::pop_front)
            .unwrap_or(Verified::Unknown))
    })
}

const TEXT: &str = "your code is 4200";

fn key(to: &str) -> IdempotencyKey {
    IdempotencyKey::derive("send_sms", &[("to", &to)])
}

/// A call whose answer is lost and whose verify (the caller's, S19) cannot tell: the record is
/// kept as ambiguous, with the call's arguments.
async fn leave_ambiguous(idem: &Idem, store: &impl Records, to: &str) {
    let lost = idem.scope(send_sms(to, TEXT.to_owned())).await;
    assert!(
        matches!(&lost, Err(SmsError::Idem(e)) if matches!(**e, idemkit::Error::Ambiguous { .. })),
        "{lost:?}"
    );
    assert_eq!(runs(to), 1);
    let record = store.get(&key(to)).await.unwrap().unwrap();
    assert!(
        matches!(record.state, RecordState::Ambiguous { .. }),
        "{record:?}"
    );
    assert_eq!(
        record.arguments.as_deref(),
        Some(serde_json::to_vec(&(to, TEXT)).unwrap().as_slice()),
        "the call keeps its arguments with its record"
    );
}

/// One settler pass with nothing listed by hand; what it decided about `to`'s record.
async fn settle<S: SettleStore>(store: Arc<S>, to: &str) -> Settled {
    let settler = Settler::new(store);
    assert!(settler.tools().any(|t| t == "send_sms"), "{settler:?}");
    let report = settler.run_once(&Pass::new()).await.unwrap();
    let (k, tool, settled) = report.records.into_iter().next().expect("one record");
    assert_eq!((k, tool.as_str()), (key(to), "send_sms"));
    settled
}

fn script(to: &str, answer: Verified<Sent>) {
    gateway(|g| {
        g.answers
            .entry(to.to_owned())
            .or_default()
            .push_back(answer)
    });
}

/// The settler asked the tool's own verify with the call's arguments.
fn asked_with_the_calls_arguments(to: &str) {
    let asked: Vec<_> = gateway(|g| g.asked.iter().filter(|a| a.0 == to).cloned().collect());
    assert_eq!(
        asked,
        vec![
            (to.to_owned(), TEXT.to_owned()), // the caller's verification
            (to.to_owned(), TEXT.to_owned()), // the settler's
        ]
    );
}

async fn applied_completes<S: SettleStore + OperationIds>(store: Arc<S>, to: &str) {
    let idem = Idem::builder().shared_store(store.clone()).build().unwrap();
    leave_ambiguous(&idem, &*store, to).await;
    let found = Sent {
        to: to.to_owned(),
        run: 0,
    };
    script(to, Verified::Applied(found.clone()));
    assert_eq!(settle(store.clone(), to).await, Settled::Applied);
    asked_with_the_calls_arguments(to);
    // Completed with verify's answer: the next call replays it, the body not run again.
    let again = idem.scope(send_sms(to, TEXT.to_owned())).await.unwrap();
    assert_eq!((again, runs(to)), (found, 1));
}

async fn not_applied_releases<S: SettleStore + OperationIds>(store: Arc<S>, to: &str) {
    let idem = Idem::builder().shared_store(store.clone()).build().unwrap();
    leave_ambiguous(&idem, &*store, to).await;
    script(to, Verified::NotApplied);
    assert_eq!(settle(store.clone(), to).await, Settled::NotApplied);
    asked_with_the_calls_arguments(to);
    // Released: the next call sends it.
    let again = idem.scope(send_sms(to, TEXT.to_owned())).await.unwrap();
    assert_eq!(again.run, 2);
    assert_eq!(runs(to), 2);
}

async fn unknown_counts<S: SettleStore + OperationIds>(store: Arc<S>, to: &str) {
    let idem = Idem::builder().shared_store(store.clone()).build().unwrap();
    leave_ambiguous(&idem, &*store, to).await;
    let settled = settle(store.clone(), to).await;
    assert!(
        matches!(
            settled,
            Settled::Unknown {
                answers: 2,
                needs_operator: false,
                ..
            }
        ),
        "{settled:?}"
    );
    asked_with_the_calls_arguments(to);
    let record = store.get(&key(to)).await.unwrap().unwrap();
    assert!(
        matches!(record.state, RecordState::Ambiguous { .. }),
        "{record:?}"
    );
    assert_eq!(record.unknowns, 2);
    assert!(record.arguments.is_some(), "still kept for the next pass");
}

/// A record kept without arguments (written by the previous version, or by a `Tool` of the same
/// name): the tool's own verify cannot be asked, so the settler leaves it (for an operator), and
/// a verify listed by hand (given the key) still settles it.
async fn a_record_without_arguments_is_settled_as_before<S: SettleStore>(store: Arc<S>, to: &str) {
    let token = LeaseToken::new();
    let hour = std::time::Duration::from_secs(3600);
    let fingerprint = Fingerprint::of(&serde_json::json!({"text": TEXT})).unwrap();
    let req = ClaimRequest::new(key(to), "send_sms", fingerprint, token, hour, hour);
    store.claim(&req).await.unwrap();
    let marked = store
        .mark_ambiguous(key(to), token, "timed out", hour)
        .await;
    assert_eq!(marked.unwrap(), idemkit::store::Written::Applied);
    assert_eq!(settle(store.clone(), to).await, Settled::NoVerify);
    let by_hand = Settler::new(store.clone()).verify("send_sms", |k: IdempotencyKey| async move {
        assert_eq!(k, key("+15550104"));
        Ok::<_, SmsError>(Verified::<Sent>::NotApplied)
    });
    let report = by_hand.run_once(&Pass::new()).await.unwrap();
    assert_eq!(
        report.records,
        vec![(key(to), "send_sms".to_owned(), Settled::NotApplied)]
    );
    assert_eq!(
        runs(to),
        0,
        "the tool's own verify was not asked without arguments"
    );
}

fn sqlite() -> (Arc<SqliteStore>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("idemkit.db")).unwrap();
    (Arc::new(store), dir)
}

#[tokio::test]
async fn s28_one_verify_applied_completes_the_record_memory() {
    applied_completes(Arc::new(MemoryStore::new()), "+15550100").await;
}

#[tokio::test]
async fn s28_one_verify_applied_completes_the_record_sqlite() {
    let (store, _dir) = sqlite();
    applied_completes(store, "+15550200").await;
}

#[tokio::test]
async fn s28_one_verify_not_applied_releases_the_record_memory() {
    not_applied_releases(Arc::new(MemoryStore::new()), "+15550101").await;
}

#[tokio::test]
async fn s28_one_verify_not_applied_releases_the_record_sqlite() {
    let (store, _dir) = sqlite();
    not_applied_releases(store, "+15550201").await;
}

#[tokio::test]
async fn s28_one_verify_unknown_keeps_the_record_and_counts_it_memory() {
    unknown_counts(Arc::new(MemoryStore::new()), "+15550102").await;
}

#[tokio::test]
async fn s28_one_verify_unknown_keeps_the_record_and_counts_it_sqlite() {
    let (store, _dir) = sqlite();
    unknown_counts(store, "+15550202").await;
}

#[tokio::test]
async fn s28_one_verify_a_record_without_arguments_is_settled_as_before_memory() {
    a_record_without_arguments_is_settled_as_before(Arc::new(MemoryStore::new()), "+15550104")
        .await;
}
