use idemkit::{Classify, Failure, side_effect};

#[derive(Debug)]
struct PayError;
impl Classify for PayError {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}

#[side_effect(key = "customer_id")]
async fn charge(customer_id: &str) -> Result<u64, PayError> {
    let _ = customer_id;
    Ok(1)
}

fn main() {}
