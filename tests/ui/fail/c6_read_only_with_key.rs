use idemkit::{Classify, Failure, read_only};

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

#[read_only(key = "customer_id")]
async fn balance(customer_id: &str) -> Result<u64, PayError> {
    let _ = customer_id;
    Ok(100)
}

fn main() {
    let _ = balance("cus_1");
}
