// Issue 16: expansions compile without warnings, whatever the body's shape: one expression
// (the README's), a block of statements, a `?`, an early `return`, an injected key left unused
// by a read. A new warning in any expansion fails this case.
#![deny(warnings)]

use idemkit::{Idem, IdempotencyKey, MemoryStore, read_only, side_effect};

#[derive(Debug)]
struct PayError;
impl idemkit::Classify for PayError {
    fn classify(&self) -> idemkit::Failure {
        idemkit::Failure::Permanent
    }
}
impl From<idemkit::Error> for PayError {
    fn from(_: idemkit::Error) -> Self {
        PayError
    }
}

async fn provider(key: &str, cents: u64) -> Result<String, PayError> {
    Ok(format!("{key}:{cents}"))
}

#[side_effect(key = "customer_id")]
async fn one_expression(key: &IdempotencyKey, customer_id: &str, cents: u64) -> Result<String, PayError> {
    provider(key.as_str(), cents).await
}

#[side_effect(key = "customer_id")]
async fn statements(customer_id: &str, cents: u64) -> Result<u64, PayError> {
    if cents == 0 {
        return Ok(0);
    }
    let doubled = cents.checked_mul(2).ok_or(PayError)?;
    Ok(doubled)
}

#[read_only]
async fn balance(customer_id: &str) -> Result<u64, PayError> {
    Ok(customer_id.len() as u64)
}

fn main() {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(Idem::new(MemoryStore::new()).scope(async {
            let receipt = one_expression("cus_1", 4200).await.unwrap();
            assert!(receipt.ends_with(":4200"));
            assert_eq!(statements("cus_1", 21).await.unwrap(), 42);
            assert_eq!(balance("cus_1").await.unwrap(), 5);
        }));
}
