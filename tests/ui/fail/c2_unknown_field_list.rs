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

#[side_effect(key(custmer_id, period))]
async fn charge(key: &IdempotencyKey, customer_id: &str, period: &str) -> Result<u64, PayError> {
    let _ = (key, customer_id, period);
    Ok(1)
}

fn main() {
    let _ = charge("cus_1", "2026-11");
}
