// Stacked with another attribute macro, in either order.
#![deny(warnings)] // A new warning in an expansion fails the case (issue 16).
use idemkit::{Idem, IdempotencyKey, MemoryStore, read_only, side_effect};

#[derive(Debug)]
struct PayError(String);
impl idemkit::Classify for PayError {
    fn classify(&self) -> idemkit::Failure {
        idemkit::Failure::Permanent
    }
}
impl From<idemkit::Error> for PayError {
    fn from(e: idemkit::Error) -> Self {
        PayError(e.to_string())
    }
}

fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(fut)
}

/// Under `#[tracing::instrument]`: it instruments the function as written, then the key is injected.
#[tracing::instrument(skip(key))]
#[side_effect(key = "customer_id")]
async fn charge(key: &IdempotencyKey, customer_id: &str, amount_cents: u64) -> Result<String, PayError> {
    tracing::info!("charging");
    Ok(format!("{amount_cents} {key}"))
}

/// Over it: it instruments the wrapper, whose signature has no key.
#[side_effect(key = "customer_id")]
#[tracing::instrument]
async fn refund(key: &IdempotencyKey, customer_id: &str) -> Result<String, PayError> {
    Ok(key.to_string())
}

#[tracing::instrument]
#[read_only]
async fn balance(customer_id: &str) -> Result<u64, PayError> {
    Ok(100)
}

fn main() {
    let idem = Idem::new(MemoryStore::new());
    let out = block_on(idem.scope(charge("cus_1", 4200))).unwrap();
    let key = IdempotencyKey::derive("charge", &[("customer_id", &"cus_1")]);
    assert_eq!(out, format!("4200 {key}"));
    let out = block_on(idem.scope(refund("cus_1"))).unwrap();
    assert_eq!(out, IdempotencyKey::derive("refund", &[("customer_id", &"cus_1")]).to_string());
    assert_eq!(block_on(balance("cus_1")).unwrap(), 100);
}
