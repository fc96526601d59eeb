//! S19 (`verify = path`) and S20 (no blind re-send, `resend = true | false`) driven through the
//! attribute with a memory store, counting how often the body and the verify function ran. Each
//! test has its own store, and tokio's clock is paused, so backoff sleeps pass instantly.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idemkit::store::RecordState;
use idemkit::{
    Classify, Failure, Idem, IdempotencyKey, MemoryStore, Records, Verified, observe, side_effect,
};
use serde::{Deserialize, Serialize};

#[derive(Debug)]
enum SendError {
    /// The provider's answer was lost: the message may have gone out.
    Timeout,
    /// The provider's log could not be read.
    LogDown,
    Idem(Box<idemkit::Error>),
}

impl Classify for SendError {
    fn classify(&self) -> Failure {
        match self {
            SendError::Timeout => Failure::Ambiguous,
            SendError::LogDown => Failure::Transient,
            SendError::Idem(_) => Failure::Permanent,
        }
    }
}

impl From<idemkit::Error> for SendError {
    fn from(e: idemkit::Error) -> Self {
        SendError::Idem(Box::new(e))
    }
}

impl SendError {
    /// Whether this is the runtime's "outcome unknown" (S19, S20).
    fn is_ambiguous(&self) -> bool {
        matches!(self, SendError::Idem(e) if matches!(**e, idemkit::Error::Ambiguous { .. }))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Sent {
    /// Which run of the body made it (0: the verify function's answer).
    run: u32,
    to: String,
}

/// What the verify function answers, in order; `Err` for a failure to read the provider's log.
type Answer = Result<Verified<Sent>, ()>;

/// A fake message provider that does not deduplicate: it counts how often the tools' bodies ran
/// (each run is a message sent), fails as scripted, and answers verifications as scripted.
#[derive(Default)]
struct Gateway {
    runs: AtomicU32,
    script: Mutex<VecDeque<SendError>>,
    verifications: Mutex<Vec<(Option<IdempotencyKey>, String, String)>>,
    answers: Mutex<VecDeque<Answer>>,
    /// How long each run takes before it answers (the message goes out at once).
    latency: Option<Duration>,
}

impl Gateway {
    fn failing(script: impl IntoIterator<Item = SendError>) -> Self {
        Gateway {
            script: Mutex::new(script.into_iter().collect()),
            ..Self::default()
        }
    }

    fn answering(self, answers: impl IntoIterator<Item = Answer>) -> Self {
        *self.answers.lock().unwrap() = answers.into_iter().collect();
        self
    }

    fn runs(&self) -> u32 {
        self.runs.load(Ordering::SeqCst)
    }

    fn verifications(&self) -> usize {
        self.verifications.lock().unwrap().len()
    }

    /// One message sent: the scripted failure, or what was sent.
    async fn send(&self, to: &str) -> Result<Sent, SendError> {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(latency) = self.latency {
            tokio::time::sleep(latency).await;
        }
        match self.script.lock().unwrap().pop_front() {
            Some(err) => Err(err),
            None => Ok(Sent {
                run,
                to: to.to_owned(),
            }),
        }
    }

    /// Without the key and without `resend`: an unknown outcome is not sent again (S20).
    #[side_effect(key = "to", name = "gw.sms", max_attempts = 4)]
    async fn sms(&self, to: &str, text: String) -> Result<Sent, SendError> {
        let _ = text;
        self.send(to).await
    }

    /// Takes the key (the provider deduplicates by it): re-sent (S20's default).
    #[side_effect(key = "to", name = "gw.keyed", max_attempts = 4)]
    async fn keyed(&self, key: &IdempotencyKey, to: &str) -> Result<Sent, SendError> {
        let _ = key;
        self.send(to).await
    }

    /// Takes the key but cannot pass it on: `resend = false`.
    #[side_effect(
        key = "to",
        name = "gw.keyed_no_resend",
        max_attempts = 4,
        resend = false
    )]
    async fn keyed_no_resend(&self, key: &IdempotencyKey, to: &str) -> Result<Sent, SendError> {
        let _ = key;
        self.send(to).await
    }

