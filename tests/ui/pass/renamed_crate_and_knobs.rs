// The facade under another name (`crate = ...`), the list form of `key`, and every knob.
#![deny(warnings)] // A new warning in an expansion fails the case (issue 16).
use idemkit as idk;
use idk::{Idem, IdempotencyKey, MemoryStore, RetryPolicy};

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

#[idk::side_effect(
    key(customer_id, period),
    crate = idk,
    name = "payments.charge",
    retry = RetryPolicy::default().with_max_attempts(2),
    lease = "1m",
    ttl = "24h",
    in_flight_wait = "250ms"
)]
async fn charge(key: &IdempotencyKey, customer_id: &str, period: &str) -> Result<String, PayError> {
    let _ = (customer_id, period);
    Ok(key.to_string())
}

#[idk::read_only(crate = idk, name = "payments.balance", retry = RetryPolicy::no_retry())]
async fn balance(customer_id: &str) -> Result<u64, PayError> {
    let _ = customer_id;
    Ok(7)
}

fn main() {
    let idem = Idem::new(MemoryStore::new());
    let list = block_on(idem.scope(charge("cus_1", "2026-11"))).unwrap();
    let string_form = IdempotencyKey::derive("payments.charge", &[("customer_id", &"cus_1"), ("period", &"2026-11")]);
    assert_eq!(list, string_form.to_string());
    assert_eq!(block_on(balance("cus_1")).unwrap(), 7);
}
