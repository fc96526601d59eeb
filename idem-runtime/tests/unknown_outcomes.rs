//! Unknown outcomes in the executor: S14+ (ambiguity survives a takeover), S19 (verify asked
//! first), S20 (re-sent only where the provider deduplicates), S22 (a stalled holder stops), S15
//! (a call dropped late) and S16 (an outcome that cannot be kept or read back is recorded as ran),
//! on the memory store and tokio's paused clock.
//!
//! A provider that does not deduplicate is a counter of effects: every run of a body that
//! reaches it counts, and a test fails when one operation counts twice. Each test names its row
//! or finding; the ones marked "before:" failed on the code before the fix, as said there.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::task::Poll;
use std::time::Duration;

use idem_runtime::store::{
    Claim, ClaimRequest, LeaseToken, Outcome, RecordState, StoreFuture, Written,
};
use idem_runtime::{
    CallOutcome, Classify, Error, Failure, Fingerprint, Idem, IdempotencyKey, MemoryStore, Records,
    Store, StoreError, Tool, Verified, observe,
};

#[derive(Debug)]
enum E {
    Body(Failure),
    Idem(Error),
}

impl Classify for E {
    fn classify(&self) -> Failure {
        match self {
            E::Body(f) => *f,
            E::Idem(_) => Failure::Permanent,
        }
    }
}

impl From<Error> for E {
    fn from(e: Error) -> Self {
        E::Idem(e)
    }
}

const S: fn(u64) -> Duration = Duration::from_secs;

fn key() -> IdempotencyKey {
    IdempotencyKey::derive("send_sms", &[("order", &1u64)])
}

/// A provider that does not deduplicate: each body run that reaches it is an effect.
#[derive(Clone, Default)]
struct Sms {
    sent: Arc<AtomicU32>,
    runs: Arc<AtomicU32>,
}

impl Sms {
    fn sent(&self) -> u32 {
        self.sent.load(SeqCst)
    }
    fn runs(&self) -> u32 {
        self.runs.load(SeqCst)
    }
    /// A body run: the message goes out, then the attempt answers `answers[run]` (`None`: `Ok`
    /// with the run's number; `Some(f)`: that failure, the message having gone out for an
    /// `Ambiguous` one, not for the others).
    fn body(
        &self,
        answers: &[Option<Failure>],
    ) -> impl FnMut(IdempotencyKey) -> std::future::Ready<Result<u32, E>> + use<> {
        let (sms, answers) = (self.clone(), answers.to_vec());
        move |_key| {
            let run = sms.runs.fetch_add(1, SeqCst) as usize;
            let answer = answers.get(run).copied().flatten();
            if matches!(answer, None | Some(Failure::Ambiguous)) {
                sms.sent.fetch_add(1, SeqCst);
            }
            std::future::ready(match answer {
                None => Ok(run as u32 + 1),
                Some(f) => Err(E::Body(f)),
            })
        }
    }
}

async fn state(store: &MemoryStore) -> Option<RecordState> {
    store.get(&key()).await.unwrap().map(|r| r.state)
}

fn is_ambiguous(result: &Result<u32, E>) -> bool {
    matches!(result, Err(E::Idem(Error::Ambiguous { .. })))
}

fn tool<'a>(idem: &'a Idem) -> Tool<'a> {
    Tool::new("send_sms").idem(idem).max_attempts(3)
}

// ---- S20: no blind re-send ------------------------------------------------------------------

/// S20: a lost reply from a provider that cannot deduplicate. Before: the
/// attempt was re-sent at once (2 messages, `Ok` of the second).
#[tokio::test(start_paused = true)]
async fn s20_an_unknown_outcome_is_not_resent_when_the_tool_cannot_resend() {
    let store = Arc::new(MemoryStore::new());
    let idem = Idem::new(store.clone());
    let sms = Sms::default();
    let answers = [Some(Failure::Ambiguous), None];
    let (first, info) = observe(tool(&idem).resend(false).side_effect(
        &[("order", &1u64)],
        &(),
        sms.body(&answers),
    ))
    .await;
    assert!(is_ambiguous(&first), "{first:?}");
    assert_eq!(
        info.unwrap().outcome,
        CallOutcome::Failed(Failure::Ambiguous)
    );
    assert_eq!((sms.sent(), sms.runs()), (1, 1));
    assert!(matches!(
        state(&store).await,
        Some(RecordState::Ambiguous { .. })
    ));

    // The next call (the agent tries again) does not send either, and keeps the record.
    let again = tool(&idem)
        .resend(false)
        .side_effect(&[("order", &1u64)], &(), sms.body(&answers))
        .await;
    assert!(
        matches!(again, Err(E::Idem(Error::Ambiguous { attempts: 0, .. }))),
        "{again:?}"
    );
    assert_eq!(sms.sent(), 1, "the second call sent the message again");
    assert!(matches!(
        state(&store).await,
        Some(RecordState::Ambiguous { .. })
    ));
}

