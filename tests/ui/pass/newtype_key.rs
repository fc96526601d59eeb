// A user's newtype is a key field by delegating `KeyPart`; it keys like its inner value.
#![deny(warnings)] // A new warning in an expansion fails the case (issue 16).
use idemkit::{Idem, IdempotencyKey, KeyPart, KeyValue, MemoryStore, side_effect};

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

#[derive(Clone, Debug)]
struct CustomerId(String);

impl KeyPart for CustomerId {
    fn key_value(&self) -> KeyValue<'_> {
        self.0.key_value()
    }
}

#[side_effect(key = "customer_id, purpose, period")]
async fn charge(key: &IdempotencyKey, customer_id: CustomerId, purpose: &str, period: &str) -> Result<String, PayError> {
    let _ = (customer_id, purpose, period);
    Ok(key.to_string())
}

fn main() {
    let idem = Idem::new(MemoryStore::new());
    let key = block_on(idem.scope(charge(CustomerId("cus_1".into()), "subscription", "2026-11"))).unwrap();
    assert_eq!(key, "32e00e40-1a53-8058-93c7-e9d1adc8ecaa");
}
