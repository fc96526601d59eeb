// Key paths into a struct argument; `name =` pins the tool's name in the key.
#![deny(warnings)] // A new warning in an expansion fails the case (issue 16).
use idemkit::{Idem, IdempotencyKey, MemoryStore, side_effect};
use serde::Serialize;

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

#[derive(Clone, Serialize)]
struct ChargeArgs {
    customer: Customer,
    period: String,
    amount_cents: u64,
}

#[derive(Clone, Serialize)]
struct Customer {
    id: String,
}

#[side_effect(key = "args.customer.id, args.period", name = "payments.charge")]
async fn charge(key: &IdempotencyKey, args: &ChargeArgs) -> Result<String, PayError> {
    Ok(format!("{} {key}", args.amount_cents))
}

fn main() {
    let idem = Idem::new(MemoryStore::new());
    let args = ChargeArgs { customer: Customer { id: "cus_1".into() }, period: "2026-11".into(), amount_cents: 4200 };
    let out = block_on(idem.scope(charge(&args))).unwrap();
    let key = IdempotencyKey::derive("payments.charge", &[("id", &"cus_1"), ("period", &"2026-11")]);
    assert_eq!(out, format!("4200 {key}"));
    let info = idemkit::tools().find(|t| t.name == "payments.charge").unwrap();
    assert_eq!(info.key_fields, ["id", "period"]);
}