    /// Without the key, but deduplicated another way: `resend = true`.
    #[side_effect(key = "to", name = "gw.resent", max_attempts = 4, resend = true)]
    async fn resent(&self, to: &str) -> Result<Sent, SendError> {
        self.send(to).await
    }

    /// Without the key, asking the provider before anything is sent again (S19).
    #[side_effect(key = "to", name = "gw.verified", max_attempts = 4, verify = Self::was_sent)]
    async fn verified(&self, to: &str, text: String) -> Result<Sent, SendError> {
        let _ = text;
        self.send(to).await
    }

    async fn was_sent(&self, to: &str, text: String) -> Result<Verified<Sent>, SendError> {
        self.record_verification(None, to, text)
    }

    /// Takes the key, with `verify`: the key is handed to the verify function too.
    #[side_effect(key = "to", name = "gw.keyed_verified", max_attempts = 4, resend = false, verify = Self::keyed_was_sent)]
    async fn keyed_verified(
        &self,
        key: &IdempotencyKey,
        to: &str,
        text: String,
    ) -> Result<Sent, SendError> {
        let _ = (key, text);
        self.send(to).await
    }

    async fn keyed_was_sent(
        &self,
        key: &IdempotencyKey,
        to: &str,
        text: String,
    ) -> Result<Verified<Sent>, SendError> {
        self.record_verification(Some(*key), to, text)
    }

    fn record_verification(
        &self,
        key: Option<IdempotencyKey>,
        to: &str,
        text: String,
    ) -> Result<Verified<Sent>, SendError> {
        self.verifications
            .lock()
            .unwrap()
            .push((key, to.to_owned(), text));
        match self.answers.lock().unwrap().pop_front() {
            Some(Ok(answer)) => Ok(answer),
            Some(Err(())) => Err(SendError::LogDown),
            None => Ok(Verified::Unknown),
        }
    }
}

fn store() -> (Arc<MemoryStore>, Idem) {
    let store = Arc::new(MemoryStore::new());
    let idem = Idem::new(store.clone());
    (store, idem)
}

async fn state(store: &MemoryStore, key: &IdempotencyKey) -> Option<RecordState> {
    store.get(key).await.unwrap().map(|r| r.state)
}

fn sent(run: u32) -> Sent {
    Sent {
        run,
        to: "+1555".to_owned(),
    }
}

#[tokio::test(start_paused = true)]
async fn s20_a_tool_without_the_key_is_not_resent_after_an_ambiguous_attempt() {
    let (store, idem) = store();
    let gw = Gateway::failing([SendError::Timeout]);
    let (result, info) = idem.scope(observe(gw.sms("+1555", "hi".to_owned()))).await;
    let err = result.unwrap_err();
    assert!(err.is_ambiguous(), "{err:?}");
    assert_eq!(gw.runs(), 1, "sent once, not re-sent blindly");
    let key = info.unwrap().key.unwrap();
    assert!(
        matches!(
            state(&store, &key).await,
            Some(RecordState::Ambiguous { .. })
        ),
        "kept for a verification or an operator"
    );
    // A later call of the same arguments does not send it again either.
    let again = idem.scope(gw.sms("+1555", "hi".to_owned())).await;
    assert!(again.unwrap_err().is_ambiguous());
    assert_eq!(gw.runs(), 1);
}

#[tokio::test(start_paused = true)]
async fn s20_a_tool_taking_the_key_is_resent_with_it() {
    let (_, idem) = store();
    let gw = Gateway::failing([SendError::Timeout]);
    let result = idem.scope(gw.keyed("+1555")).await;
    assert_eq!(result.unwrap(), sent(2));
    assert_eq!(gw.runs(), 2, "the provider deduplicates by the key");
}

#[tokio::test(start_paused = true)]
async fn s20_resend_false_on_a_tool_taking_the_key_is_not_resent() {
    let (store, idem) = store();
    let gw = Gateway::failing([SendError::Timeout]);
    let (result, info) = idem.scope(observe(gw.keyed_no_resend("+1555"))).await;
    assert!(result.unwrap_err().is_ambiguous());
    assert_eq!(gw.runs(), 1);
    let key = info.unwrap().key.unwrap();
    assert!(matches!(
        state(&store, &key).await,
        Some(RecordState::Ambiguous { .. })
    ));
    assert!(
        idem.scope(gw.keyed_no_resend("+1555"))
            .await
            .unwrap_err()
            .is_ambiguous()
    );
    assert_eq!(gw.runs(), 1, "a later call does not send it either");
}

