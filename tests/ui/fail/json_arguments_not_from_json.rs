// `json` asks for the tool to be called by name with JSON arguments (issue 17): what cannot come
// from a JSON object is an error at that token, and only because `json` was asked for (the same
// signatures without `json` compile: pass/generics.rs, method_on_self.rs, destructured_param.rs).
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
struct Req {
    customer_id: String,
}

#[side_effect(key = "customer_id", json)]
async fn generic<C: AsRef<str> + serde::Serialize + Clone + Send>(customer_id: &str, memo: C) -> Result<u64, PayError> {
    let _ = (customer_id, memo.as_ref());
    Ok(1)
}

#[side_effect(key = "customer_id", json)]
async fn borrowed(customer_id: &str, memo: Option<&str>, tags: &mut Vec<String>) -> Result<u64, PayError> {
    let _ = (customer_id, memo, tags);
    Ok(1)
}

#[side_effect(key = "customer_id", json)]
async fn destructured(Req { customer_id }: Req) -> Result<u64, PayError> {
    let _ = customer_id;
    Ok(1)
}

struct Payments;

impl Payments {
    #[side_effect(key = "customer_id", json)]
    async fn charge(&self, customer_id: &str) -> Result<u64, PayError> {
        let _ = customer_id;
        Ok(1)
    }
}

fn main() {}
