use idemkit::{Classify, Failure, side_effect};

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

#[side_effect(key = "customer_id", lease = "30s", ttl = "10s")]
async fn charge(customer_id: &str) -> Result<u64, PayError> {
    let _ = customer_id;
    Ok(1)
}

fn main() {
    let _ = charge("cus_1");
}
