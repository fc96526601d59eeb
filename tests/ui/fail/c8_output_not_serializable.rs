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

#[derive(Debug)]
struct Receipt {
    id: String,
}

#[side_effect(key = "customer_id")]
async fn charge(customer_id: &str) -> Result<Receipt, PayError> {
    Ok(Receipt { id: customer_id.to_owned() })
}

fn main() {}
