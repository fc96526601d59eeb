//! `previous = "..."`: a tool whose key changed finds an operation made under its previous
//! derivation and is that operation's call (replayed, kept ambiguous, refused as key reuse),
//! so the change never runs an operation twice; an operation that has no record under the
//! previous key runs under the new one, and leaves nothing under the previous key.
//!
//! The old build is played by `Tool::run_keyed` with the old derivation (key `customer_id`, the
//! other arguments `amount_cents` and `purpose` fingerprinted), which derives the same key and
//! fingerprint the attribute did: a second tool of the same name in this binary would be refused
//! (S21). `tests/mixed_versions.rs` runs two real builds against one store.

use std::collections::HashMap;
use std::sync::Mutex;

use idem_runtime::Fingerprinter;
use idemkit::{
    Classify, Error, Failure, Idem, IdempotencyKey, MemoryStore, Records, Tool, side_effect,
};

#[derive(Debug)]
enum PayError {
    Lost,
    Idem(Error),
}

impl Classify for PayError {
    fn classify(&self) -> Failure {
        match self {
            PayError::Lost => Failure::Ambiguous,
            PayError::Idem(_) => Failure::Permanent,
        }
    }
}

impl From<Error> for PayError {
    fn from(e: Error) -> Self {
        PayError::Idem(e)
    }
}

/// Times the new build's body ran, by customer (each test has customers of its own, so tests
/// running at once do not count each other's runs).
static NEW_RUNS: Mutex<Option<HashMap<String, u32>>> = Mutex::new(None);

/// The new build: `purpose` moved into the key; the old key was `customer_id` alone.
#[side_effect(key = "customer_id, purpose", previous = "customer_id", resend = false)]
async fn charge(customer_id: &str, purpose: &str, amount_cents: u64) -> Result<String, PayError> {
    *NEW_RUNS
        .lock()
        .unwrap()
        .get_or_insert_default()
        .entry(customer_id.to_owned())
        .or_default() += 1;
    Ok(format!(
        "new build charged {customer_id} {amount_cents} for {purpose}"
    ))
}

/// The old build's key for `customer_id`.
fn old_key(customer_id: &str) -> IdempotencyKey {
    IdempotencyKey::derive("charge", &[("customer_id", &customer_id)])
}

/// The old build's call: key `customer_id`, the other arguments fingerprinted.
async fn old_charge(
    idem: &Idem,
    customer_id: &str,
    purpose: &str,
    amount_cents: u64,
    result: Result<&str, PayError>,
) -> Result<String, PayError> {
    let mut fingerprint = Fingerprinter::new();
    fingerprint.arg("amount_cents", &amount_cents).unwrap();
    fingerprint.arg("purpose", &purpose).unwrap();
    let fingerprint = fingerprint.finish();
    let result = std::sync::Mutex::new(Some(result.map(str::to_owned)));
    Tool::new("charge")
        .idem(idem)
        .resend(false)
        .run_keyed(old_key(customer_id), fingerprint, |_key| {
            let r = result
                .lock()
                .unwrap()
                .take()
                .expect("the old build runs once");
            async move { r }
        })
        .await
}

/// Times the new build's body ran for `customer`.
fn runs(customer: &str) -> u32 {
    NEW_RUNS
        .lock()
        .unwrap()
        .as_ref()
        .and_then(|runs| runs.get(customer).copied())
        .unwrap_or(0)
}

async fn completed_under_the_old_key_is_replayed(idem: Idem, customer: &str) {
    let old = old_charge(&idem, customer, "rent", 500, Ok("old build charged")).await;
    assert_eq!(old.unwrap(), "old build charged");
    let new = idem.scope(charge(customer, "rent", 500)).await.unwrap();
    assert_eq!(new, "old build charged", "replayed from the previous key");
    assert_eq!(runs(customer), 0, "the new build's body did not run");
}

#[tokio::test]
async fn previous_key_completed_record_of_the_old_derivation_is_replayed_memory() {
    completed_under_the_old_key_is_replayed(Idem::new(MemoryStore::new()), "cus_mem_done").await;
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn previous_key_completed_record_of_the_old_derivation_is_replayed_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = idemkit::SqliteStore::open(dir.path().join("idem.db")).unwrap();
    completed_under_the_old_key_is_replayed(Idem::new(store), "cus_sql_done").await;
}

#[tokio::test]
async fn previous_key_ambiguous_record_of_the_old_derivation_is_not_sent_again() {
    let idem = Idem::new(MemoryStore::new());
    let old = old_charge(&idem, "cus_amb", "rent", 500, Err(PayError::Lost)).await;
    assert!(matches!(old, Err(PayError::Idem(Error::Ambiguous { .. }))));
    let new = idem.scope(charge("cus_amb", "rent", 500)).await;
    assert!(
        matches!(new, Err(PayError::Idem(Error::Ambiguous { key, .. })) if key == old_key("cus_amb")),
        "{new:?}"
    );
    assert_eq!(runs("cus_amb"), 0, "an unknown outcome is not sent again");
}