/// S20: a tool that may re-send (it passes the key to a provider that deduplicates) is re-sent
/// with the same key, as before.
#[tokio::test(start_paused = true)]
async fn s20_a_tool_that_may_resend_is_resent_with_the_same_key() {
    let idem = Idem::new(MemoryStore::new());
    let sms = Sms::default();
    let keys = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut body = sms.body(&[Some(Failure::Ambiguous), None]);
    let seen = keys.clone();
    let result = tool(&idem)
        .resend(true)
        .side_effect(&[("order", &1u64)], &(), move |key| {
            seen.lock().unwrap().push(key);
            body(key)
        })
        .await;
    assert_eq!(result.unwrap(), 2);
    let keys = keys.lock().unwrap();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], keys[1]);
}

/// S20 with S8: a holder that died (its process gone) after its claim leaves an unknown outcome;
/// the next call takes the record over but does not send, since the provider cannot
/// deduplicate. Before: the next call ran the body (a second message).
#[tokio::test(start_paused = true)]
async fn s20_a_dead_holders_record_is_not_resent_when_the_tool_cannot_resend() {
    let store = Arc::new(MemoryStore::new());
    let idem = Idem::new(store.clone());
    dead_holder(&store, S(1)).await;
    tokio::time::advance(S(2)).await;
    let sms = Sms::default();
    let result = tool(&idem)
        .resend(false)
        .side_effect(&[("order", &1u64)], &(), sms.body(&[None]))
        .await;
    assert!(is_ambiguous(&result), "{result:?}");
    assert_eq!(sms.runs(), 0);
    assert!(matches!(
        state(&store).await,
        Some(RecordState::Ambiguous { .. })
    ));

    // A tool that may re-send takes it over and runs it, with the same key (S8).
    let result = tool(&idem)
        .side_effect(&[("order", &1u64)], &(), sms.body(&[None]))
        .await;
    assert_eq!(result.unwrap(), 1);
}

/// A claim made as a holder that then died: nothing of it but its running record remains.
async fn dead_holder(store: &MemoryStore, lease: Duration) {
    let req = ClaimRequest::new(
        key(),
        "send_sms",
        Fingerprint::of(&()).unwrap(),
        LeaseToken::new(),
        lease,
        S(3600),
    );
    let claim = store.claim(&req).await.unwrap();
    assert_eq!(claim, Claim::Acquired { takeover: None });
}

// ---- S14+: ambiguity taken over -------------------------------------------------------------

/// S14+: a call that takes over a record kept as ambiguous keeps the ambiguity,
/// whatever its own attempts answer; a later call with other arguments gets `KeyReuse`. Before:
/// call 2's transient failure released the record, and call 3 with another amount ran (two
/// charges).
#[tokio::test(start_paused = true)]
async fn s14_plus_ambiguity_survives_a_takeover_that_fails_transiently() {
    let store = Arc::new(MemoryStore::new());
    let idem = Idem::new(store.clone());
    let sms = Sms::default();
    let once = || tool(&idem).max_attempts(1);
    let answers = [Some(Failure::Ambiguous), Some(Failure::Transient), None];
    let first = once()
        .side_effect(&[("order", &1u64)], &500u64, sms.body(&answers))
        .await;
    assert!(
        matches!(first, Err(E::Body(Failure::Ambiguous))),
        "{first:?}"
    );
    let second = once()
        .side_effect(&[("order", &1u64)], &500u64, sms.body(&answers))
        .await;
    assert!(is_ambiguous(&second), "{second:?}");
    assert!(
        matches!(state(&store).await, Some(RecordState::Ambiguous { .. })),
        "the takeover released the ambiguous record"
    );
    let third = once()
        .side_effect(&[("order", &1u64)], &900u64, sms.body(&answers))
        .await;
    assert!(
        matches!(third, Err(E::Idem(Error::KeyReuse { .. }))),
        "{third:?}"
    );
    assert_eq!(sms.runs(), 2);
}

