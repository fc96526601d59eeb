// A read-only tool needs no verification, and has no `resend` to set.
use idemkit::{Classify, Failure, Verified, read_only};

#[derive(Debug)]
struct Unavailable;
impl Classify for Unavailable {
    fn classify(&self) -> Failure {
        Failure::Transient
    }
}

#[read_only(verify = was_read)]
async fn balance(customer_id: &str) -> Result<u64, Unavailable> {
    let _ = customer_id;
    Ok(1)
}

#[read_only(resend = true)]
async fn history(customer_id: &str) -> Result<u64, Unavailable> {
    let _ = customer_id;
    Ok(1)
}

async fn was_read(customer_id: &str) -> Result<Verified<u64>, Unavailable> {
    let _ = customer_id;
    Ok(Verified::Unknown)
}

fn main() {
    let _ = was_read("cus_1");
}
