// Issue 16: errors the way agent code writes them, without a newtype: `anyhow::Result<T>` and
// `Result<T, anyhow::Error>` with `?`, `bail!` and `ensure!`, `Box<dyn Error + Send + Sync>`, and
// a crate-wide one-argument `Result<T>` alias. Warning-free too.
#![deny(warnings)]

use anyhow::Context;
use idemkit::{Classify, Failure, Idem, MemoryStore, read_only, side_effect};

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

mod errors {
    pub type Result<T> = std::result::Result<T, super::PayError>;
}

async fn provider(customer_id: &str, cents: u64) -> std::io::Result<String> {
    Ok(format!("{customer_id}:{cents}"))
}

#[side_effect(key = "customer_id")]
async fn charge(customer_id: &str, cents: u64) -> anyhow::Result<String> {
    anyhow::ensure!(cents > 0, "nothing to charge");
    // A lost response may have charged: say so, and the retry keeps the key.
    let receipt = provider(customer_id, cents).await.context(Failure::Ambiguous)?;
    Ok(receipt)
}

#[side_effect(key = "customer_id")]
async fn refund(customer_id: &str) -> Result<String, anyhow::Error> {
    if customer_id.is_empty() {
        anyhow::bail!("no customer to refund");
    }
    Ok(format!("refunded {customer_id}"))
}

#[side_effect(key = "order_id")]
async fn ship(order_id: u64) -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
    let label = provider("ship", order_id).await?;
    Ok(label.len() as u64)
}

#[side_effect(key = "customer_id")]
async fn aliased(customer_id: &str) -> errors::Result<usize> {
    Ok(customer_id.len())
}

#[read_only]
async fn balance(customer_id: &str) -> anyhow::Result<u64> {
    Ok(customer_id.len() as u64)
}

fn main() {
    let declined = anyhow::anyhow!("card declined").context(Failure::Permanent);
    assert_eq!(declined.classify(), Failure::Permanent);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(Idem::new(MemoryStore::new()).scope(async {
            assert_eq!(charge("cus_1", 4200).await.unwrap(), "cus_1:4200");
            assert_eq!(charge("cus_1", 4200).await.unwrap(), "cus_1:4200", "a replay");
            assert_eq!(refund("cus_1").await.unwrap(), "refunded cus_1");
            assert_eq!(ship(7).await.unwrap(), 6);
            assert_eq!(aliased("cus_1").await.unwrap(), 5);
            assert_eq!(balance("cus_1").await.unwrap(), 5);
        }));
}
