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

#[side_effect(key = "")]
async fn charge(customer_id: &str) -> Result<u64, PayError> {
    let _ = customer_id;
    Ok(1)
}

#[side_effect(key())]
async fn refund(customer_id: &str) -> Result<u64, PayError> {
    let _ = customer_id;
    Ok(1)
}

fn main() {}
