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
async fn charge(customer_id: &str) -> Result<String, PayError> {
    let request_key = uuid::Uuid::new_v4();
    Ok(format!("{customer_id} {request_key}"))
}

#[side_effect(key = "order_id")]
async fn ship(order_id: u64) -> Result<String, PayError> {
    Ok(format!("{order_id}/{}", uuid::Uuid::new_v4()))
}

fn main() {
    let _ = charge("cus_1");
}