#[tokio::test]
async fn previous_key_record_of_other_arguments_is_refused_as_the_old_build_would() {
    let idem = Idem::new(MemoryStore::new());
    old_charge(&idem, "cus_reuse", "rent", 500, Ok("old"))
        .await
        .unwrap();
    let new = idem.scope(charge("cus_reuse", "rent", 900)).await;
    assert!(
        matches!(new, Err(PayError::Idem(Error::KeyReuse { key, .. })) if key == old_key("cus_reuse")),
        "{new:?}"
    );
    assert_eq!(runs("cus_reuse"), 0);
}

#[tokio::test]
async fn previous_key_absent_runs_under_the_new_key_and_leaves_no_record_under_the_old() {
    let store = std::sync::Arc::new(MemoryStore::new());
    let idem = Idem::new(store.clone());
    let first = idem.scope(charge("cus_new", "rent", 500)).await.unwrap();
    assert_eq!(runs("cus_new"), 1);
    let again = idem.scope(charge("cus_new", "rent", 500)).await.unwrap();
    assert_eq!(again, first, "replayed under the new key");
    assert_eq!(runs("cus_new"), 1);
    assert!(
        store.get(&old_key("cus_new")).await.unwrap().is_none(),
        "the look-up under the previous key was given back"
    );
    let new_key = IdempotencyKey::derive(
        "charge",
        &[("customer_id", &"cus_new"), ("purpose", &"rent")],
    );
    assert!(store.get(&new_key).await.unwrap().is_some());
    // Another purpose is another operation under the new key.
    idem.scope(charge("cus_new", "deposit", 500)).await.unwrap();
    assert_eq!(runs("cus_new"), 2);
}

#[tokio::test]
async fn lock_records_the_previous_derivation() {
    let lock: serde_json::Value = serde_json::from_str(&idemkit::lock::render()).unwrap();
    let charge = &lock["tools"]["charge"];
    assert_eq!(
        charge["key"],
        serde_json::json!(["customer_id: &str as text", "purpose: &str as text"])
    );
    assert_eq!(
        charge["previous"],
        serde_json::json!(["customer_id: &str as text"])
    );
}

#[test]
fn lock_with_the_old_key_accepts_the_change_bridged_by_previous_as_safe() {
    let mut lock: serde_json::Value = serde_json::from_str(&idemkit::lock::render()).unwrap();
    let charge = lock["tools"]["charge"].as_object_mut().unwrap();
    charge.insert(
        "key".into(),
        serde_json::json!(["customer_id: &str as text"]),
    );
    charge.remove("previous");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemkit.lock");
    std::fs::write(&path, serde_json::to_string_pretty(&lock).unwrap()).unwrap();
    let said = idemkit::lock::compare(&path).unwrap_err().to_string();
    assert!(said.contains("tool `charge`"), "{said}");
    assert!(
        said.contains("`previous` naming the key it had (safe)"),
        "{said}"
    );
    assert!(!said.contains("runs it again"), "{said}");
}

#[tokio::test]
async fn previous_key_running_record_of_the_old_derivation_is_waited_for_then_replayed() {
    let idem = Idem::new(MemoryStore::new());
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let (finish_tx, finish_rx) = tokio::sync::oneshot::channel::<()>();
    let mut started_tx = Some(started_tx);
    let mut finish_rx = Some(finish_rx);
    let mut fingerprint = Fingerprinter::new();
    fingerprint.arg("amount_cents", &500u64).unwrap();
    fingerprint.arg("purpose", &"rent").unwrap();
    // The old build's call, holding the previous key until told to finish.
    let old = Tool::new("charge").idem(&idem).resend(false).run_keyed(
        old_key("cus_running"),
        fingerprint.finish(),
        |_key| {
            let started = started_tx.take().expect("the old build runs once");
            let finish = finish_rx.take().expect("the old build runs once");
            async move {
                started.send(()).unwrap();
                finish.await.unwrap();
                Ok::<_, PayError>("old build charged".to_owned())
            }
        },
    );
    // The new build's call, made while the old one runs; the old one is told to finish after
    // it (whether the new call is then waiting or not yet claiming, it must replay).
    let new = async {
        started_rx.await.unwrap();
        let call = idem.scope(charge("cus_running", "rent", 500));
        let finish = async {
            tokio::task::yield_now().await;
            finish_tx.send(()).unwrap();
        };
        tokio::join!(call, finish).0
    };
    let (old, new) = tokio::join!(old, new);
    assert_eq!(old.unwrap(), "old build charged");
    assert_eq!(
        new.unwrap(),
        "old build charged",
        "waited for, then replayed"
    );
    assert_eq!(runs("cus_running"), 0, "the new build's body did not run");
}