#[tokio::test(start_paused = true)]
async fn s20_resend_true_on_a_tool_without_the_key_is_resent() {
    let (_, idem) = store();
    let gw = Gateway::failing([SendError::Timeout, SendError::Timeout]);
    let result = idem.scope(gw.resent("+1555")).await;
    assert_eq!(result.unwrap(), sent(3));
    assert_eq!(gw.runs(), 3);
}

#[tokio::test(start_paused = true)]
async fn s19_verify_applied_completes_with_its_answer_and_a_repeat_replays_it() {
    let (store, idem) = store();
    let gw = Gateway::failing([SendError::Timeout]).answering([Ok(Verified::Applied(sent(0)))]);
    let (result, info) = idem
        .scope(observe(gw.verified("+1555", "hi".to_owned())))
        .await;
    assert_eq!(result.unwrap(), sent(0), "the verify function's answer");
    let info = info.unwrap();
    assert!(
        info.verified,
        "the caller can tell the outcome was verified"
    );
    assert_eq!(gw.runs(), 1, "not sent again");
    assert_eq!(gw.verifications(), 1);
    let key = info.key.unwrap();
    assert!(matches!(
        state(&store, &key).await,
        Some(RecordState::Completed { .. })
    ));
    // A repeat replays the verified outcome: neither the body nor the verify function runs.
    let (again, info) = idem
        .scope(observe(gw.verified("+1555", "hi".to_owned())))
        .await;
    assert_eq!(again.unwrap(), sent(0));
    assert!(info.unwrap().replayed);
    assert_eq!((gw.runs(), gw.verifications()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn s19_verify_not_applied_sends_again() {
    let (_, idem) = store();
    let gw = Gateway::failing([SendError::Timeout]).answering([Ok(Verified::NotApplied)]);
    let result = idem.scope(gw.verified("+1555", "hi".to_owned())).await;
    assert_eq!(result.unwrap(), sent(2), "the body ran again, and answered");
    assert_eq!((gw.runs(), gw.verifications()), (2, 1));
}

#[tokio::test(start_paused = true)]
async fn s19_verify_unknown_keeps_the_record_ambiguous_and_a_later_call_asks_again() {
    let (store, idem) = store();
    let gw = Gateway::failing([SendError::Timeout]).answering([
        Ok(Verified::Unknown),
        Err(()),
        Ok(Verified::Applied(sent(0))),
    ]);
    let (result, info) = idem
        .scope(observe(gw.verified("+1555", "hi".to_owned())))
        .await;
    assert!(result.unwrap_err().is_ambiguous());
    assert_eq!((gw.runs(), gw.verifications()), (1, 1));
    let key = info.unwrap().key.unwrap();
    assert!(matches!(
        state(&store, &key).await,
        Some(RecordState::Ambiguous { .. })
    ));
    // The next call meets the record kept as ambiguous: it asks before sending; an error from
    // the verify function counts as `Unknown`.
    let again = idem.scope(gw.verified("+1555", "hi".to_owned())).await;
    assert!(again.unwrap_err().is_ambiguous());
    assert_eq!((gw.runs(), gw.verifications()), (1, 2));
    // Once the provider can tell, the call completes with its answer, never sent twice.
    let settled = idem.scope(gw.verified("+1555", "hi".to_owned())).await;
    assert_eq!(settled.unwrap(), sent(0));
    assert_eq!((gw.runs(), gw.verifications()), (1, 3));
    assert!(matches!(
        state(&store, &key).await,
        Some(RecordState::Completed { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn s19_the_verify_function_gets_the_tools_arguments_and_its_key() {
    let (_, idem) = store();
    let gw = Gateway::failing([SendError::Timeout]).answering([Ok(Verified::Applied(sent(0)))]);
    let (result, info) = idem
        .scope(observe(gw.keyed_verified("+1555", "hello".to_owned())))
        .await;
    assert_eq!(result.unwrap(), sent(0));
    let key = info.unwrap().key.unwrap();
    assert_eq!(
        *gw.verifications.lock().unwrap(),
        [(Some(key), "+1555".to_owned(), "hello".to_owned())]
    );
}

#[test]
fn a_tool_with_verify_is_send_so_agents_can_spawn_it() {
    fn assert_send<F: std::future::Future + Send>(_: &F) {}
    let gw = Gateway::default();
    assert_send(&gw.verified("+1555", "hi".to_owned()));
    assert_send(&gw.keyed_verified("+1555", "hi".to_owned()));
}

/// A tool with an `impl Trait` parameter: its verify function takes one too.
#[side_effect(key = "user_id", verify = noted)]
async fn note(user_id: u64, text: impl Serialize + Clone + Send) -> Result<Sent, SendError> {
    let _ = (user_id, serde_json::to_string(&text));
    Err(SendError::Timeout)
}

async fn noted(
    user_id: u64,
    text: impl Serialize + Clone + Send,
) -> Result<Verified<Sent>, SendError> {
    let _ = text;
    Ok(Verified::Applied(Sent {
        run: 0,
        to: user_id.to_string(),
    }))
}

#[tokio::test(start_paused = true)]
async fn s19_a_verify_function_may_take_an_impl_trait_parameter_as_the_tool_does() {
    let (_, idem) = store();
    let result = idem.scope(note(7, "hi")).await;
    assert_eq!(result.unwrap().to, "7");
}

/// A call whose future is dropped while its attempt runs (the agent gave up, its task was
/// aborted): the message may have gone out.
async fn cut_off<F: std::future::Future>(idem: &Idem, call: F) {
    let cut = idem
        .scope(tokio::time::timeout(Duration::from_secs(1), call))
        .await;
    assert!(cut.is_err(), "the call was cut off mid-attempt");
}

#[tokio::test(start_paused = true)]
async fn s20_a_cut_off_attempt_of_a_tool_without_the_key_is_not_sent_by_the_next_call() {
    let (_, idem) = store();
    let gw = Gateway {
        latency: Some(Duration::from_secs(60)),
        ..Gateway::default()
    };
    cut_off(&idem, gw.sms("+1555", "hi".to_owned())).await;
    assert_eq!(gw.runs(), 1);
    let next = idem.scope(gw.sms("+1555", "hi".to_owned())).await;
    assert!(next.unwrap_err().is_ambiguous());
    assert_eq!(gw.runs(), 1, "the next call did not send it again");
}

#[tokio::test(start_paused = true)]
async fn s19_the_next_call_after_a_cut_off_attempt_asks_verify_before_sending() {
    for (answer, runs) in [(Verified::Applied(sent(0)), 1), (Verified::NotApplied, 2)] {
        let (_, idem) = store();
        let gw = Gateway {
            latency: Some(Duration::from_secs(60)),
            ..Gateway::default()
        }
        .answering([Ok(answer.clone())]);
        cut_off(&idem, gw.verified("+1555", "hi".to_owned())).await;
        assert_eq!((gw.runs(), gw.verifications()), (1, 0));
        let next = idem.scope(gw.verified("+1555", "hi".to_owned())).await;
        assert_eq!(gw.verifications(), 1, "asked first ({answer:?})");
        assert_eq!(gw.runs(), runs, "{answer:?}");
        match answer {
            Verified::Applied(value) => assert_eq!(next.unwrap(), value),
            _ => assert_eq!(next.unwrap(), sent(2)),
        }
    }
}

/// A holder that dies mid-attempt without a trace (its process killed): its future is neither
/// polled again nor dropped, so its record stays running until its lease runs out.
async fn dies_holding<F: std::future::Future>(idem: &Idem, call: F) {
    let mut held = Box::pin(idem.scope(call));
    let cut = tokio::time::timeout(Duration::from_secs(1), &mut held).await;
    assert!(cut.is_err(), "the holder was mid-attempt");
    std::mem::forget(held);
    // Past the default lease (10 s): the record may be taken over.
    tokio::time::sleep(Duration::from_secs(11)).await;
}

#[tokio::test(start_paused = true)]
async fn s19_and_s20_taking_over_a_dead_holders_record_asks_verify_or_does_not_send() {
    let (_, idem) = store();
    let gw = Gateway {
        latency: Some(Duration::from_secs(60)),
        ..Gateway::default()
    }
    .answering([Ok(Verified::Applied(sent(0)))]);
    // Without `verify` and without the key: the takeover does not send it again (S20).
    dies_holding(&idem, gw.sms("+1555", "hi".to_owned())).await;
    let taken_over = idem.scope(gw.sms("+1555", "hi".to_owned())).await;
    assert!(taken_over.unwrap_err().is_ambiguous());
    assert_eq!(gw.runs(), 1);
    // With `verify`: the takeover asks first, and the answer completes the call (S19).
    dies_holding(&idem, gw.verified("+1555", "hi".to_owned())).await;
    assert_eq!(gw.runs(), 2);
    let taken_over = idem.scope(gw.verified("+1555", "hi".to_owned())).await;
    assert_eq!(taken_over.unwrap(), sent(0));
    assert_eq!((gw.runs(), gw.verifications()), (2, 1));
}

/// S34, through the attribute on SQLite: an SMS whose answer was lost is kept as ambiguous past
/// its time-to-live; prune leaves it, it is still listed, and the same call a while later does
/// not send it again (`Error::Ambiguous`).
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn s34_an_sms_left_ambiguous_is_not_sent_again_after_its_ttl_on_sqlite() {
    use idemkit::store::RecordFilter;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(idemkit::SqliteStore::open(dir.path().join("idemkit.db")).unwrap());
    let idem = Idem::builder()
        .shared_store(store.clone())
        .lease(Duration::from_millis(500))
        .ttl(Duration::from_secs(1))
        .build()
        .expect("consistent settings");
    let gw = Gateway::failing([SendError::Timeout]);
    let (result, info) = idem.scope(observe(gw.sms("+1555", "hi".to_owned()))).await;
    assert!(result.unwrap_err().is_ambiguous());
    let key = info.unwrap().key.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(store.prune(100).await.unwrap(), 0, "never pruned by time");
    let listed = store.list(&RecordFilter::new()).await.unwrap();
    assert!(
        listed
            .iter()
            .any(|r| r.key == key && matches!(r.state, RecordState::Ambiguous { .. })),
        "{listed:?}"
    );
    let again = idem.scope(gw.sms("+1555", "hi".to_owned())).await;
    assert!(again.unwrap_err().is_ambiguous(), "not sent again");
    assert_eq!(gw.runs(), 1, "the SMS went out once");
}

/// S33, through the attribute on SQLite, as issue 53 measured it from outside: a send, its
/// repeat within the ttl replays the first run, and the same call past the ttl (its record a
/// tombstone) is told it was done and when, and runs nothing (before: the body ran again, run 2);
/// another message to the same number (other arguments) is key reuse.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn s33_a_send_repeated_after_its_ttl_on_sqlite_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(idemkit::SqliteStore::open(dir.path().join("idemkit.db")).unwrap());
    let idem = Idem::builder()
        .shared_store(store.clone())
        .lease(Duration::from_millis(500))
        .ttl(Duration::from_secs(1))
        .build()
        .expect("consistent settings");
    let gw = Gateway::failing([]);
    let first = idem.scope(gw.sms("+1555", "hi".to_owned())).await.unwrap();
    let again = idem.scope(gw.sms("+1555", "hi".to_owned())).await.unwrap();
    assert_eq!((first.run, again.run), (1, 1), "within the ttl: a replay");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let late = idem.scope(gw.sms("+1555", "hi".to_owned())).await;
    match late {
        Err(SendError::Idem(e)) => {
            assert!(matches!(*e, idemkit::Error::Expired { .. }), "{e}");
            let said = e.to_string();
            assert!(
                said.contains("done on 20") && said.contains("its result is no longer kept"),
                "{said}"
            );
        }
        other => panic!("a repeat after the ttl is a tombstone's answer: {other:?}"),
    }
    let other = idem.scope(gw.sms("+1555", "bye".to_owned())).await;
    assert!(
        matches!(&other, Err(SendError::Idem(e)) if matches!(**e, idemkit::Error::KeyReuse { .. })),
        "{other:?}"
    );
    assert_eq!(gw.runs(), 1, "the SMS went out once");
}
