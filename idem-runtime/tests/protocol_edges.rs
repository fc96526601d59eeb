//! Exactly once outside the happy window (issue 15), on the memory store and tokio's paused
//! clock: bodies longer than the lease or the ttl (S12), renewals refused (S13), ambiguity that
//! sticks (S14), cancellation and panics (S15), completion writes that fail for a while (S17),
//! and the settings that would let a running record expire.
//!
//! Each test names the finding of the issue it pins; each failed on the code before the fix
//! (what it saw then is in its comment).

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_runtime::store::{OperationIds, RecordState};
use idem_runtime::testing::{Intercept, Step};
use idem_runtime::{
    BuildError, CallOutcome, Classify, Error, Failure, Idem, IdempotencyKey, MemoryStore, Records,
    Store, StoreError, Tool, observe,
};
use tokio::time::Instant;

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
    IdempotencyKey::derive("charge", &[("order", &1u64)])
}

/// A charge: counts its runs, records when each started, sleeps `body`, answers with its run.
#[derive(Clone, Default)]
struct Charge {
    runs: Arc<AtomicU32>,
    starts: Arc<Mutex<Vec<Duration>>>,
}

impl Charge {
    fn runs(&self) -> u32 {
        self.runs.load(SeqCst)
    }

    async fn call(
        &self,
        tool: Tool<'_>,
        amount: u64,
        body: Duration,
        t0: Instant,
    ) -> (Result<u32, E>, CallOutcome) {
        let (result, info) = observe(tool.side_effect(&[("order", &1u64)], &amount, |_| {
            let n = self.runs.fetch_add(1, SeqCst) + 1;
            self.starts.lock().unwrap().push(t0.elapsed());
            async move {
                tokio::time::sleep(body).await;
                Ok::<_, E>(n)
            }
        }))
        .await;
        (result, info.expect("every call reports").outcome)
    }
}

/// Finding 1: a body slower than the lease, at the default settings (lease 10 s, renewed; wait
/// 30 s). Before: a second caller arriving at 5 s took the key over at the lease's end (30 s)
/// and ran the body a second time, concurrently.
#[tokio::test(start_paused = true)]
async fn f1_a_body_slower_than_the_lease_runs_once_at_default_settings() {
    let idem = Idem::new(MemoryStore::new());
    let charge = Charge::default();
    let t0 = Instant::now();
    let first = charge.call(Tool::new("charge").idem(&idem), 4200, S(45), t0);
    let second = async {
        tokio::time::sleep(S(5)).await;
        charge
            .call(Tool::new("charge").idem(&idem), 4200, S(0), t0)
            .await
    };
    let ((a, a_how), (b, b_how)) = tokio::join!(first, second);
    assert_eq!((a.unwrap(), a_how), (1, CallOutcome::Completed));
    assert!(
        matches!(b, Err(E::Idem(Error::InFlight { .. }))),
        "the second caller waits its 30 s and is told the call is in flight: {b:?}"
    );
    assert_eq!(b_how, CallOutcome::Refused);
    let (c, how) = charge
        .call(Tool::new("charge").idem(&idem), 4200, S(0), t0)
        .await;
    assert_eq!((c.unwrap(), how), (1, CallOutcome::Replayed));
    assert_eq!(charge.runs(), 1, "one body in all");
}

/// Finding 2: a ttl shorter than the body. Before: with ttl 10 s and a 15 s body, a second
/// caller started run #2 at 11 s, and the lone caller's outcome was never recorded.
#[tokio::test(start_paused = true)]
async fn f2_a_body_longer_than_the_ttl_keeps_its_record_and_runs_once() {
    let idem = Idem::builder()
        .store(MemoryStore::new())
        .lease(S(10))
        .ttl(S(10))
        .build()
        .unwrap();
    let charge = Charge::default();
    let t0 = Instant::now();
    let first = charge.call(Tool::new("charge").idem(&idem), 4200, S(15), t0);
    let second = async {
        tokio::time::sleep(S(11)).await;
        charge
            .call(Tool::new("charge").idem(&idem), 4200, S(0), t0)
            .await
    };
    let ((a, a_how), (b, b_how)) = tokio::join!(first, second);
    assert_eq!((a.unwrap(), a_how), (1, CallOutcome::Completed));
    assert_eq!((b.unwrap(), b_how), (1, CallOutcome::Replayed));
    assert_eq!(charge.runs(), 1);
}

