// A method on `&self`: a key field of `self`, the runtime from a field of `self` (`idem =`).
#![deny(warnings)] // A new warning in an expansion fails the case (issue 16).
use idemkit::{Idem, IdempotencyKey, MemoryStore, side_effect};
use std::sync::atomic::{AtomicU32, Ordering};

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

struct Payments {
    idem: Idem,
    account_id: u64,
    runs: AtomicU32,
}

impl Payments {
    #[side_effect(key = "self.account_id, customer_id", idem = self.idem, max_attempts = 2, ttl = "7d", in_flight_wait = "2s")]
    async fn charge(&self, key: &IdempotencyKey, customer_id: &str, amount_cents: u64) -> Result<String, PayError> {
        let _ = customer_id;
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(format!("{amount_cents} under {key}"))
    }
}

fn main() {
    let p = Payments { idem: Idem::new(MemoryStore::new()), account_id: 7, runs: AtomicU32::new(0) };
    let first = block_on(p.charge("cus_1", 4200)).unwrap();
    let again = block_on(p.charge("cus_1", 4200)).unwrap();
    assert_eq!(first, again);
    assert_eq!(p.runs.load(Ordering::SeqCst), 1);
    let key = IdempotencyKey::derive("charge", &[("account_id", &7u64), ("customer_id", &"cus_1")]);
    assert_eq!(first, format!("4200 under {key}"));
}
