//! The key a tool derives survives changing a key field from `&str` to `String`: the contract's
//! golden key through the attribute, from owned fields. A binary of its own (beside
//! `macros_keys.rs`, whose `charge` takes `&str`): two tools of one name in one program are
//! refused at their first call (S21).

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

/// The contract's example tool with owned key fields (`String` instead of `&str`), pinned to
/// the same name; returns the key its body saw.
#[side_effect(key(customer_id, purpose, period), name = "charge")]
async fn charge(
    key: &IdempotencyKey,
    customer_id: String,
    purpose: String,
    period: String,
    amount_cents: u64,
) -> Result<String, PayError> {
    let _ = (customer_id, purpose, period, amount_cents);
    Ok(key.to_string())
}

const GOLDEN: &str = "32e00e40-1a53-8058-93c7-e9d1adc8ecaa";

#[tokio::test]
async fn key_survives_changing_a_key_field_from_str_to_string() {
    let idem = Idem::new(MemoryStore::new());
    let key = idem
        .scope(charge(
            "cus_1".into(),
            "subscription".into(),
            "2026-11".into(),
            4200,
        ))
        .await
        .unwrap();
    assert_eq!(key, GOLDEN);
}
