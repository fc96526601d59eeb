use idemkit::side_effect;

#[derive(Debug)]
struct PayError;
impl From<idemkit::Error> for PayError {
    fn from(_: idemkit::Error) -> Self {
        PayError
    }
}

#[side_effect(key = "customer_id")]
async fn charge(customer_id: &str) -> Result<u64, PayError> {
    let _ = customer_id;
    Ok(1)
}

fn main() {}