/// Finding 2, the settings: a ttl shorter than the lease is refused by the builder, and a
/// tool's own ttl shorter than its lease refuses its calls (the body never runs).
#[tokio::test(start_paused = true)]
async fn f2_a_ttl_shorter_than_the_lease_is_refused() {
    let built = Idem::builder()
        .store(MemoryStore::new())
        .lease(S(30))
        .ttl(S(10))
        .build();
    assert_eq!(
        built.unwrap_err(),
        BuildError::TtlShorterThanLease {
            ttl: S(10),
            lease: S(30)
        }
    );
    assert_eq!(
        Idem::builder().build().unwrap_err(),
        BuildError::NoStore,
        "no panic without a store"
    );
    let idem = Idem::new(MemoryStore::new());
    let charge = Charge::default();
    let (result, how) = charge
        .call(
            Tool::new("charge").idem(&idem).ttl(S(1)),
            4200,
            S(0),
            Instant::now(),
        )
        .await;
    let Err(E::Idem(err @ Error::Settings { .. })) = result else {
        panic!("refused: {result:?}")
    };
    assert!(err.to_string().contains("shorter than its lease"), "{err}");
    assert_eq!((how, charge.runs()), (CallOutcome::Refused, 0));
}

/// A tool that fails as `script` says, then succeeds; counts its runs.
async fn scripted(
    idem: &Idem,
    amount: u64,
    script: &[Failure],
    runs: &AtomicU32,
) -> (Result<u32, E>, CallOutcome) {
    let mut n = 0;
    let (result, info) = observe(Tool::new("charge").idem(idem).max_attempts(5).side_effect(
        &[("order", &1u64)],
        &amount,
        |_| {
            let failure = script.get(n).copied();
            n += 1;
            let run = runs.fetch_add(1, SeqCst) + 1;
            async move {
                match failure {
                    Some(f) => Err(E::Body(f)),
                    None => Ok(run),
                }
            }
        },
    ))
    .await;
    (result, info.unwrap().outcome)
}

/// Finding 4: ambiguity is sticky. Before: attempt 1 Ambiguous (charged, response lost), then
/// a Transient (or Permanent) last attempt released the record; the caller was told "did not
/// happen", and a call with the same key fields and another amount then ran (two charges).
#[tokio::test(start_paused = true)]
async fn f4_an_ambiguous_attempt_keeps_the_record_whatever_comes_after() {
    for last in [Failure::Transient, Failure::Permanent] {
        let store = Arc::new(MemoryStore::new());
        let idem = Idem::new(store.clone());
        let runs = AtomicU32::new(0);
        let script = [Failure::Ambiguous, last, last, last, last];
        let (result, how) = scripted(&idem, 4200, &script, &runs).await;
        let Err(E::Idem(err @ Error::Ambiguous { .. })) = result else {
            panic!("after {last:?}: {result:?}")
        };
        assert!(
            err.to_string()
                .contains("the effect may or may not have happened"),
            "{err}"
        );
        assert_eq!(how, CallOutcome::Failed(Failure::Ambiguous));
        let record = store.get(&key()).await.unwrap().expect("kept");
        assert!(
            matches!(record.state, RecordState::Ambiguous { .. }),
            "{last:?}"
        );
        // S3 still holds: another amount under the same key is refused, not run.
        let before = runs.load(SeqCst);
        let (other, how) = scripted(&idem, 9900, &[], &runs).await;
        assert!(
            matches!(other, Err(E::Idem(Error::KeyReuse { .. }))),
            "{other:?}"
        );
        assert_eq!((how, runs.load(SeqCst)), (CallOutcome::Refused, before));
    }
}

/// Finding 7: cancellation. Before: a caller that gave up after 5 s (a timeout around the call)
/// left the record Running for the rest of the lease, so a caller waiting on it learned nothing
/// until then. Now the dropped call ends its claim at once (ambiguous: an attempt was running)
/// and wakes this runtime's waiters, which take the operation over at that instant.
#[tokio::test(start_paused = true)]
async fn f7_a_cancelled_call_ends_its_claim_at_once_and_wakes_its_waiters() {
    let idem = Idem::new(MemoryStore::new());
    let charge = Charge::default();
    let t0 = Instant::now();
    let cancelled = tokio::time::timeout(
        S(5),
        charge.call(Tool::new("charge").idem(&idem), 4200, S(20), t0),
    );
    let waiter = async {
        tokio::time::sleep(S(1)).await;
        charge
            .call(Tool::new("charge").idem(&idem), 4200, Duration::ZERO, t0)
            .await
    };
    let (cancelled, (waited, how)) = tokio::join!(cancelled, waiter);
    assert!(cancelled.is_err(), "the first caller gave up");
    assert_eq!((waited.unwrap(), how), (2, CallOutcome::Completed));
    assert_eq!(
        charge.starts.lock().unwrap().clone(),
        vec![S(0), S(5)],
        "the waiter took over at the cancellation (its next poll would have been at 5.13 s)"
    );
}

