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

/// A handle, as a foreign HTTP client is: neither data of the operation nor `Serialize`.
#[derive(Clone)]
struct Client {
    base_url: String,
}

/// Issue 39 #3: the error says that a handle belongs in `&self`, not in the arguments.
#[side_effect(key = "customer_id")]
async fn charge(http: &Client, customer_id: &str, cents: u64) -> Result<u64, PayError> {
    let _ = (&http.base_url, customer_id);
    Ok(cents)
}

fn main() {}
