// C10: the verify function is not `async`.
use idemkit::{Classify, Failure, IdempotencyKey, Verified, side_effect};

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Receipt(u64);

#[derive(Debug)]
struct PayError;
impl Classify for PayError {
    fn classify(&self) -> Failure {
        Failure::Ambiguous
    }
}
impl From<idemkit::Error> for PayError {
    fn from(_: idemkit::Error) -> Self {
        PayError
    }
}

#[side_effect(key = "customer_id", verify = was_charged)]
async fn charge(customer_id: &str, cents: u64) -> Result<Receipt, PayError> {
    let _ = customer_id;
    Ok(Receipt(cents))
}

fn was_charged(customer_id: &str, cents: u64) -> Result<Verified<Receipt>, PayError> {
    let _ = (customer_id, cents);
    Ok(Verified::Unknown)
}

fn main() {
    let _: Option<&IdempotencyKey> = None;
}
