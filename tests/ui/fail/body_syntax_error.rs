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

// A body that does not parse: the compiler says where, as it would without the attribute (the
// attribute keeps the body as tokens and does not parse it).
#[side_effect(key = "customer_id")]
async fn charge(customer_id: &str) -> Result<String, PayError> {
    let receipt = ;
    Ok(format!("{customer_id} {receipt}"))
}

fn main() {
    let _ = charge("cus_1");
}