/// Finding 7: a call dropped before any attempt ran (here: during its backoff after a failure
/// that did not happen) releases its record at once; one dropped mid-attempt keeps it as
/// ambiguous. Before: both stayed Running until the lease ended.
#[tokio::test(start_paused = true)]
async fn f7_a_dropped_call_releases_or_keeps_as_ambiguous_by_what_ran() {
    let store = Arc::new(MemoryStore::new());
    let idem = Idem::new(store.clone());
    let runs = AtomicU32::new(0);
    let backing_off = Tool::new("charge")
        .idem(&idem)
        .retry(idem_runtime::RetryPolicy::default().with_max_elapsed(S(120)))
        .max_attempts(3)
        .side_effect(&[("order", &1u64)], &4200u64, |_| {
            runs.fetch_add(1, SeqCst);
            async { Err::<u32, _>(E::Body(Failure::RetryAfter(S(60)))) }
        });
    assert!(tokio::time::timeout(S(1), backing_off).await.is_err());
    assert_eq!(
        store.get(&key()).await.unwrap(),
        None,
        "no attempt may have taken effect: released"
    );

    let charge = Charge::default();
    let running = charge.call(Tool::new("charge").idem(&idem), 4200, S(20), Instant::now());
    assert!(tokio::time::timeout(S(1), running).await.is_err());
    let record = store.get(&key()).await.unwrap().expect("kept");
    assert!(
        matches!(record.state, RecordState::Ambiguous { .. }),
        "dropped mid-attempt: {:?}",
        record.state
    );
}

/// Finding 7: a panicking body ends its claim as ambiguous at once (the panic still reaches the
/// caller's task), and waiters are woken.
#[tokio::test(start_paused = true)]
async fn f7_a_panicking_body_ends_its_claim_as_ambiguous() {
    let store = Arc::new(MemoryStore::new());
    let idem = Idem::new(store.clone());
    let task = tokio::spawn({
        let idem = idem.clone();
        async move {
            Tool::new("charge")
                .idem(&idem)
                .side_effect(&[("order", &1u64)], &4200u64, |_| async {
                    tokio::time::sleep(S(1)).await;
                    panic!("the body panicked");
                    #[allow(unreachable_code)]
                    Ok::<u32, E>(0)
                })
                .await
        }
    });
    assert!(task.await.unwrap_err().is_panic());
    let record = store.get(&key()).await.unwrap().expect("kept");
    assert!(matches!(record.state, RecordState::Ambiguous { .. }));
}

/// A memory store whose first `failures` completes fail as unavailable (answered at once, as a
/// locked SQLite file answers).
fn completes_fail(failures: u32) -> impl Store + OperationIds {
    let left = AtomicU32::new(failures);
    Intercept::new(MemoryStore::new(), move |step, _| {
        (step == Step::Complete
            && left
                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                .is_ok())
        .then(|| StoreError::unavailable("database is locked"))
    })
}

/// Finding 6 (S17): the completion write is retried under the token while the lease lasts.
/// Before: tried once; a store locked for a while left the outcome unrecorded and a later
/// caller ran the body again.
#[tokio::test(start_paused = true)]
async fn f6_a_completion_write_that_fails_for_a_while_is_retried_and_lands() {
    let idem = Idem::new(completes_fail(5));
    let charge = Charge::default();
    let t0 = Instant::now();
    let (first, how) = charge
        .call(Tool::new("charge").idem(&idem), 4200, S(0), t0)
        .await;
    assert_eq!((first.unwrap(), how), (1, CallOutcome::Completed));
    let (again, how) = charge
        .call(Tool::new("charge").idem(&idem), 4200, S(0), t0)
        .await;
    assert_eq!((again.unwrap(), how), (1, CallOutcome::Replayed));
    assert_eq!(charge.runs(), 1);
}

