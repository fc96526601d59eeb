//! Keys derived through the attributes (docs/protocol.md, "Keys: encoding v1"). The same tool with owned
//! key fields, pinned to the same name, is in `macros_keys_owned.rs`: a binary of its own, since
//! two tools of one name in one program are refused at their first call (S21; the registry's
//! duplicate-name report is tested in `tool_names.rs`).

use idemkit::{Classify, Failure, Idem, IdempotencyKey, MemoryStore, side_effect};

#[derive(Debug)]
struct PayError;

impl Classify for PayError {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}

impl From<idemkit::Error> for PayError {
    fn from(_: idemkit::Error) -> Self {
        PayError
    }
}

/// The contract's example tool; returns the key its body saw.
#[side_effect(key = "customer_id, purpose, period")]
async fn charge(
    key: &IdempotencyKey,
    customer_id: &str,
    purpose: &str,
    period: &str,
    amount_cents: u64,
) -> Result<String, PayError> {
    let _ = (customer_id, purpose, period, amount_cents);
    Ok(key.to_string())
}

const GOLDEN: &str = "32e00e40-1a53-8058-93c7-e9d1adc8ecaa";

#[tokio::test]
async fn golden_key_the_body_sees_for_charge_cus_1_subscription_2026_11() {
    let idem = Idem::new(MemoryStore::new());
    let key = idem
        .scope(charge("cus_1", "subscription", "2026-11", 4200))
        .await
        .unwrap();
    assert_eq!(key, GOLDEN);
}

#[tokio::test]
async fn key_changes_with_each_key_field_and_not_with_other_arguments() {
    let idem = Idem::new(MemoryStore::new());
    let other_period = idem
        .scope(charge("cus_1", "subscription", "2026-12", 4200))
        .await
        .unwrap();
    assert_ne!(other_period, GOLDEN);
    // A different amount under the same key fields is the same key (and refused as key reuse
    // once the first call has completed, see macros_protocol::s3).
    let fresh = Idem::new(MemoryStore::new());
    let other_amount = fresh
        .scope(charge("cus_1", "subscription", "2026-11", 1))
        .await
        .unwrap();
    assert_eq!(other_amount, GOLDEN);
}
