//! The old build of the toolset (see `common.rs`).

mod common;

use common::{PayError, act, report, start};
use idemkit::side_effect;

/// Its key stays as it is in the new build.
#[side_effect(key = "customer_id", resend = false)]
async fn charge_same(customer_id: &str, purpose: &str, amount: u64) -> Result<String, PayError> {
    act("charge_same", customer_id)?;
    Ok(format!(
        "old build charged {customer_id} {amount} for {purpose}"
    ))
}

/// The new build adds `purpose` to its key.
#[side_effect(key = "customer_id", resend = false)]
async fn charge_rekeyed(customer_id: &str, purpose: &str, amount: u64) -> Result<String, PayError> {
    act("charge_rekeyed", customer_id)?;
    Ok(format!(
        "old build charged {customer_id} {amount} for {purpose}"
    ))
}

/// The outcome as the old build stores it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Receipt {
    id: String,
}

/// The new build adds a field to its outcome.
#[side_effect(key = "customer_id", resend = false)]
async fn charge_outcome(customer_id: &str, amount: u64) -> Result<Receipt, PayError> {
    act("charge_outcome", customer_id)?;
    Ok(Receipt {
        id: format!("old-{customer_id}-{amount}"),
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let (idem, tool, customer) = start("old").await;
    match tool.as_str() {
        "charge_same" => report(idem.scope(charge_same(&customer, "rent", 500)).await),
        "charge_rekeyed" => report(idem.scope(charge_rekeyed(&customer, "rent", 500)).await),
        "charge_outcome" => report(idem.scope(charge_outcome(&customer, 500)).await),
        other => panic!("no tool {other}"),
    }
}
