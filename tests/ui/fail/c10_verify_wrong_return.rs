// C10: the verify function answers the tool's own result, not whether the attempt took effect.
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
async fn charge(key: &IdempotencyKey, customer_id: &str, cents: u64) -> Result<Receipt, PayError> {
    let _ = (key, customer_id);
    Ok(Receipt(cents))
}

async fn was_charged(key: &IdempotencyKey, customer_id: &str, cents: u64) -> Result<Receipt, PayError> {
    let _ = (key, customer_id);
    Ok(Receipt(cents))
}

fn main() {
    let _ = Verified::<Receipt>::Unknown;
}
