//! With a recorder installed, one run, one replay and one key reuse each move their counter by
//! exactly one (feature `metrics`).

use std::collections::HashMap;

use idem_runtime::{Classify, Error, Failure, Idem, MemoryStore, Tool};
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

/// Every counter, by name and sorted labels.
fn counters(recorder: &DebuggingRecorder) -> HashMap<String, u64> {
    recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| {
            let DebugValue::Counter(n) = value else {
                return None;
            };
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            Some((format!("{}{{{}}}", key.name(), labels.join(",")), n))
        })
        .collect()
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
    let counters = counters(&recorder);
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
}
