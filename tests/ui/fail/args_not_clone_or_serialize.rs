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

/// Neither `Clone` (each attempt gets its arguments anew) nor `Serialize` (fingerprinted).
struct Memo {
    text: String,
}

#[side_effect(key = "customer_id")]
async fn charge(customer_id: &str, memo: Memo) -> Result<u64, PayError> {
    let _ = (customer_id, memo.text);
    Ok(1)
}

fn main() {}
