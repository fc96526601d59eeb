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

use std::collections::HashMap;

#[side_effect(key = "customer_id, amount")]
async fn charge_float(customer_id: &str, amount: f64) -> Result<u64, PayError> {
    let _ = (customer_id, amount);
    Ok(1)
}

#[side_effect(key(customer_id, coupon))]
async fn charge_option(customer_id: &str, coupon: Option<u64>) -> Result<u64, PayError> {
    let _ = (customer_id, coupon);
    Ok(1)
}

#[side_effect(key(items))]
async fn order(items: HashMap<String, u32>) -> Result<u64, PayError> {
    let _ = items;
    Ok(1)
}

fn main() {}
