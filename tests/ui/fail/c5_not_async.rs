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

#[side_effect(key = "customer_id")]
fn charge(key: &IdempotencyKey, customer_id: &str) -> Result<u64, PayError> {
    let _ = (key, customer_id);
    Ok(1)
}

fn main() {
    let _ = charge("cus_1");
}