/// S17's bound: a completion that keeps failing is given up once the lease would end (the
/// outcome is then unrecorded), not retried for ever. Its lease is renewed under its token when
/// the retries reach its end (issue 41, simulation seed 12433), at most three times: given up
/// by the end of the fourth lease.
#[tokio::test(start_paused = true)]
async fn f6_a_completion_write_that_keeps_failing_is_given_up_at_the_lease_end() {
    let idem = Idem::builder()
        .store(completes_fail(u32::MAX))
        .lease(S(2))
        .build()
        .unwrap();
    let charge = Charge::default();
    let t0 = Instant::now();
    let (first, how) = charge
        .call(Tool::new("charge").idem(&idem), 4200, S(0), t0)
        .await;
    assert_eq!((first.unwrap(), how), (1, CallOutcome::Unrecorded));
    assert!(
        t0.elapsed() > S(2) && t0.elapsed() <= S(2) * 4,
        "retried past the first lease under renewals, given up by the end of the fourth: {:?}",
        t0.elapsed()
    );
}

/// Fingerprints (issue 15): a NaN argument is refused before the body with `Error::Arguments`
/// (before: it fingerprinted like `None`), and `-0.0` is a retry of `0.0` (before: refused as
/// key reuse).
#[tokio::test(start_paused = true)]
async fn fingerprints_refuse_nan_and_take_negative_zero_as_zero() {
    let idem = Idem::new(MemoryStore::new());
    let runs = AtomicU32::new(0);
    let call = |rate: f64| {
        Tool::new("quote")
            .idem(&idem)
            .side_effect(&[("order", &1u64)], &rate, |_| {
                runs.fetch_add(1, SeqCst);
                async { Ok::<_, E>(1u32) }
            })
    };
    let nan = call(f64::NAN).await;
    let Err(E::Idem(err @ Error::Arguments { .. })) = nan else {
        panic!("refused: {nan:?}")
    };
    assert!(err.to_string().contains("has no JSON form"), "{err}");
    assert_eq!(runs.load(SeqCst), 0);
    assert_eq!(call(0.0).await.unwrap(), 1);
    assert_eq!(call(-0.0).await.unwrap(), 1, "a replay, not key reuse");
    assert_eq!(runs.load(SeqCst), 1);
}

/// Finding 5: a stored outcome that no longer deserializes (the tool's return type changed, or
/// a hand-written `Deserialize` does not match its `Serialize`) fails closed as a corrupt store
/// (S9) and says the operation already ran; the body is not run. (Before: "the tool was not
/// run", as if nothing had happened.)
#[tokio::test(start_paused = true)]
async fn a_stored_outcome_that_no_longer_decodes_says_the_operation_ran() {
    let idem = Idem::new(MemoryStore::new());
    let charge = Charge::default();
    let t0 = Instant::now();
    // Recorded by an earlier version of the tool, whose output was a text.
    let earlier =
        Tool::new("charge")
            .idem(&idem)
            .side_effect(&[("order", &1u64)], &4200u64, |_| async {
                Ok::<_, E>("receipt 1".to_owned())
            });
    assert_eq!(earlier.await.unwrap(), "receipt 1");
    let (now, how) = charge
        .call(Tool::new("charge").idem(&idem), 4200, S(0), t0)
        .await;
    let Err(E::Idem(err @ Error::Store { .. })) = now else {
        panic!("refused: {now:?}")
    };
    assert!(
        err.to_string().contains("already ran and completed"),
        "{err}"
    );
    assert_eq!((how, charge.runs()), (CallOutcome::Refused, 0));
}

/// Issue 16: an anyhow error that says nothing about what it means is taken the safe way for a
/// write: it may have happened, so it is retried with the same key and, when attempts run out,
/// the record is kept as ambiguous, never released; a `Failure` given as context decides instead.
#[cfg(feature = "anyhow")]
#[tokio::test(start_paused = true)]
async fn an_anyhow_error_that_says_nothing_is_kept_as_ambiguous() {
    let store = Arc::new(MemoryStore::new());
    let idem = Idem::new(store.clone());
    let runs = &AtomicU32::new(0);
    let call = |order: u64, permanent: bool| {
        Tool::new("charge").idem(&idem).max_attempts(3).side_effect(
            &[("order", &order)],
            &(),
            move |_| {
                runs.fetch_add(1, SeqCst);
                async move {
                    let err = anyhow::anyhow!("connection reset by the provider");
                    let err = if permanent {
                        err.context(Failure::Permanent)
                    } else {
                        err
                    };
                    Err::<u32, _>(err)
                }
            },
        )
    };
    assert!(call(1, false).await.is_err());
    assert_eq!(runs.swap(0, SeqCst), 3, "retried, with the same key");
    let kept = store.get(&key()).await.unwrap().expect("kept");
    assert!(matches!(kept.state, RecordState::Ambiguous { .. }));
    assert!(call(2, true).await.is_err());
    assert_eq!(runs.load(SeqCst), 1, "a Permanent context stops at once");
    let other = IdempotencyKey::derive("charge", &[("order", &2u64)]);
    assert_eq!(store.get(&other).await.unwrap(), None, "and releases");
}

