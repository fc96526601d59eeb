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

// The key gained `purpose`; `previous` misspells the field the key had.
#[side_effect(key = "customer_id, purpose", previous = "custmer_id")]
async fn charge(customer_id: &str, purpose: &str, amount: u64) -> Result<u64, PayError> {
    let _ = (customer_id, purpose);
    Ok(amount)
}

fn main() {
    let _ = charge("cus_1", "rent", 500);
}
