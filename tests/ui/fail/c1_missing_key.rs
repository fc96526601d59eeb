use idemkit::{Classify, Failure, IdempotencyKey, side_effect};

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

#[side_effect]
async fn charge(key: &IdempotencyKey, customer_id: &str, amount_cents: u64) -> Result<u64, PayError> {
    let _ = (key, customer_id);
    Ok(amount_cents)
}

fn main() {
    // The item is still emitted, without the injected key: no cascade at the call.
    let _ = charge("cus_1", 4200);
}
