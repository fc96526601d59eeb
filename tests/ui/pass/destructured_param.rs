// A destructuring parameter (rmcp's `Parameters(ChargeReq { .. })` style): its bindings are key fields.
#![deny(warnings)] // A new warning in an expansion fails the case (issue 16).
use idemkit::{Idem, IdempotencyKey, MemoryStore, side_effect};

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

#[derive(Clone)]
struct Parameters<P>(P);

#[derive(Clone)]
struct ChargeReq {
    customer_id: String,
    period: String,
    amount_cents: u64,
    memo: std::cell::Cell<u8>,
}

#[side_effect(key = "customer_id, period")]
async fn charge(
    key: &IdempotencyKey,
    Parameters(ChargeReq { customer_id, period, mut amount_cents, .. }): Parameters<ChargeReq>,
) -> Result<String, PayError> {
    amount_cents += 1;
    Ok(format!("{customer_id} {period} {amount_cents} {key}"))
}

fn main() {
    let idem = Idem::new(MemoryStore::new());
    let req = ChargeReq { customer_id: "cus_1".into(), period: "2026-11".into(), amount_cents: 4199, memo: Default::default() };
    let out = block_on(idem.scope(charge(Parameters(req.clone())))).unwrap();
    let key = IdempotencyKey::derive("charge", &[("customer_id", &"cus_1"), ("period", &"2026-11")]);
    assert_eq!(out, format!("cus_1 2026-11 4200 {key}"));
    // Another amount under the same key is refused: the bindings that are not key fields are fingerprinted.
    let other = ChargeReq { amount_cents: 1, ..req };
    assert!(block_on(idem.scope(charge(Parameters(other)))).unwrap_err().0.contains("different arguments"));
}
