//! The executor beyond the conformance rows: backoff bounds on tokio's paused clock, messages,
//! read-only tools, fingerprints, runtime resolution, and what a call reports.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_runtime::{
    CallOutcome, Classify, Error, Failure, Fingerprint, Idem, IdempotencyKey, MemoryStore,
    RetryPolicy, Tool, observe,
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

fn idem() -> Idem {
    Idem::new(MemoryStore::new())
}

/// Runs side effect `t` that fails with `failure` forever; returns when each attempt started.
async fn attempt_times(tool: Tool<'_>, failure: Failure) -> (Vec<Duration>, Failure) {
    let start = Instant::now();
    let times = Mutex::new(Vec::new());
    let result: Result<(), E> = tool
        .side_effect(&[("n", &1u8)], &(), |_| {
            times.lock().unwrap().push(start.elapsed());
            async move { Err(E::Body(failure)) }
        })
        .await;
    let Err(E::Body(last)) = result else {
        panic!("expected the body's error")
    };
    (times.into_inner().unwrap(), last)
}

#[tokio::test(start_paused = true)]
async fn backoff_waits_stay_under_capped_exponential_ceilings() {
    let idem = idem();
    let policy = RetryPolicy::default()
        .with_max_attempts(8)
        .with_initial_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_millis(400))
        .with_max_elapsed(Duration::from_secs(60));
    let (times, last) =
        attempt_times(Tool::new("t").idem(&idem).retry(policy), Failure::Transient).await;
    assert_eq!(
        (times.len(), last),
        (8, Failure::Transient),
        "bounded by attempts"
    );
    let ceilings = [100, 200, 400, 400, 400, 400, 400];
    for (gap, ceiling) in times.windows(2).map(|w| w[1] - w[0]).zip(ceilings) {
        assert!(
            gap <= Duration::from_millis(ceiling),
            "wait {gap:?} over its ceiling {ceiling} ms"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn full_jitter_draws_waits_across_the_whole_range() {
    let policy = RetryPolicy::default()
        .with_initial_delay(Duration::from_secs(1))
        .with_max_delay(Duration::from_secs(1));
    let waits: Vec<Duration> = (0..400)
        .map(|_| {
            policy
                .schedule()
                .next_delay(Failure::Ambiguous, Duration::ZERO)
                .unwrap()
        })
        .collect();
    assert!(waits.iter().all(|w| *w <= Duration::from_secs(1)));
    // Full jitter, not "delay plus jitter": a good share of the waits are under half the ceiling.
    let short = waits
        .iter()
        .filter(|w| **w < Duration::from_millis(500))
        .count();
    assert!(
        (100..=300).contains(&short),
        "{short} of 400 waits under half the ceiling"
    );
}

#[tokio::test(start_paused = true)]
async fn backoff_is_bounded_by_total_time() {
    let idem = idem();
    let policy = RetryPolicy::default()
        .with_max_attempts(1000)
        .with_initial_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_millis(500))
        .with_max_elapsed(Duration::from_secs(3));
    let (times, _) =
        attempt_times(Tool::new("t").idem(&idem).retry(policy), Failure::Ambiguous).await;
    assert!(times.len() < 1000, "the time bound stopped it first");
    assert!(
        *times.last().unwrap() <= Duration::from_secs(3),
        "no attempt starts after the bound: {times:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_exactly_and_counts_as_an_attempt() {
    let idem = idem();
    let policy = RetryPolicy::default()
        .with_max_attempts(3)
        .with_max_elapsed(Duration::from_secs(60));
    let wait = Duration::from_secs(7);
    let (times, last) = attempt_times(
        Tool::new("t").idem(&idem).retry(policy),
        Failure::RetryAfter(wait),
    )
    .await;
    assert_eq!(times, vec![Duration::ZERO, wait, wait * 2]);
    assert_eq!(last, Failure::RetryAfter(wait));
}

#[tokio::test(start_paused = true)]
async fn retry_after_past_the_time_bound_is_not_waited_for() {
    let idem = idem();
    let policy = RetryPolicy::default().with_max_elapsed(Duration::from_secs(10));
    let (times, _) = attempt_times(
        Tool::new("t").idem(&idem).retry(policy),
        Failure::RetryAfter(Duration::from_secs(60)),
    )
    .await;
    assert_eq!(times, vec![Duration::ZERO]);
}

#[tokio::test(start_paused = true)]
async fn defaults_suit_an_interactive_agent() {
    let idem = idem();
    let (times, _) = attempt_times(Tool::new("t").idem(&idem), Failure::Transient).await;
    assert_eq!(times.len(), 4);
    assert!(*times.last().unwrap() < Duration::from_secs(10));
}

#[tokio::test]
async fn key_reuse_names_the_tool_and_the_key_and_says_what_to_do() {
    let idem = idem();
    let call = |amount: u64| {
        Tool::new("payments.charge").idem(&idem).side_effect(
            &[("order", &1u8)],
            &amount,
            |_| async { Ok::<_, E>(()) },
        )
    };
    call(100).await.unwrap();
    let Err(E::Idem(err @ Error::KeyReuse { .. })) = call(200).await else {
        panic!("expected KeyReuse")
    };
    let text = err.to_string();
    let key = IdempotencyKey::derive("payments.charge", &[("order", &1u8)]);
    assert!(
        text.contains("`payments.charge`") && text.contains(key.as_str()),
        "{text}"
    );
    assert!(
        text.contains("not run") && text.contains("add the field"),
        "{text}"
    );
}

#[tokio::test]
async fn arguments_that_do_not_serialize_are_refused_before_the_body() {
    let idem = idem();
    let mut bad = BTreeMap::new();
    bad.insert((1, 2), "a map with non-string keys has no JSON form");
    let mut ran = false;
    let result = Tool::new("t")
        .idem(&idem)
        .side_effect(&[("n", &1u8)], &bad, |_| {
            ran = true;
            async { Ok::<_, E>(()) }
        })
        .await;
    assert!(matches!(result, Err(E::Idem(Error::Arguments { .. }))));
    assert!(!ran);
}

#[tokio::test]
async fn fingerprints_do_not_depend_on_map_order() {
    let a = serde_json::json!({"b": 1, "a": {"y": [1, 2], "x": null}});
    let mut reordered = serde_json::Map::new();
    reordered.insert("a".into(), serde_json::json!({"x": null, "y": [1, 2]}));
    reordered.insert("b".into(), serde_json::json!(1));
    assert_eq!(
        Fingerprint::of(&a).unwrap(),
        Fingerprint::of(&reordered).unwrap()
    );
    assert_ne!(
        Fingerprint::of(&a).unwrap(),
        Fingerprint::of(&serde_json::json!({"b": 2})).unwrap()
    );
}

#[tokio::test(start_paused = true)]
async fn read_only_tools_retry_without_a_key_or_a_store() {
    let mut runs = 0;
    let (result, info) = observe(Tool::new("balance").read_only(|| {
        runs += 1;
        let n = runs;
        async move {
            if n < 3 {
                Err(E::Body(Failure::Transient))
            } else {
                Ok(n * 100)
            }
        }
    }))
    .await;
    assert_eq!(result.unwrap(), 300);
    let info = info.unwrap();
    assert_eq!(
        (info.attempts, info.key, info.replayed, info.outcome),
        (3, None, false, CallOutcome::Completed)
    );
}

#[tokio::test(start_paused = true)]
async fn read_only_tools_stop_on_permanent_failures() {
    let mut runs = 0;
    let result: Result<(), E> = Tool::new("balance")
        .read_only(|| {
            runs += 1;
            async { Err(E::Body(Failure::Permanent)) }
        })
        .await;
    assert!(matches!(result, Err(E::Body(Failure::Permanent))));
    assert_eq!(runs, 1);
}

#[tokio::test]
async fn observe_reports_key_attempts_and_replay() {
    let idem = idem();
    let call = || {
        Tool::new("charge")
            .idem(&idem)
            .side_effect(&[("order", &5u32)], &(), |_| async { Ok::<_, E>(1) })
    };
    let (_, first) = observe(call()).await;
    let first = first.unwrap();
    let key = IdempotencyKey::derive("charge", &[("order", &5u32)]);
    assert_eq!(
        (
            first.tool.as_str(),
            first.key,
            first.attempts,
            first.replayed
        ),
        ("charge", Some(key), 1, false)
    );
    let (_, again) = observe(call()).await;
    let again = again.unwrap();
    assert_eq!(
        (again.attempts, again.replayed, again.outcome),
        (0, true, CallOutcome::Replayed)
    );
}

#[tokio::test]
async fn a_scoped_runtime_is_used_inside_its_scope_only() {
    let a = idem();
    let b = idem();
    let runs = Arc::new(Mutex::new(0));
    let call = || {
        let runs = runs.clone();
        Tool::new("t").side_effect(&[("n", &1u8)], &(), move |_| {
            *runs.lock().unwrap() += 1;
            async { Ok::<_, E>(()) }
        })
    };
    a.scope(call()).await.unwrap();
    a.scope(call()).await.unwrap();
    b.scope(call()).await.unwrap();
    assert_eq!(
        *runs.lock().unwrap(),
        2,
        "a replays its own record; b has none"
    );
}

/// Runs tool `t` (key n = 1) twice with a body returning `outcome`; returns what the two calls
/// got and how often the body ran.
async fn twice<T>(
    outcome: T,
) -> (
    (Result<T, E>, CallOutcome),
    (Result<T, E>, CallOutcome),
    usize,
)
where
    T: Clone + serde::Serialize + serde::de::DeserializeOwned + Send,
{
    let idem = idem();
    let runs = Mutex::new(0);
    let call = || {
        observe(
            Tool::new("t")
                .idem(&idem)
                .side_effect(&[("n", &1u8)], &(), |_| {
                    *runs.lock().unwrap() += 1;
                    let outcome = outcome.clone();
                    async move { Ok::<_, E>(outcome) }
                }),
        )
    };
    let (first, info) = call().await;
    let first = (first, info.unwrap().outcome);
    let (second, info) = call().await;
    let second = (second, info.unwrap().outcome);
    (first, second, runs.into_inner().unwrap())
}

/// S16 (issue 15, finding 5): an outcome that does not serialize (a map with tuple keys) is
/// returned to its caller and recorded as done but not replayable: a repeat is told the effect
/// happened, and the body never runs again. (Before: kept ambiguous, so every repeat ran it.)
#[tokio::test]
async fn s16_an_outcome_that_does_not_serialize_is_returned_once_and_never_run_again() {
    let mut outcome = BTreeMap::new();
    outcome.insert((1, 2), String::from("no JSON form"));
    let ((first, how), (second, again), runs) = twice(outcome.clone()).await;
    assert_eq!(
        first.unwrap(),
        outcome,
        "the effect happened: the caller gets its result"
    );
    assert_eq!(how, CallOutcome::Completed);
    let Err(E::Idem(err @ Error::Unreplayable { .. })) = second else {
        panic!("a repeat is refused as unreplayable, got {second:?}")
    };
    assert!(err.to_string().contains("already ran"), "{err}");
    assert!(err.to_string().contains("does not serialize"), "{err}");
    assert_eq!(again, CallOutcome::Unreplayable);
    assert_eq!(runs, 1, "never run again");
}

/// S16 (issue 15, finding 5): an outcome that serializes but does not read back (an infinite
/// float becomes `null`) is recorded as not replayable too. (Before: stored as `null`, and every
/// replay failed as a corrupt store saying "the tool was not run".)
#[tokio::test]
async fn s16_an_outcome_that_does_not_read_back_is_returned_once_and_never_run_again() {
    let ((first, how), (second, again), runs) = twice(f64::INFINITY).await;
    assert_eq!(first.unwrap(), f64::INFINITY);
    assert_eq!(how, CallOutcome::Completed);
    let Err(E::Idem(err @ Error::Unreplayable { .. })) = second else {
        panic!("a repeat is refused as unreplayable, got {second:?}")
    };
    assert!(
        err.to_string().contains("does not read back as `f64`"),
        "{err}"
    );
    assert_eq!(again, CallOutcome::Unreplayable);
    assert_eq!(runs, 1, "never run again");
}

#[tokio::test]
async fn install_is_once_per_process() {
    // The only test in this binary that installs.
    idem().install().unwrap();
    assert!(idem().install().is_err());
    assert!(Idem::current().is_ok());
}

/// Runs one operation twice (it runs, then replays) and a second operation while the first's
/// key is held, on a memory store that answers at once or (`later`) one that answers every
/// transition later, like a store that does I/O; returns (bodies run, claims, completes).
async fn run_on(later: bool) -> (usize, usize, usize) {
    use idem_runtime::testing::{Intercept, Step};
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering::SeqCst;
    let asked = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let counted = asked.clone();
    let store = Intercept::new(MemoryStore::new(), move |step, _| {
        match step {
            Step::Claim => counted[0].fetch_add(1, SeqCst),
            Step::Complete => counted[1].fetch_add(1, SeqCst),
            _ => 0,
        };
        None
    });
    let idem = Idem::new(if later { store.answer_later() } else { store });
    let runs = AtomicUsize::new(0);
    let charge = |n: u32| {
        let runs = &runs;
        Tool::new("charge")
            .idem(&idem)
            .side_effect(&[("n", &n)], &(), move |_| async move {
                runs.fetch_add(1, SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok::<_, E>(n * 10)
            })
    };
    assert_eq!(charge(1).await.unwrap(), 10);
    assert_eq!(charge(1).await.unwrap(), 10, "a repeat replays");
    // A second caller of a held key waits for the holder's outcome, then replays it.
    let (a, b) = tokio::join!(charge(2), charge(2));
    assert_eq!((a.unwrap(), b.unwrap()), (20, 20));
    (
        runs.load(SeqCst),
        asked[0].load(SeqCst),
        asked[1].load(SeqCst),
    )
}

#[tokio::test(start_paused = true)]
async fn a_store_that_answers_at_once_behaves_as_one_that_answers_later() {
    for later in [false, true] {
        let (runs, claims, completes) = run_on(later).await;
        assert_eq!(runs, 2, "each operation ran once (later: {later})");
        assert_eq!(completes, 2, "one complete per run (later: {later})");
        // 1 + 1 (replay) + 2 (one holder, one waiter), and the waiter's claims while it waits.
        assert!(claims >= 4, "{claims} claims (later: {later})");
    }
}

#[tokio::test(start_paused = true)]
async fn a_waiter_is_woken_by_a_holder_of_this_process_not_at_its_next_poll() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let idem = idem();
    let runs = AtomicUsize::new(0);
    let start = Instant::now();
    let call = |body: Duration| {
        let runs = &runs;
        let idem = &idem;
        async move {
            let result = Tool::new("settle")
                .idem(idem)
                .side_effect(&[("job", &7u8)], &(), move |_| async move {
                    runs.fetch_add(1, SeqCst);
                    tokio::time::sleep(body).await;
                    Ok::<_, E>("settled".to_owned())
                })
                .await;
            (result.unwrap(), start.elapsed())
        }
    };
    // The waiter polls the store after 10 ms (held), then would after 20 more: the holder's end
    // at 13 ms wakes it instead.
    let ((a, holder_done), (b, waiter_done)) = tokio::join!(
        call(Duration::from_millis(13)),
        call(Duration::from_millis(13))
    );
    assert_eq!((a.as_str(), b.as_str()), ("settled", "settled"));
    assert_eq!(runs.load(SeqCst), 1, "the body ran once");
    assert_eq!(holder_done, Duration::from_millis(13));
    assert_eq!(waiter_done, holder_done, "woken at the holder's end");
}

/// Issue 13: the wake-ups belong to a runtime, not to the process. Runtime A and runtime B1/B2
/// use the same key over different stores; A's holder ends at 13 ms, B1's (another runtime over
/// B's store, as another process would be) at 15 ms. A's waiter is woken at A's end; B2's waiter
/// is not woken by A's end (which would make it claim at 13 ms, find B1 still holding, and next
/// poll at 53 ms): it finds B1's outcome at its own poll, at 30 ms (polls at 10, then 10 + 20).
#[tokio::test(start_paused = true)]
async fn an_end_in_one_runtime_does_not_wake_a_waiter_of_another() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let a = idem();
    let b_store = Arc::new(MemoryStore::new());
    let b1 = Idem::new(b_store.clone());
    let b2 = Idem::new(b_store);
    let runs = AtomicUsize::new(0);
    let start = Instant::now();
    let call = |idem: &Idem, body: Duration| {
        let runs = &runs;
        let idem = idem.clone();
        async move {
            let result = Tool::new("settle")
                .idem(&idem)
                .side_effect(&[("job", &7u8)], &(), move |_| async move {
                    runs.fetch_add(1, SeqCst);
                    tokio::time::sleep(body).await;
                    Ok::<_, E>("settled".to_owned())
                })
                .await;
            (result.unwrap(), start.elapsed())
        }
    };
    let ms = Duration::from_millis;
    let ((_, a_holder), (_, a_waiter), (_, b_holder), (_, b_waiter)) = tokio::join!(
        call(&a, ms(13)),
        call(&a, ms(13)),
        call(&b1, ms(15)),
        call(&b2, ms(15)),
    );
    assert_eq!(runs.load(SeqCst), 2, "one body per store");
    assert_eq!((a_holder, b_holder), (ms(13), ms(15)));
    assert_eq!(
        a_waiter, a_holder,
        "woken at its own runtime's holder's end"
    );
    assert_eq!(
        b_waiter,
        ms(30),
        "another runtime's end must not wake it: it finds the outcome at its own poll"
    );
}

/// Issue 16: an operation id in one call from the runtime in force, its error converting into
/// the tool's error type with `?`.
#[tokio::test]
async fn operation_ids_come_from_the_runtime_in_force_in_one_call() {
    async fn plan_step(step: u32) -> Result<idem_runtime::OperationId, E> {
        let id = idem_runtime::operation(&format!("plan-7/step-{step}")).await?;
        Ok(id)
    }
    let idem = idem();
    let first = idem.scope(plan_step(1)).await.unwrap();
    assert_eq!(first, idem.operation("plan-7/step-1").await.unwrap());
    assert_ne!(first, idem.scope(plan_step(2)).await.unwrap());
    let current = idem.scope(async { Idem::current() }).await.unwrap();
    assert_eq!(current.operation("plan-7/step-1").await.unwrap(), first);
}

/// S17 (issue 41, simulation seed 12433): a completion write that keeps failing as the lease
/// nears its end renews the lease under its token and goes on retrying, so the record is
/// completed; before, the retries stopped at the lease's end, the record was left running, and
/// the next caller took it over and ran the body again after its success.
#[tokio::test(start_paused = true)]
async fn s17_a_completion_retried_near_the_lease_end_renews_the_lease_first() {
    use idem_runtime::testing::{Intercept, Step};
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
    let body_running = Arc::new(AtomicBool::new(false));
    let complete_failures = Arc::new(AtomicU32::new(4));
    let renewed_after_body = Arc::new(AtomicU32::new(0));
    let (running, failures, renewed) = (
        body_running.clone(),
        complete_failures.clone(),
        renewed_after_body.clone(),
    );
    // Renewals fail while the body runs (the lease is not extended past its first second);
    // the first four completion writes fail (a store busy for ~300 ms).
    let store = Intercept::new(MemoryStore::new(), move |step, _| match step {
        Step::Renew if running.load(SeqCst) => Some(idem_runtime::StoreError::unavailable("busy")),
        Step::Renew => {
            renewed.fetch_add(1, SeqCst);
            None
        }
        Step::Complete
            if failures
                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                .is_ok() =>
        {
            Some(idem_runtime::StoreError::unavailable("busy"))
        }
        _ => None,
    });
    let idem = Idem::builder()
        .store(store)
        .lease(Duration::from_secs(1))
        .build()
        .unwrap();
    let runs = AtomicU32::new(0);
    let call = || {
        let (runs, running) = (&runs, &body_running);
        observe(Tool::new("charge").idem(&idem).side_effect(
            &[("order", &7u8)],
            &(),
            move |_| async move {
                running.store(true, SeqCst);
                runs.fetch_add(1, SeqCst);
                // Ends 60 ms before the lease would: the retries reach its end.
                tokio::time::sleep(Duration::from_millis(940)).await;
                running.store(false, SeqCst);
                Ok::<_, E>(42u32)
            },
        ))
    };
    let (first, info) = call().await;
    assert_eq!(first.unwrap(), 42);
    assert_eq!(info.unwrap().outcome, CallOutcome::Completed);
    assert!(
        renewed_after_body.load(SeqCst) >= 1,
        "the lease was renewed before the completion was retried past its end"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (again, info) = call().await;
    assert_eq!(again.unwrap(), 42);
    assert_eq!(info.unwrap().outcome, CallOutcome::Replayed);
    assert_eq!(runs.load(SeqCst), 1, "the body ran once");
}

/// S18 (issue 41): tokio's task-locals stay with their task, so a task spawned inside
/// `as_tenant` made its calls for no tenant; spawned with `in_current_scope`, it has the tenant,
/// the operation and the scoped runtime of where it was spawned.
#[tokio::test]
async fn s18_a_task_spawned_with_in_current_scope_calls_for_the_tenant() {
    use idem_runtime::{
        as_tenant, in_current_scope, operation_name, operation_scope, scoped_operation,
    };
    let idem = idem();
    let charge = |idem: Option<Idem>| async move {
        let tool = Tool::new("charge");
        let tool = match &idem {
            Some(idem) => tool.idem(idem),
            None => tool,
        };
        let key = tool
            .side_effect(&[("order", &9u8)], &(), |key| async move {
                Ok::<_, E>(key.to_string())
            })
            .await
            .unwrap();
        (key, operation_name().map(|n| n.to_string()))
    };
    let (wrapped, id, bare) = idem
        .scope(as_tenant(
            "acme",
            operation_scope("plan-42/step-3", async {
                let wrapped = tokio::spawn(in_current_scope(async move {
                    let id = scoped_operation("charge").await.unwrap();
                    (charge(None).await, id)
                }));
                // Bare, with the runtime passed in (else it would be the process's default).
                let bare = tokio::spawn(charge(Some(idem.clone())));
                let (wrapped, id) = wrapped.await.unwrap();
                (wrapped, id, bare.await.unwrap())
            }),
        ))
        .await;
    let key = IdempotencyKey::derive("charge", &[("order", &9u8)]);
    assert_eq!(
        wrapped,
        (
            key.for_tenant("acme").to_string(),
            Some("plan-42/step-3".to_owned())
        ),
        "the spawned task's call is the tenant's, under the operation"
    );
    assert_eq!(
        id,
        as_tenant("acme", idem.operation("plan-42/step-3"))
            .await
            .unwrap(),
        "and the operation's id is the tenant's, from the scoped runtime"
    );
    assert_eq!(
        bare,
        (key.to_string(), None),
        "a task spawned bare has neither"
    );
}
