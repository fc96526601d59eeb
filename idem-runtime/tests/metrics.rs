//! With a recorder installed, one run, one replay and one key reuse each move their counter by
//! exactly one (feature `metrics`).

use std::collections::HashMap;
use std::time::Duration;

use idem_runtime::store::{ClaimRequest, LeaseToken};
use idem_runtime::{
    Classify, Error, Failure, Fingerprint, Idem, IdempotencyKey, MemoryStore, Store, Tool,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

#[derive(Debug)]
struct E;
impl Classify for E {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}
impl From<Error> for E {
    fn from(_: Error) -> Self {
        E
    }
}

/// One snapshot (it drains the recorder): every counter's value and every histogram's number
/// of samples, by name and sorted labels.
fn snapshot(recorder: &DebuggingRecorder) -> (HashMap<String, u64>, HashMap<String, usize>) {
    let (mut counters, mut histograms) = (HashMap::new(), HashMap::new());
    for (key, _, _, value) in recorder.snapshotter().snapshot().into_vec() {
        let key = key.key();
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        match value {
            DebugValue::Counter(n) => drop(counters.insert(name, n)),
            DebugValue::Histogram(samples) => drop(histograms.insert(name, samples.len())),
            DebugValue::Gauge(_) => {}
        }
    }
    (counters, histograms)
}

#[test]
fn a_run_a_replay_and_a_key_reuse_each_count_once() {
    let recorder = DebuggingRecorder::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let idem = Idem::new(MemoryStore::new());
            let charge = |cents: u64| {
                Tool::new("charge").idem(&idem).side_effect(
                    &[("order", &7u32)],
                    &cents,
                    |_key| async { Ok::<_, E>(42u32) },
                )
            };
            assert_eq!(charge(4200).await.unwrap(), 42); // runs
            assert_eq!(charge(4200).await.unwrap(), 42); // replays
            assert!(charge(9900).await.is_err()); // key reuse
        })
    });
    let (counters, samples) = snapshot(&recorder);
    let calls = |outcome: &str| {
        counters
            .get(&format!(
                "idemkit_calls_total{{kind=side_effect,outcome={outcome},tool=charge}}"
            ))
            .copied()
    };
    assert_eq!(calls("completed"), Some(1), "{counters:?}");
    assert_eq!(calls("replayed"), Some(1), "{counters:?}");
    assert_eq!(calls("key_reuse"), Some(1), "{counters:?}");
    assert_eq!(
        counters.get("idemkit_attempts_total{kind=side_effect,tool=charge}"),
        Some(&1),
        "{counters:?}"
    );
    assert_eq!(counters.len(), 4, "nothing else counted: {counters:?}");
    // The store's answers, timed by transition: three claims (run, replay, key reuse), one
    // complete, nothing else (the memory store answers at once; each answer is timed once).
    assert_eq!(
        samples.get("idemkit_store_seconds{op=claim}"),
        Some(&3),
        "{samples:?}"
    );
    assert_eq!(
        samples.get("idemkit_store_seconds{op=complete}"),
        Some(&1),
        "{samples:?}"
    );
    assert_eq!(samples.len(), 2, "{samples:?}");
}

/// A store that answers later (boxed, as one that does I/O): its transitions are timed where
/// they are awaited, once each.
#[test]
fn a_store_that_answers_later_is_timed_once_per_transition() {
    let recorder = DebuggingRecorder::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let store = idem_runtime::testing::Intercept::new(MemoryStore::new(), |_, _| None);
            let idem = Idem::new(store.answer_later());
            let charge = Tool::new("charge").idem(&idem).side_effect(
                &[("order", &7u32)],
                &4200u64,
                |_key| async { Ok::<_, E>(42u32) },
            );
            assert_eq!(charge.await.unwrap(), 42);
        })
    });
    let (_, samples) = snapshot(&recorder);
    assert_eq!(
        samples.get("idemkit_store_seconds{op=claim}"),
        Some(&1),
        "{samples:?}"
    );
    assert_eq!(
        samples.get("idemkit_store_seconds{op=complete}"),
        Some(&1),
        "{samples:?}"
    );
}

/// A takeover moves `idemkit_takeovers_total` by exactly one, labelled with what was taken
/// over; a call that makes a new record, or replays, moves it not at all. A dead holder's
/// record is taken over once its lease ends (S8); a record kept as ambiguous by one call is
/// taken over by the next (S6), and the one after replays.
#[test]
fn a_takeover_counts_once_by_what_it_took_over() {
    #[derive(Debug)]
    struct Unsure;
    impl Classify for Unsure {
        fn classify(&self) -> Failure {
            Failure::Ambiguous
        }
    }
    impl From<Error> for Unsure {
        fn from(_: Error) -> Self {
            Unsure
        }
    }
    let recorder = DebuggingRecorder::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let lease = Duration::from_secs(30);
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let idem = Idem::builder()
                .store(MemoryStore::new())
                .lease(lease)
                .build()
                .unwrap();
            let charge = |order: u32, ok: bool| {
                Tool::new("charge").idem(&idem).max_attempts(1).side_effect(
                    &[("order", &order)],
                    &4200u64,
                    move |_key| async move { if ok { Ok(42u32) } else { Err(Unsure) } },
                )
            };
            // A holder that claimed order 8 and died.
            let dead = ClaimRequest::new(
                IdempotencyKey::derive("charge", &[("order", &8u32)]),
                "charge",
                Fingerprint::of(&4200u64).unwrap(),
                LeaseToken::new(),
                lease,
                Duration::from_secs(24 * 3600),
            );
            idem.store().claim(&dead).await.unwrap();
            tokio::time::advance(lease).await;
            assert_eq!(charge(8, true).await.unwrap(), 42); // takes over the dead holder's

            assert!(charge(7, false).await.is_err()); // a new record, kept as ambiguous
            assert_eq!(charge(7, true).await.unwrap(), 42); // takes it over
            assert_eq!(charge(7, true).await.unwrap(), 42); // replays
        })
    });
    let (counters, _) = snapshot(&recorder);
    let mut takeovers: Vec<_> = counters
        .iter()
        .filter(|(name, _)| name.starts_with("idemkit_takeovers_total"))
        .map(|(name, n)| (name.as_str(), *n))
        .collect();
    takeovers.sort();
    assert_eq!(
        takeovers,
        [
            ("idemkit_takeovers_total{from=ambiguous,tool=charge}", 1),
            (
                "idemkit_takeovers_total{from=expired_holder,tool=charge}",
                1
            ),
        ],
        "{counters:?}"
    );
}

