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
async fn charge(key: &IdempotencyKey, customer_id: &str) -> u64 {
    let _ = (key, customer_id);
    1
}

#[side_effect(key = "customer_id")]
async fn refund(customer_id: &str) -> Option<u64> {
    let _ = customer_id;
    Some(1)
}

fn main() {
    let _ = charge("cus_1");
    let _ = refund("cus_1");
}