// ---- S19: verify ----------------------------------------------------------------------------

/// A verify function that answers from the provider's own count of effects (as "did message X
/// go out?" would), or `Unknown` while `reachable` is off; it counts its calls.
#[derive(Clone, Default)]
struct Verifier {
    asked: Arc<AtomicU32>,
    unreachable: Arc<AtomicBool>,
}

impl Verifier {
    fn asked(&self) -> u32 {
        self.asked.load(SeqCst)
    }
    fn verify(
        &self,
        sms: &Sms,
    ) -> impl FnMut(IdempotencyKey) -> std::future::Ready<Result<Verified<u32>, E>> + use<> {
        let (v, sms) = (self.clone(), sms.clone());
        move |_key| {
            v.asked.fetch_add(1, SeqCst);
            std::future::ready(Ok(if v.unreachable.load(SeqCst) {
                Verified::Unknown
            } else if sms.sent() > 0 {
                Verified::Applied(100 + sms.sent())
            } else {
                Verified::NotApplied
            }))
        }
    }
}

/// S19: the reply was lost but the message went out: verify finds it, the record completes with
/// what it found, the caller gets it and learns it was verified; a repeat replays it.
#[tokio::test(start_paused = true)]
async fn s19_applied_completes_the_record_with_what_verify_found() {
    let idem = Idem::new(MemoryStore::new());
    let (sms, v) = (Sms::default(), Verifier::default());
    let answers = [Some(Failure::Ambiguous), None];
    let call = || {
        tool(&idem)
            .resend(false)
            .verify(v.verify(&sms))
            .side_effect(&[("order", &1u64)], &(), sms.body(&answers))
    };
    let (result, info) = observe(call()).await;
    let info = info.unwrap();
    assert_eq!(result.unwrap(), 101);
    assert!(info.verified);
    assert_eq!(info.outcome, CallOutcome::Verified);
    assert_eq!((sms.sent(), v.asked()), (1, 1));

    let (again, info) = observe(call()).await;
    assert_eq!(again.unwrap(), 101);
    assert!(info.unwrap().replayed);
    assert_eq!((sms.sent(), sms.runs(), v.asked()), (1, 1, 1));
}

/// S19: the attempt failed before the message went out, but said so ambiguously: verify finds
/// nothing, the call goes on under its retry policy and sends once.
#[tokio::test(start_paused = true)]
async fn s19_not_applied_goes_on_under_the_retry_policy() {
    let idem = Idem::new(MemoryStore::new());
    let (sms, v) = (Sms::default(), Verifier::default());
    // A timeout before anything was sent: answered `Ambiguous`, but nothing went out.
    let mut body = sms.body(&[Some(Failure::Transient), None]);
    let runs = sms.runs.clone();
    let result = tool(&idem)
        .resend(false)
        .verify(v.verify(&sms))
        .side_effect(&[("order", &1u64)], &(), move |key| {
            let first = runs.load(SeqCst) == 0;
            let answer = body(key);
            async move {
                match (first, answer.await) {
                    (true, Err(_)) => Err(E::Body(Failure::Ambiguous)),
                    (_, other) => other,
                }
            }
        })
        .await;
    assert_eq!(result.unwrap(), 2);
    assert_eq!((sms.sent(), sms.runs(), v.asked()), (1, 2, 1));
}