/// S19: each answer of a verify function counts once under `idemkit_verifications_total`, and
/// a call settled as applied ends with the outcome `verified`.
#[test]
fn each_verification_counts_once_by_its_answer() {
    #[derive(Debug)]
    struct Lost;
    impl Classify for Lost {
        fn classify(&self) -> Failure {
            Failure::Ambiguous
        }
    }
    impl From<Error> for Lost {
        fn from(_: Error) -> Self {
            Lost
        }
    }
    let recorder = DebuggingRecorder::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let idem = Idem::new(MemoryStore::new());
            // The reply is lost on the first attempt, the second answers.
            let send = |order: u32, answer: idem_runtime::Verified<u32>| {
                let mut attempts = 0;
                Tool::new("send")
                    .idem(&idem)
                    .resend(false)
                    .verify(move |_key| {
                        let answer = answer.clone();
                        async move { Ok(answer) }
                    })
                    .side_effect(&[("order", &order)], &(), move |_key| {
                        attempts += 1;
                        let first = attempts == 1;
                        async move { if first { Err(Lost) } else { Ok(1u32) } }
                    })
            };
            assert_eq!(
                send(1, idem_runtime::Verified::Applied(9)).await.unwrap(),
                9
            );
            assert_eq!(
                send(2, idem_runtime::Verified::NotApplied).await.unwrap(),
                1
            );
            assert!(send(3, idem_runtime::Verified::Unknown).await.is_err());
        })
    });
    let (counters, _) = snapshot(&recorder);
    let mut verifications: Vec<_> = counters
        .iter()
        .filter(|(name, _)| name.starts_with("idemkit_verifications_total"))
        .map(|(name, n)| (name.as_str(), *n))
        .collect();
    verifications.sort();
    assert_eq!(
        verifications,
        [
            ("idemkit_verifications_total{answer=applied,tool=send}", 1),
            (
                "idemkit_verifications_total{answer=not_applied,tool=send}",
                1
            ),
            ("idemkit_verifications_total{answer=unknown,tool=send}", 1),
        ],
        "{counters:?}"
    );
    assert_eq!(
        counters.get("idemkit_calls_total{kind=side_effect,outcome=verified,tool=send}"),
        Some(&1),
        "{counters:?}"
    );
}

/// S34: each settle pass sets `idemkit_oldest_unknown_seconds` to how long the oldest record it
/// left unknown has waited since its operation was first made; 0 once none is left.
#[test]
fn s34_a_settle_pass_sets_the_oldest_unknown_gauge() {
    use idem_runtime::settle::Pass;
    use idem_runtime::store::{ClaimRequest, LeaseToken};
    use idem_runtime::{Fingerprint, IdempotencyKey, Settler, Store};
    use std::sync::Arc;
    use std::time::Duration;

    let gauge = |recorder: &DebuggingRecorder| {
        recorder
            .snapshotter()
            .snapshot()
            .into_vec()
            .into_iter()
            .find_map(|(key, _, _, value)| match value {
                DebugValue::Gauge(v) if key.key().name() == "idemkit_oldest_unknown_seconds" => {
                    Some(v.into_inner())
                }
                _ => None,
            })
    };
    let recorder = DebuggingRecorder::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let store = Arc::new(MemoryStore::new());
            let key = IdempotencyKey::derive("sms", &[("to", &"+1555")]);
            let token = LeaseToken::new();
            let hour = Duration::from_secs(3600);
            let req = ClaimRequest::new(key, "sms", Fingerprint([1; 32]), token, hour, hour);
            store.claim(&req).await.unwrap();
            let marked = store
                .mark_ambiguous(key, token, "lost", hour)
                .await
                .unwrap();
            assert_eq!(marked, idem_runtime::store::Written::Applied);
            tokio::time::sleep(Duration::from_millis(1100)).await;
            Settler::new(store.clone())
                .run_once(&Pass::new())
                .await
                .unwrap();
            let waited = gauge(&recorder).expect("set by the pass");
            assert!((1.0..60.0).contains(&waited), "{waited}");
            idem_runtime::Records::forget(&*store, &key, false)
                .await
                .unwrap();
            Settler::new(store.clone())
                .run_once(&Pass::new())
                .await
                .unwrap();
            assert_eq!(gauge(&recorder), Some(0.0), "none left");
        })
    });
}
