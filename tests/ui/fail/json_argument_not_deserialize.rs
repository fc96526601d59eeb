// `json`: an argument whose type cannot be read from JSON (no `Deserialize`, no `JsonSchema`) is
// reported at that type, by rustc.
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

#[derive(Clone, serde::Serialize)]
struct Memo(String);

#[side_effect(key = "customer_id", json)]
async fn charge(customer_id: &str, memo: Memo) -> Result<u64, PayError> {
    let _ = (customer_id, memo);
    Ok(1)
}

fn main() {}
