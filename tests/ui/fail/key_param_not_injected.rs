// Issue 16: a parameter that claims to be the key but is not the injected `&IdempotencyKey`
// would be a key the caller passes in (and can mint per call).
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
async fn charge_with_text_key(key: &str, customer_id: &str) -> Result<u64, PayError> {
    let _ = (key, customer_id);
    Ok(1)
}

#[side_effect(key = "customer_id")]
async fn charge_with_owned_key(idempotency: IdempotencyKey, customer_id: &str) -> Result<u64, PayError> {
    let _ = (idempotency, customer_id);
    Ok(1)
}

fn main() {}