/// S19: verify cannot tell: the record stays ambiguous and the caller gets `Error::Ambiguous`;
/// the next call asks again before anything is sent, and settles it.
#[tokio::test(start_paused = true)]
async fn s19_unknown_keeps_the_record_ambiguous_and_the_next_call_asks_again() {
    let store = Arc::new(MemoryStore::new());
    let idem = Idem::new(store.clone());
    let (sms, v) = (Sms::default(), Verifier::default());
    v.unreachable.store(true, SeqCst);
    let answers = [Some(Failure::Ambiguous), None];
    let call = || {
        tool(&idem)
            .resend(false)
            .verify(v.verify(&sms))
            .side_effect(&[("order", &1u64)], &(), sms.body(&answers))
    };
    let first = call().await;
    assert!(is_ambiguous(&first), "{first:?}");
    assert!(matches!(
        state(&store).await,
        Some(RecordState::Ambiguous { .. })
    ));
    v.unreachable.store(false, SeqCst);
    let (second, info) = observe(call()).await;
    assert_eq!(second.unwrap(), 101);
    assert!(info.unwrap().verified);
    assert_eq!((sms.sent(), sms.runs(), v.asked()), (1, 1, 2));
}

/// S19: a call that takes over a dead holder's record asks verify before it sends.
#[tokio::test(start_paused = true)]
async fn s19_verify_is_asked_before_a_dead_holders_record_is_sent_again() {
    let store = Arc::new(MemoryStore::new());
    let idem = Idem::new(store.clone());
    dead_holder(&store, S(1)).await;
    tokio::time::advance(S(2)).await;
    let (sms, v) = (Sms::default(), Verifier::default());
    let result = tool(&idem)
        .verify(v.verify(&sms))
        .side_effect(&[("order", &1u64)], &(), sms.body(&[None]))
        .await;
    // Nothing had gone out: not applied, so it is sent, once.
    assert_eq!(result.unwrap(), 1);
    assert_eq!((sms.sent(), v.asked()), (1, 1));
}

// ---- S22: a stalled holder ------------------------------------------------------------------

/// Polls `fut` once, as a runtime would before the process stalls.
async fn poll_once<F: Future>(fut: &mut Pin<Box<F>>) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await
}

/// S22: a holder stalled at an await (SIGSTOP, a paused VM) past its lease; another
/// caller takes over and sends; the holder resumes and must not poll its body on. Before: it
/// polled the body, which sent a second message, then ended `LeaseLost`.
#[tokio::test(start_paused = true)]
async fn s22_a_stalled_holder_polls_its_body_no_further_after_a_takeover() {
    let idem = Idem::new(MemoryStore::new());
    let sent = Arc::new(AtomicU32::new(0));
    let go = Arc::new(tokio::sync::Notify::new());
    let (s1, g1) = (sent.clone(), go.clone());
    let mut stalled = Box::pin(tool(&idem).lease(S(1)).side_effect(
        &[("order", &1u64)],
        &(),
        move |_key| {
            let (sent, go) = (s1.clone(), g1.clone());
            async move {
                go.notified().await; // waiting on the network
                sent.fetch_add(1, SeqCst); // then the request goes out
                Ok::<_, E>(1)
            }
        },
    ));
    assert!(poll_once(&mut stalled).await.is_pending());
    // The process stalls for 5 s: nothing of it is polled. Another caller takes over and sends.
    tokio::time::advance(S(5)).await;
    let s2 = sent.clone();
    let other = tool(&idem)
        .lease(S(1))
        .side_effect(&[("order", &1u64)], &(), move |_key| {
            s2.fetch_add(1, SeqCst);
            async { Ok::<_, E>(2) }
        })
        .await;
    assert_eq!(other.unwrap(), 2);
    // The stalled holder resumes, its body ready to send.
    go.notify_one();
    let resumed = stalled.await;
    assert!(
        matches!(resumed, Err(E::Idem(Error::LeaseLost { .. }))),
        "{resumed:?}"
    );
    assert_eq!(
        sent.load(SeqCst),
        1,
        "the stalled holder's body sent after its lease was taken over"
    );
}

