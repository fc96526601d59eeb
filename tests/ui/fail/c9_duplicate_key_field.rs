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

#[side_effect(key = "customer_id, period, customer_id")]
async fn charge(customer_id: &str, period: &str) -> Result<u64, PayError> {
    let _ = (customer_id, period);
    Ok(1)
}

#[side_effect(key(customer_id, period, customer_id))]
async fn refund(customer_id: &str, period: &str) -> Result<u64, PayError> {
    let _ = (customer_id, period);
    Ok(1)
}

fn main() {}
