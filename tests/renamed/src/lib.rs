//! Proves that the attributes' expansions name no crate a user may rename or never name: here
//! `idemkit` is `idk`, `serde` is `my_serde`, and `uuid`, `serde_json`, `inventory` and `sha2`
//! are not dependencies at all. If an expansion reached any of them by its own name, this crate
//! would not compile.

use idk::{Classify, Failure, IdempotencyKey, read_only, side_effect};
use my_serde::{Deserialize, Serialize};

/// The error of the tools below.
#[derive(Debug, PartialEq)]
pub enum PayError {
    /// The runtime refused.
    Idem(String),
}

impl Classify for PayError {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}

impl From<idk::Error> for PayError {
    fn from(e: idk::Error) -> Self {
        PayError::Idem(e.to_string())
    }
}

/// What `charge` returns: the key its body saw.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(crate = "my_serde")]
pub struct Receipt {
    /// The key.
    pub key: String,
    /// The amount.
    pub amount_cents: u64,
}

/// A fingerprinted argument whose `Serialize` comes from the renamed serde.
#[derive(Debug, Clone, Serialize)]
#[serde(crate = "my_serde")]
pub struct Memo {
    /// Free text.
    pub text: String,
}

/// Charges once per customer, purpose and period.
#[side_effect(key = "customer_id, purpose, period", crate = ::idk)]
pub async fn charge(
    key: &IdempotencyKey,
    customer_id: &str,
    purpose: &str,
    period: &str,
    amount_cents: u64,
    memo: Memo,
) -> Result<Receipt, PayError> {
    let _ = (customer_id, purpose, period, memo);
    Ok(Receipt {
        key: key.to_string(),
        amount_cents,
    })
}

/// A balance, read freely.
#[read_only(crate = idk)]
pub async fn balance(customer_id: &str) -> Result<u64, PayError> {
    let _ = customer_id;
    Ok(100)
}

#[cfg(test)]
mod tests {
    use super::*;
    use idk::{Idem, MemoryStore, ToolKind};

    #[tokio::test]
    async fn renamed_dependencies_still_expand_and_key_the_same() {
        let idem = Idem::new(MemoryStore::new());
        let memo = Memo {
            text: "monthly".into(),
        };
        let receipt = idem
            .scope(charge("cus_1", "subscription", "2026-11", 4200, memo))
            .await
            .unwrap();
        assert_eq!(receipt.key, "32e00e40-1a53-8058-93c7-e9d1adc8ecaa");
        assert_eq!(balance("cus_1").await, Ok(100));
    }

    #[test]
    fn renamed_dependencies_still_register_the_tools() {
        let charge = idk::tools().find(|t| t.name == "charge").unwrap();
        assert_eq!(charge.kind, ToolKind::SideEffect);
        assert_eq!(charge.module_path, "idemkit_renamed_deps");
        assert!(idk::tools().any(|t| t.name == "balance" && t.kind == ToolKind::ReadOnly));
    }
}