/// S22: a holder stalled while it waits between attempts starts no attempt after
/// its lease was taken over. Before: it started attempt 2 (a second message).
#[tokio::test(start_paused = true)]
async fn s22_a_holder_stalled_in_its_backoff_starts_no_attempt_after_a_takeover() {
    let idem = Idem::new(MemoryStore::new());
    let sent = Arc::new(AtomicU32::new(0));
    let s1 = sent.clone();
    let mut stalled = Box::pin(tool(&idem).lease(S(1)).max_attempts(5).side_effect(
        &[("order", &1u64)],
        &(),
        move |_key| {
            let n = s1.fetch_add(1, SeqCst);
            async move {
                if n == 0 {
                    Err(E::Body(Failure::RetryAfter(S(3))))
                } else {
                    Ok(n)
                }
            }
        },
    ));
    assert!(poll_once(&mut stalled).await.is_pending());
    assert_eq!(sent.load(SeqCst), 1);
    tokio::time::advance(S(5)).await;
    let s2 = sent.clone();
    let other = tool(&idem)
        .lease(S(1))
        .side_effect(&[("order", &1u64)], &(), move |_key| {
            s2.fetch_add(1, SeqCst);
            async { Ok::<_, E>(7) }
        })
        .await;
    assert_eq!(other.unwrap(), 7);
    let resumed = stalled.await;
    assert!(
        matches!(resumed, Err(E::Idem(Error::LeaseLost { .. }))),
        "{resumed:?}"
    );
    assert_eq!(
        sent.load(SeqCst),
        2,
        "the stalled holder started an attempt after the takeover"
    );
}

/// S22: a holder that stalled past its lease but whose record nobody took over renews it late
/// and goes on: its body runs once and completes.
#[tokio::test(start_paused = true)]
async fn s22_a_stalled_holder_that_was_not_taken_over_renews_and_goes_on() {
    let store = Arc::new(MemoryStore::new());
    let idem = Idem::new(store.clone());
    let go = Arc::new(tokio::sync::Notify::new());
    let g1 = go.clone();
    let mut stalled = Box::pin(tool(&idem).lease(S(1)).side_effect(
        &[("order", &1u64)],
        &(),
        move |_key| {
            let go = g1.clone();
            async move {
                go.notified().await;
                Ok::<_, E>(1)
            }
        },
    ));
    assert!(poll_once(&mut stalled).await.is_pending());
    tokio::time::advance(S(5)).await;
    go.notify_one();
    assert_eq!(stalled.await.unwrap(), 1);
    assert!(matches!(
        state(&store).await,
        Some(RecordState::Completed { .. })
    ));
}

// ---- S15, S16: outcomes that cannot be kept, calls dropped late -----------------------------

/// An outcome that serializes, but whose skipped field has no `default`: it does not read back.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Order {
    id: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    items: Vec<u32>,
}

/// S16: an outcome that does not read back is recorded as not replayable when it
/// completes, so a repeat is told the operation ran. Before: every repeat got
/// `Error::Store{Corrupt}` ("the record could not be reached").
#[tokio::test(start_paused = true)]
async fn s16_an_outcome_that_does_not_read_back_is_unreplayable() {
    let idem = Idem::new(MemoryStore::new());
    let runs = Arc::new(AtomicU32::new(0));
    let call = || {
        let runs = runs.clone();
        Tool::new("create_order")
            .idem(&idem)
            .side_effect(&[("order", &1u64)], &(), move |_key| {
                runs.fetch_add(1, SeqCst);
                async {
                    Ok::<_, E>(Order {
                        id: 1,
                        items: vec![],
                    })
                }
            })
    };
    assert_eq!(call().await.unwrap().id, 1);
    let again = call().await;
    assert!(
        matches!(again, Err(E::Idem(Error::Unreplayable { .. }))),
        "{again:?}"
    );
    assert_eq!(runs.load(SeqCst), 1);
}

/// S15: a call dropped after its runtime is gone does not panic in `Drop` (before:
/// "there is no reactor running", an abort if already unwinding).
#[test]
fn s15_dropping_a_call_after_its_runtime_is_gone_does_not_panic() {
    let idem = Idem::new(Slow(MemoryStore::new()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut call = Box::pin(Tool::new("send_sms").idem(&idem).side_effect(
        &[("order", &1u64)],
        &(),
        |_key| std::future::pending::<Result<u32, E>>(),
    ));
    rt.block_on(async {
        // Claimed and running: the body waits.
        for _ in 0..10 {
            assert!(poll_once(&mut call).await.is_pending());
            tokio::task::yield_now().await;
        }
    });
    drop(rt);
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(call)));
    assert!(dropped.is_ok(), "dropping the call panicked");
}

