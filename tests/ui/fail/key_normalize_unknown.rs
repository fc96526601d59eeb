// A key normalisation idemkit does not know, and one around a non-text field.
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

#[side_effect(key = "lower(customer_name)")]
async fn misspelt(customer_name: &str) -> Result<u64, PayError> {
    let _ = customer_name;
    Ok(1)
}

#[side_effect(key(nfc(order_id)))]
async fn not_text(order_id: u64) -> Result<u64, PayError> {
    Ok(order_id)
}

fn main() {}
