//! Keys derived through the attributes (DESIGN.md "Keys", encoding v1) and the registry's
//! duplicate-name check. This test binary deliberately defines two tools named `charge`.

use idemkit::{Classify, Failure, Idem, IdempotencyKey, MemoryStore, ToolKind, side_effect};

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

mod owned {
    use super::*;

    /// The same tool with owned key fields (`String` instead of `&str`), pinned to the same name.
    #[side_effect(key(customer_id, purpose, period), name = "charge")]
    pub async fn charge(
        key: &IdempotencyKey,
        customer_id: String,
        purpose: String,
        period: String,
        amount_cents: u64,
    ) -> Result<String, PayError> {
        let _ = (customer_id, purpose, period, amount_cents);
        Ok(key.to_string())
    }
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
async fn key_survives_changing_a_key_field_from_str_to_string() {
    let idem = Idem::new(MemoryStore::new());
    let key = idem
        .scope(owned::charge(
            "cus_1".into(),
            "subscription".into(),
            "2026-11".into(),
            4200,
        ))
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

#[test]
fn registry_reports_two_tools_with_the_same_name() {
    let named_charge: Vec<_> = idemkit::tools().filter(|t| t.name == "charge").collect();
    assert_eq!(named_charge.len(), 2);
    assert!(named_charge.iter().all(|t| t.kind == ToolKind::SideEffect));
    assert!(
        named_charge
            .iter()
            .all(|t| t.key_fields == ["customer_id", "purpose", "period"])
    );
    let modules: Vec<_> = named_charge.iter().map(|t| t.module_path).collect();
    assert!(
        modules.contains(&"macros_keys") && modules.contains(&"macros_keys::owned"),
        "{modules:?}"
    );

    let err = idemkit::check_unique_tool_names().expect_err("two tools are named `charge`");
    assert_eq!(err.duplicates.len(), 1);
    assert_eq!(err.duplicates[0].0, "charge");
    assert_eq!(err.duplicates[0].1.len(), 2);
    let message = err.to_string();
    assert!(
        message.contains("`charge`") && message.contains("macros_keys.rs"),
        "{message}"
    );
}