/// A future that is pending once (as a store's answer over a connection is), then `inner`.
struct YieldOnce<F>(bool, Pin<Box<F>>);

impl<F: Future> Future for YieldOnce<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<F::Output> {
        if !self.0 {
            self.0 = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.1.as_mut().poll(cx)
    }
}

/// A memory store whose answers come later than their first poll, as a server's do.
struct Slow(MemoryStore);

impl Slow {
    fn later<'a, T: Send + 'a>(fut: StoreFuture<'a, T>) -> StoreFuture<'a, T> {
        StoreFuture::boxed(YieldOnce(false, Box::pin(fut)))
    }
}

#[async_trait::async_trait]
impl idem_runtime::store::OperationIds for Slow {
    async fn operation_id(&self, name: &str, fresh: uuid::Uuid) -> Result<uuid::Uuid, StoreError> {
        self.0.operation_id(name, fresh).await
    }
}

impl Store for Slow {
    fn claim<'a>(&'a self, req: &'a ClaimRequest<'_>) -> StoreFuture<'a, Claim> {
        Self::later(self.0.claim(req))
    }
    fn renew(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> StoreFuture<'_, Written> {
        Self::later(self.0.renew(key, token, lease))
    }
    fn complete(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        outcome: Outcome,
        ttl: Duration,
    ) -> StoreFuture<'_, Written> {
        Self::later(self.0.complete(key, token, outcome, ttl))
    }
    fn release(&self, key: IdempotencyKey, token: LeaseToken) -> StoreFuture<'_, Written> {
        Self::later(self.0.release(key, token))
    }
    fn mark_ambiguous<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        Self::later(self.0.mark_ambiguous(key, token, note, ttl))
    }
}

/// A memory store whose disk is full for outcomes over 1 KiB.
struct FullDisk(MemoryStore);

#[async_trait::async_trait]
impl idem_runtime::store::OperationIds for FullDisk {
    async fn operation_id(&self, name: &str, fresh: uuid::Uuid) -> Result<uuid::Uuid, StoreError> {
        self.0.operation_id(name, fresh).await
    }
}

impl Store for FullDisk {
    fn claim<'a>(&'a self, req: &'a ClaimRequest<'_>) -> StoreFuture<'a, Claim> {
        self.0.claim(req)
    }
    fn renew(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> StoreFuture<'_, Written> {
        self.0.renew(key, token, lease)
    }
    fn complete(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        outcome: Outcome,
        ttl: Duration,
    ) -> StoreFuture<'_, Written> {
        if outcome.len() > 1024 {
            return StoreFuture::ready(Err(StoreError::unavailable("database or disk is full")));
        }
        self.0.complete(key, token, outcome, ttl)
    }
    fn release(&self, key: IdempotencyKey, token: LeaseToken) -> StoreFuture<'_, Written> {
        self.0.release(key, token)
    }
    fn mark_ambiguous<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        self.0.mark_ambiguous(key, token, note, ttl)
    }
}

/// S16: an outcome too large for the free space. The caller gets its result, the record
/// says the operation ran, and a repeat after the lease does not run it again. Before: the
/// record stayed running, and the next call after the lease ran the body again.
#[tokio::test(start_paused = true)]
async fn s16_an_outcome_the_store_cannot_keep_is_recorded_as_ran() {
    let idem = Idem::new(FullDisk(MemoryStore::new()));
    let runs = Arc::new(AtomicU32::new(0));
    let call = || {
        let runs = runs.clone();
        Tool::new("export").idem(&idem).lease(S(10)).side_effect(
            &[("order", &1u64)],
            &(),
            move |_key| {
                runs.fetch_add(1, SeqCst);
                async { Ok::<_, E>("x".repeat(4096)) }
            },
        )
    };
    let (first, info) = observe(call()).await;
    assert_eq!(first.unwrap().len(), 4096);
    assert_eq!(info.unwrap().outcome, CallOutcome::Completed);
    tokio::time::advance(S(30)).await;
    let again = call().await;
    assert!(
        matches!(again, Err(E::Idem(Error::Unreplayable { .. }))),
        "{again:?}"
    );
    assert_eq!(runs.load(SeqCst), 1);
}
