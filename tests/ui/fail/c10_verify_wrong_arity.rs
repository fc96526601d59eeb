// C10: a method's verify function leaves out the key the tool takes.
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

struct Payments;

impl Payments {
    #[side_effect(key = "customer_id", verify = Self::was_charged)]
    async fn charge(&self, key: &IdempotencyKey, customer_id: &str, cents: u64) -> Result<Receipt, PayError> {
        let _ = (key, customer_id);
        Ok(Receipt(cents))
    }

    async fn was_charged(&self, customer_id: &str, cents: u64) -> Result<Verified<Receipt>, PayError> {
        let _ = (customer_id, cents);
        Ok(Verified::Unknown)
    }
}

fn main() {}
