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
struct ChargeArgs {
    customer_id: String,
    period: String,
}

// The macro cannot see `ChargeArgs`: rustc reports the field, with the closest one.
#[side_effect(key(args.custmer_id, args.period))]
async fn charge(args: ChargeArgs) -> Result<u64, PayError> {
    let _ = args;
    Ok(1)
}

fn main() {}
