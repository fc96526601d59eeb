// An `impl Trait` argument that is fingerprinted but not `Serialize` (issue 16: rustc's own
// advice named `common::_::_serde::Serialize`, a path from inside serde's derive).
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

#[side_effect(key = "customer_id")]
async fn charge(customer_id: &str, memo: impl AsRef<str> + Clone) -> Result<u64, PayError> {
    let _ = (customer_id, memo.as_ref());
    Ok(1)
}

fn main() {}