/// Issue 19 (sizes), S16: an outcome over the bound (default 1 MiB; per runtime and per tool) is
/// returned to its caller and recorded as done but too large to replay; a repeat is told the
/// operation ran, and the body never runs again.
#[tokio::test(start_paused = true)]
async fn an_outcome_over_the_size_bound_is_returned_once_and_never_run_again() {
    let idem = Idem::builder()
        .store(MemoryStore::new())
        .max_outcome_bytes(64)
        .build()
        .unwrap();
    let runs = &AtomicU32::new(0);
    let call = |text: &'static str, bound: Option<usize>| {
        let tool = Tool::new("report").idem(&idem);
        let tool = match bound {
            Some(n) => tool.max_outcome_bytes(n),
            None => tool,
        };
        observe(tool.side_effect(
            &[("order", &u64::from(text.len() as u32))],
            &(),
            move |_| {
                runs.fetch_add(1, SeqCst);
                async move { Ok::<_, E>(text.to_owned()) }
            },
        ))
    };
    let long = "x".repeat(100).leak();
    let (first, info) = call(long, None).await;
    assert_eq!(
        (first.unwrap().len(), info.unwrap().outcome),
        (100, CallOutcome::Completed)
    );
    let (again, info) = call(long, None).await;
    let Err(E::Idem(err @ Error::Unreplayable { .. })) = again else {
        panic!("refused: {again:?}")
    };
    assert!(
        err.to_string().contains("over the bound of 64 bytes"),
        "{err}"
    );
    assert_eq!(
        (info.unwrap().outcome, runs.load(SeqCst)),
        (CallOutcome::Unreplayable, 1)
    );
    // A tool's own bound replaces the runtime's.
    let (first, _) = call("y".repeat(80).leak(), Some(1 << 10)).await;
    let (again, info) = call("y".repeat(80).leak(), Some(1 << 10)).await;
    assert_eq!(first.unwrap(), again.unwrap());
    assert_eq!(info.unwrap().outcome, CallOutcome::Replayed);
}

/// S18 (issue 19): a tool that requires a tenant fails closed without one, its body not run;
/// the task's tenant (`as_tenant`) or the runtime's (`IdemBuilder::tenant`) makes its key the
/// tenant's own.
#[tokio::test(start_paused = true)]
async fn s18_a_tool_that_requires_a_tenant_fails_closed_without_one() {
    let runs = &AtomicU32::new(0);
    let call = |idem: &Idem| {
        let idem = idem.clone();
        async move {
            Tool::new("charge")
                .idem(&idem)
                .tenant_required()
                .side_effect(&[("order", &1u64)], &(), move |key| {
                    runs.fetch_add(1, SeqCst);
                    async move { Ok::<_, E>(key.to_string()) }
                })
                .await
        }
    };
    let idem = Idem::new(MemoryStore::new());
    let refused = call(&idem).await;
    let Err(E::Idem(err @ Error::NoTenant { .. })) = refused else {
        panic!("refused: {refused:?}")
    };
    assert!(err.to_string().contains("as_tenant"), "{err}");
    assert_eq!(runs.load(SeqCst), 0);
    let acme = idem_runtime::as_tenant("acme", call(&idem)).await.unwrap();
    assert_eq!(acme, key().for_tenant("acme").to_string());
    let for_globex = Idem::builder()
        .store(MemoryStore::new())
        .tenant("globex")
        .build()
        .unwrap();
    assert_eq!(
        call(&for_globex).await.unwrap(),
        key().for_tenant("globex").to_string()
    );
    assert_eq!(
        idem_runtime::as_tenant("acme", call(&for_globex))
            .await
            .unwrap(),
        acme,
        "the task's tenant over the runtime's"
    );
}
