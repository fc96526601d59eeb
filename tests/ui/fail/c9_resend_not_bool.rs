// C9: `resend` is `true` or `false`; the error is at the value, and the other arguments are read.
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

#[side_effect(key = "customer_id", resend = "yes", max_attempts = 3)]
async fn charge(key: &IdempotencyKey, customer_id: &str) -> Result<Receipt, PayError> {
    let _ = (key, customer_id);
    Ok(Receipt(1))
}

#[side_effect(key = "customer_id", resend = always)]
async fn refund(customer_id: &str) -> Result<Receipt, PayError> {
    let _ = customer_id;
    Ok(Receipt(1))
}

fn main() {
    let _ = Verified::<Receipt>::Unknown;
}
