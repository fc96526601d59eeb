//! The new build of the toolset (see `common.rs`).

mod common;

use common::{PayError, act, report, start};
use idemkit::side_effect;

/// Its key as the old build had it.
#[side_effect(key = "customer_id", resend = false)]
async fn charge_same(customer_id: &str, purpose: &str, amount: u64) -> Result<String, PayError> {
    act("charge_same", customer_id)?;
    Ok(format!(
        "new build charged {customer_id} {amount} for {purpose}"
    ))
}

/// `purpose` added to the key; `previous` names the key the old build derived.
#[side_effect(key = "customer_id, purpose", previous = "customer_id", resend = false)]
async fn charge_rekeyed(customer_id: &str, purpose: &str, amount: u64) -> Result<String, PayError> {
    act("charge_rekeyed", customer_id)?;
    Ok(format!(
        "new build charged {customer_id} {amount} for {purpose}"
    ))
}

/// The outcome with a field the old build's outcomes lack, read as its default.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Receipt {
    id: String,
    #[serde(default)]
    fee_cents: u64,
}

#[side_effect(key = "customer_id", resend = false)]
async fn charge_outcome(customer_id: &str, amount: u64) -> Result<Receipt, PayError> {
    act("charge_outcome", customer_id)?;
    Ok(Receipt {
        id: format!("new-{customer_id}-{amount}"),
        fee_cents: 30,
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let (idem, tool, customer) = start("new").await;
    match tool.as_str() {
        "charge_same" => report(idem.scope(charge_same(&customer, "rent", 500)).await),
        "charge_rekeyed" => report(idem.scope(charge_rekeyed(&customer, "rent", 500)).await),
        "charge_outcome" => report(idem.scope(charge_outcome(&customer, 500)).await),
        other => panic!("no tool {other}"),
    }
}
