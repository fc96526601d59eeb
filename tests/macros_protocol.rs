//! The executor protocol (docs/protocol.md, S1–S8) driven through the attributes, counting how often the
//! body ran. Each test has its own store (`Idem::scope`), and tokio's clock is paused, so backoff
//! sleeps and leases pass instantly.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemkit::store::RecordState;
use idemkit::{
    Classify, Failure, Idem, IdempotencyKey, MemoryStore, Records, ToolKind, observe, read_only,
    side_effect,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, PartialEq)]
enum PayError {
    Declined,
    Timeout,
    Unavailable,
    Idem(String),
}

impl Classify for PayError {
    fn classify(&self) -> Failure {
        match self {
            PayError::Declined | PayError::Idem(_) => Failure::Permanent,
            PayError::Timeout => Failure::Ambiguous,
            PayError::Unavailable => Failure::Transient,
        }
    }
}

impl From<idemkit::Error> for PayError {
    fn from(e: idemkit::Error) -> Self {
        PayError::Idem(match e {
            idemkit::Error::KeyReuse { .. } => "key_reuse".to_owned(),
            idemkit::Error::InFlight { .. } => "in_flight".to_owned(),
            other => other.to_string(),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    amount_cents: u64,
    /// Which run of the body made it: a replay returns the first run's number.
    run: u32,
}

/// A fake payment provider that counts how often the tool's body ran and fails as scripted.
#[derive(Default)]
struct Provider {
    runs: AtomicU32,
    script: Mutex<VecDeque<PayError>>,
    keys: Mutex<Vec<IdempotencyKey>>,
    /// How long each run takes before it answers.
    latency: Option<Duration>,
}

impl Provider {
    fn failing(script: impl IntoIterator<Item = PayError>) -> Self {
        Provider {
            script: Mutex::new(script.into_iter().collect()),
            ..Self::default()
        }
    }

    fn runs(&self) -> u32 {
        self.runs.load(Ordering::SeqCst)
    }

    fn keys(&self) -> Vec<IdempotencyKey> {
        self.keys.lock().unwrap().clone()
    }

    /// Charges a customer once per purpose and period.
    #[side_effect(
        key = "customer_id, purpose, period",
        name = "test.charge",
        max_attempts = 4,
        lease = "5s"
    )]
    async fn charge(
        &self,
        key: &IdempotencyKey,
        customer_id: &str,
        purpose: &str,
        period: &str,
        amount_cents: u64,
    ) -> Result<Receipt, PayError> {
        let _ = (customer_id, purpose, period);
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        self.keys.lock().unwrap().push(*key);
        if let Some(latency) = self.latency {
            tokio::time::sleep(latency).await;
        }
        let scripted = self.script.lock().unwrap().pop_front();
        match scripted {
            Some(err) => Err(err),
            None => Ok(Receipt { amount_cents, run }),
        }
    }

    /// Looks a balance up; retried freely.
    #[read_only(name = "test.balance", max_attempts = 3)]
    async fn balance(&self, customer_id: &str) -> Result<u64, PayError> {
        let _ = customer_id;
        self.runs.fetch_add(1, Ordering::SeqCst);
        let scripted = self.script.lock().unwrap().pop_front();
        match scripted {
            Some(err) => Err(err),
            None => Ok(100),
        }
    }
}

fn runtime() -> Idem {
    Idem::new(MemoryStore::new())
}

#[tokio::test(start_paused = true)]
async fn s1_first_call_runs_the_body_once_and_records_it() {
    let store = Arc::new(MemoryStore::new());
    let idem = Idem::new(store.clone());
    let p = Provider::default();
    let (receipt, info) = idem
        .scope(observe(p.charge("cus_1", "subscription", "2026-11", 4200)))
        .await;
    assert_eq!(
        receipt,
        Ok(Receipt {
            amount_cents: 4200,
            run: 1
        })
    );
    assert_eq!(p.runs(), 1);
    let key = info.unwrap().key.unwrap();
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(
        matches!(record.state, RecordState::Completed { .. }),
        "{record:?}"
    );
    assert_eq!(record.tool, "test.charge");
}

#[tokio::test(start_paused = true)]
async fn s2_same_key_and_arguments_replays_without_running() {
    let p = Provider::default();
    runtime()
        .scope(async {
            let first = p
                .charge("cus_1", "subscription", "2026-11", 4200)
                .await
                .unwrap();
            let (again, info) = observe(p.charge("cus_1", "subscription", "2026-11", 4200)).await;
            assert_eq!(again.unwrap(), first);
            assert!(info.unwrap().replayed);
        })
        .await;
    assert_eq!(p.runs(), 1);
}

#[tokio::test(start_paused = true)]
async fn s3_same_key_other_arguments_is_key_reuse_and_does_not_run() {
    let p = Provider::default();
    runtime()
        .scope(async {
            p.charge("cus_1", "subscription", "2026-11", 4200)
                .await
                .unwrap();
            let reused = p.charge("cus_1", "subscription", "2026-11", 9900).await;
            assert_eq!(reused, Err(PayError::Idem("key_reuse".to_owned())));
        })
        .await;
    assert_eq!(p.runs(), 1);
}

#[tokio::test(start_paused = true)]
async fn s4_retryable_failures_retry_with_the_identical_key() {
    let p = Provider::failing([PayError::Timeout, PayError::Unavailable]);
    let receipt = runtime()
        .scope(p.charge("cus_1", "subscription", "2026-11", 4200))
        .await;
    assert_eq!(
        receipt,
        Ok(Receipt {
            amount_cents: 4200,
            run: 3
        })
    );
    assert_eq!(p.runs(), 3);
    let keys = p.keys();
    assert!(
        keys.iter().all(|k| *k == keys[0]),
        "every attempt saw the same key: {keys:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn s5_permanent_failure_is_not_retried_and_is_released() {
    let p = Provider::failing([PayError::Declined]);
    runtime()
        .scope(async {
            assert_eq!(
                p.charge("cus_1", "subscription", "2026-11", 4200).await,
                Err(PayError::Declined)
            );
            assert_eq!(p.runs(), 1, "a permanent failure is not retried");
            // Released: a later call may run again.
            assert_eq!(
                p.charge("cus_1", "subscription", "2026-11", 4200).await,
                Ok(Receipt {
                    amount_cents: 4200,
                    run: 2
                })
            );
        })
        .await;
    assert_eq!(p.runs(), 2);
}

#[tokio::test(start_paused = true)]
async fn s6_exhausted_transient_is_released() {
    let store = Arc::new(MemoryStore::new());
    let idem = Idem::new(store.clone());
    let p = Provider::failing((0..4).map(|_| PayError::Unavailable));
    let (result, info) = idem
        .scope(observe(p.charge("cus_1", "subscription", "2026-11", 4200)))
        .await;
    assert_eq!(result, Err(PayError::Unavailable));
    assert_eq!(p.runs(), 4, "max_attempts = 4");
    let key = info.unwrap().key.unwrap();
    assert_eq!(store.get(&key).await.unwrap(), None, "released");
}

#[tokio::test(start_paused = true)]
async fn s6_exhausted_ambiguous_is_kept_and_the_next_call_reuses_the_key() {
    let store = Arc::new(MemoryStore::new());
    let idem = Idem::new(store.clone());
    let p = Provider::failing((0..4).map(|_| PayError::Timeout));
    let (result, info) = idem
        .scope(observe(p.charge("cus_1", "subscription", "2026-11", 4200)))
        .await;
    assert_eq!(result, Err(PayError::Timeout));
    assert_eq!(p.runs(), 4);
    let key = info.unwrap().key.unwrap();
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(
        matches!(record.state, RecordState::Ambiguous { .. }),
        "kept for the operator: {record:?}"
    );
    let again = idem
        .scope(p.charge("cus_1", "subscription", "2026-11", 4200))
        .await;
    assert_eq!(
        again,
        Ok(Receipt {
            amount_cents: 4200,
            run: 5
        })
    );
    assert!(
        p.keys().iter().all(|k| *k == key),
        "the next call ran under the same key"
    );
}

#[tokio::test(start_paused = true)]
async fn s7_concurrent_calls_of_one_key_run_the_body_once() {
    let p = Provider {
        latency: Some(Duration::from_secs(1)),
        ..Provider::default()
    };
    let (a, b, c) = runtime()
        .scope(async {
            tokio::join!(
                p.charge("cus_1", "subscription", "2026-11", 4200),
                p.charge("cus_1", "subscription", "2026-11", 4200),
                p.charge("cus_1", "subscription", "2026-11", 4200),
            )
        })
        .await;
    assert_eq!(p.runs(), 1);
    let first = Receipt {
        amount_cents: 4200,
        run: 1,
    };
    assert_eq!((a, b, c), (Ok(first.clone()), Ok(first.clone()), Ok(first)));
}

#[tokio::test(start_paused = true)]
async fn s8_a_call_that_died_is_taken_over_after_its_lease_with_the_same_key() {
    let p = Provider {
        latency: Some(Duration::from_secs(60)),
        ..Provider::default()
    };
    let idem = runtime();
    // The "process" dies mid-call: its future is dropped while the body runs.
    let died = idem
        .scope(tokio::time::timeout(
            Duration::from_secs(1),
            p.charge("cus_1", "subscription", "2026-11", 4200),
        ))
        .await;
    assert!(died.is_err(), "the first call did not finish");
    assert_eq!(p.runs(), 1);
    // Within the lease (`lease = "5s"`) a second call waits; after it, it takes over.
    let p2 = Provider {
        keys: Mutex::new(Vec::new()),
        ..Provider::default()
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    let receipt = idem
        .scope(p2.charge("cus_1", "subscription", "2026-11", 4200))
        .await;
    assert_eq!(
        receipt,
        Ok(Receipt {
            amount_cents: 4200,
            run: 1
        })
    );
    assert_eq!(p2.runs(), 1);
    assert_eq!(p.keys(), p2.keys(), "the takeover ran with the same key");
}

#[tokio::test(start_paused = true)]
async fn read_only_tools_retry_by_classification_without_a_store() {
    let p = Provider::failing([PayError::Unavailable, PayError::Timeout]);
    // No runtime at all: read-only tools need none.
    assert_eq!(p.balance("cus_1").await, Ok(100));
    assert_eq!(p.runs(), 3);
    let p = Provider::failing([PayError::Declined]);
    assert_eq!(p.balance("cus_1").await, Err(PayError::Declined));
    assert_eq!(p.runs(), 1);
    let p = Provider::failing((0..5).map(|_| PayError::Unavailable));
    assert_eq!(p.balance("cus_1").await, Err(PayError::Unavailable));
    assert_eq!(p.runs(), 3, "max_attempts = 3");
}

#[test]
fn registry_lists_every_annotated_tool() {
    let charge = idemkit::tools()
        .find(|t| t.name == "test.charge")
        .expect("test.charge is registered");
    assert_eq!(charge.kind, ToolKind::SideEffect);
    assert_eq!(charge.key_fields, ["customer_id", "purpose", "period"]);
    assert_eq!(
        charge.description,
        "Charges a customer once per purpose and period."
    );
    assert_eq!(charge.module_path, "macros_protocol");
    assert!(
        charge.file.ends_with("macros_protocol.rs"),
        "{}",
        charge.file
    );
    let balance = idemkit::tools()
        .find(|t| t.name == "test.balance")
        .expect("test.balance is registered");
    assert_eq!(balance.kind, ToolKind::ReadOnly);
    assert!(balance.key_fields.is_empty());
    assert_eq!(balance.description, "Looks a balance up; retried freely.");
    idemkit::check_unique_tool_names().unwrap();
}

#[test]
fn wrapped_calls_are_send_so_agents_can_spawn_them() {
    fn assert_send<F: std::future::Future + Send>(_: &F) {}
    let p = Provider::default();
    let charge = p.charge("cus_1", "subscription", "2026-11", 4200);
    assert_send(&charge);
    let balance = p.balance("cus_1");
    assert_send(&balance);
}

/// Counts the attempts of `memo` below; each attempt fails until the third.
static MEMO_ATTEMPTS: AtomicU32 = AtomicU32::new(0);

/// Takes `note` by value and names it only inside a format string, and `tag` not at all: each
/// attempt gets `note` anew (the expansion hands an argument to each attempt when the body can
/// refer to it, also from inside a literal), and `tag` still counts in the fingerprint.
#[side_effect(key = "order_id")]
async fn memo(order_id: u64, note: String, tag: String) -> Result<String, PayError> {
    if MEMO_ATTEMPTS.fetch_add(1, Ordering::SeqCst) < 2 {
        return Err(PayError::Unavailable);
    }
    Ok(format!("{order_id}: {note}"))
}

#[tokio::test(start_paused = true)]
async fn every_attempt_gets_its_arguments_anew_also_those_only_named_in_a_format_string() {
    let idem = runtime();
    let first = idem
        .scope(memo(7, "hello".to_owned(), "a".to_owned()))
        .await;
    assert_eq!(first, Ok("7: hello".to_owned()));
    assert_eq!(MEMO_ATTEMPTS.load(Ordering::SeqCst), 3, "two retries ran");
    // `tag` is not used by the body, yet another value of it is another operation.
    let other = idem
        .scope(memo(7, "hello".to_owned(), "b".to_owned()))
        .await;
    assert_eq!(other, Err(PayError::Idem("key_reuse".to_owned())));
    assert_eq!(
        MEMO_ATTEMPTS.load(Ordering::SeqCst),
        3,
        "the body did not run again"
    );
}

#[derive(Debug, Clone, Serialize)]
struct Line {
    sku: String,
    qty: u32,
}

/// Parameters declared out of name order, of every kind the fingerprint streams or takes
/// through a JSON value.
#[side_effect(key = "order_id")]
async fn ship(
    zone: &str,
    order_id: u64,
    lines: &[Line],
    express: bool,
    weight_kg: f64,
    r#type: Option<&str>,
    amount: i64,
) -> Result<u32, PayError> {
    let _ = (zone, lines, express, weight_kg, r#type, amount);
    Ok(1)
}

/// The attributes hash the arguments as they come, sorted by name at expansion: the record
/// holds the fingerprint of the arguments' canonical JSON, as before the streaming (stored records
/// made before it must still match).
#[tokio::test(start_paused = true)]
async fn a_generated_calls_fingerprint_is_the_fingerprinters_whatever_the_parameter_order() {
    let store = Arc::new(MemoryStore::new());
    let idem = Idem::new(store.clone());
    let lines = vec![Line {
        sku: "b\"ox".to_owned(),
        qty: 2,
    }];
    let (shipped, info) = idem
        .scope(observe(ship(
            "eu-west",
            9,
            &lines,
            true,
            -0.0,
            Some("parcel"),
            -5,
        )))
        .await;
    assert_eq!(shipped, Ok(1));
    let record = store
        .get(&info.unwrap().key.unwrap())
        .await
        .unwrap()
        .unwrap();

    // The canonical form of the arguments: one JSON object, keys sorted (`Fingerprint::of`
    // sorts them whatever order they are written in).
    let by_hand = idemkit::Fingerprint::of(&serde_json::json!({
        "zone": "eu-west",
        "lines": lines,
        "express": true,
        "weight_kg": 0.0,
        "type": "parcel",
        "amount": -5,
    }))
    .unwrap();
    assert_eq!(record.fingerprint, by_hand);
}
